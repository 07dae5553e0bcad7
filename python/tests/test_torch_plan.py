"""Plans real models at half their activation peak with the edgecost CLI (board preset costs, so
nothing is measured), applies them, and checks gradients and the saved-tensor peak."""

import os
import sys
import tempfile
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torchvision  # noqa: E402

import edgecost.torch as ec  # noqa: E402
from edgecost.schedule import KEEP  # noqa: E402


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(16, 32)
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


class SmallNet(torch.nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        layers = [torch.nn.Linear(16, hidden), torch.nn.ReLU()]
        for _ in range(5):
            layers += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
        self.body = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(hidden, 4)

    def forward(self, x):
        return self.head(self.body(x))


def small_net():
    """For `python3 -m edgecost.torch tests.test_torch_plan:small_net`."""
    torch.manual_seed(0)
    return SmallNet(), torch.randn(32, 16)


class ProfileRetryTest(unittest.TestCase):
    def test_a_table_refused_for_disturbed_ops_is_measured_again_then_kept_marked(self):
        from edgecost import cli

        class Busy:
            def __init__(self, refusals):
                self.calls, self.refusals = [], refusals

            def profile(self, model, accept_noisy=False, progress=True):
                self.calls.append(accept_noisy)
                if not accept_noisy and len(self.calls) <= self.refusals:
                    raise cli.EdgecostError("busy  1 op measured while the CPU was busy: re-run when the device is "
                                            "idle, or `--accept-noisy`")

        once = Busy(refusals=1)
        ec._profile(once, "m", accept_noisy=False, progress=False)
        self.assertEqual(once.calls, [False, False])
        twice = Busy(refusals=2)
        with self.assertWarnsRegex(RuntimeWarning, "disturbed some measurements twice"):
            ec._profile(twice, "m", accept_noisy=False, progress=False)
        self.assertEqual(twice.calls, [False, False, True])

        class Broken:
            def profile(self, model, accept_noisy=False, progress=True):
                raise cli.EdgecostError("no such model")

        with self.assertRaisesRegex(cli.EdgecostError, "no such model"):
            ec._profile(Broken(), "m", accept_noisy=False, progress=False)


class PlanAppliedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        warnings.filterwarnings("ignore")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.db = os.path.join(cls.tmp.name, "costs.db")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def plan_and_verify(self, model, batch):
        torch.manual_seed(0)
        plan = ec.plan(model, batch, activation_budget="50%", runtime_budget="2x", platform="a72", db=self.db,
                       time_limit_s=2, progress=False)
        self.assertLessEqual(plan.predicted_peak_bytes, plan.schedule.plain_activation_peak_bytes // 2 + 1)
        self.assertTrue(plan.schedule.changed(), "at half the peak the plan must recompute or page something")
        self.assertTrue(all(d.module for d in plan.schedule.changed() if not d.backward and d.name != "loss"))
        result = plan.verify(model, batch)
        print(f"\n{type(model).__name__}: gradients identical {result.identical} (max rel err "
              f"{result.max_relative_error:.2g}), saved-tensor peak {result.saved_peak_bytes} B, plain "
              f"{result.plain_saved_peak_bytes} B, planned {plan.predicted_peak_bytes} B (as realized "
              f"{plan.realized_peak_bytes} B), op state {result.state_peak_bytes} B; "
              f"{len(plan.realization.moved(plan.schedule))} forward choices moved")
        self.assertTrue(result.ok, f"max relative error {result.max_relative_error}")
        self.assertLessEqual(result.saved_peak_bytes, plan.predicted_peak_bytes)
        self.assertLessEqual(result.saved_peak_bytes, plan.realized_peak_bytes)
        self.assertEqual(result.report.predicted_peak_bytes, plan.realized_peak_bytes)
        self.assertLess(result.saved_peak_bytes, result.plain_saved_peak_bytes)
        return plan

    def test_a_ram_budget_counts_the_optimizers_state(self):
        def plan_folders():
            return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("edgecost-plan-")}

        before = plan_folders()
        model = Encoder()
        adamw = torch.optim.AdamW(model.parameters())
        self.assertEqual(ec.optimizer_state_tensors(adamw), 2)
        self.assertEqual(ec.optimizer_state_tensors(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)), 1)
        self.assertEqual(ec.optimizer_state_tensors("sgd"), 0)
        with self.assertRaises(ValueError):
            ec.optimizer_state_tensors("lion")
        plan = ec.plan(model, torch.randn(2, 8, 16), ram_budget="2GB", runtime_budget="2x", platform="a72",
                       db=self.db, time_limit_s=2, progress=False, optimizer=adamw)
        self.assertEqual(plan.schedule.raw["request"]["optimizerStateTensors"], 2)
        memory = plan.schedule.raw["memory"]
        self.assertEqual(int(memory["optimizerBytes"]), 2 * int(memory["paramBytes"]))  # every parameter trains
        # Issue 40: the exported model's temporary folder is gone, also after a plan that fails.
        with self.assertRaises(Exception):
            ec.plan(model, torch.randn(2, 8, 16), ram_budget="1kB", platform="a72", db=self.db, time_limit_s=2,
                    progress=False)
        self.assertEqual(plan_folders(), before)

    def test_a_plan_made_ahead_of_time_loads_and_checks_its_model(self):
        """Planned in another process from MODULE:FUNCTION, saved, loaded without exporting or solving,
        applied to the same model with the same gradients; a changed model is refused, naming the change."""
        import subprocess
        path = os.path.join(self.tmp.name, "small.plan.json")
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(here, ".."), os.path.join(here, "..", "..")]))
        done = subprocess.run([sys.executable, "-m", "edgecost.torch", "python.tests.test_torch_plan:small_net",
                               "--activation-budget", "50%", "--runtime-budget", "2x", "--platform", "a72",
                               "--db", self.db, "--time-limit-s", "2", "--out", path],
                              capture_output=True, text=True, env=env, cwd=os.path.join(here, "..", ".."))
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn("written", done.stdout)
        loaded = ec.load_plan(path)
        model, batch = small_net()
        result = loaded.verify(model, batch)
        self.assertTrue(result.ok, f"max relative error {result.max_relative_error}")
        self.assertLessEqual(result.saved_peak_bytes, loaded.predicted_peak_bytes)
        with self.assertRaisesRegex(ValueError, "was made for another model.*parameters: was body.0.weight"):
            loaded.apply(SmallNet(hidden=48))
        with open(os.path.join(self.tmp.name, "other.json"), "w") as f:
            f.write("{}")
        with self.assertRaisesRegex(ValueError, "not an edgecost plan"):
            ec.load_plan(os.path.join(self.tmp.name, "other.json"))

    def test_a_sparse_layer_update_plans_and_trains_the_named_modules_alone(self):
        model = Encoder()
        trained = ec.freeze(model, "layers:head")
        self.assertEqual([id(p) for p in trained], [id(p) for p in model.head.parameters()])
        self.assertFalse(model.embed.weight.requires_grad)
        with self.assertRaises(ValueError):
            ec.freeze(Encoder(), "layers:nohead")
        with self.assertRaises(ValueError):
            ec.freeze(Encoder(), "last:2")
        with self.assertRaisesRegex(ValueError, "sparse tensor update"):
            ec.freeze(Encoder(), "layers:head:0.25")
        adamw = torch.optim.AdamW(trained)
        plan = ec.plan(model, torch.randn(2, 8, 16), ram_budget="2GB", runtime_budget="2x", platform="a72",
                       db=self.db, time_limit_s=2, progress=False, optimizer=adamw, trainable="layers:head")
        self.assertEqual(plan.schedule.raw["request"]["trainable"], "layers:head")
        memory = plan.schedule.raw["memory"]
        head_bytes = 4 * sum(p.numel() for p in trained)
        self.assertEqual(int(memory["optimizerBytes"]), 2 * head_bytes)  # AdamW's two moments, of the head alone
        self.assertEqual(int(memory["gradientBytes"]), head_bytes)

    def test_resnet18(self):
        # In-place ReLU saves its result, which is the batch norm's output; max pool saves int64
        # indices: both paged with the module's output when the plan pages it.
        plan = self.plan_and_verify(torchvision.models.resnet18(num_classes=10), torch.randn(2, 3, 32, 32))
        # Every choice is realized as planned (paging), so `edgecost check` replays the realized
        # stages to the plan's own figures.
        self.assertFalse(plan.realization.moved(plan.schedule))
        self.assertEqual(plan.realized_peak_bytes, plan.predicted_peak_bytes)
        self.assertAlmostEqual(plan.realized_step_time_s, plan.predicted_step_time_s, places=9)

    def test_mobilenet_v2(self):
        plan = self.plan_and_verify(torchvision.models.mobilenet_v2(num_classes=10), torch.randn(2, 3, 32, 32))
        self.assertTrue(plan.realization.segments)
        # Checkpointing whole modules recomputes more than the plan: the replay of what runs says so.
        self.assertGreater(plan.realized_step_time_s, plan.predicted_step_time_s)

    def test_efficientnet_b0(self):
        # Exported with stochastic depth at p=0; in-place SiLU saves a copy of its input.
        self.plan_and_verify(torchvision.models.efficientnet_b0(num_classes=10), torch.randn(2, 3, 32, 32))

    def test_transformer_encoder(self):
        self.plan_and_verify(Encoder(), torch.randn(2, 8, 16))

    def test_applied_leaves_the_model_as_it_was_and_trains(self):
        model = torchvision.models.mobilenet_v2(num_classes=10)
        batch = torch.randn(2, 3, 32, 32)
        plan = ec.plan(model, batch, activation_budget="50%", runtime_budget="2x", platform="a72", db=self.db,
                       time_limit_s=2, progress=False)
        keys = set(model.state_dict())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        with plan.applied(model):
            for _ in range(2):
                optimizer.zero_grad()
                model(batch).sum().backward()
                optimizer.step()
            self.assertIsNotNone(model.features.forward.__dict__ if "forward" in model.features.__dict__ else None)
        self.assertEqual(len(plan.reports), 2)
        self.assertGreater(plan.reports[-1].saved_peak_bytes, 0)
        self.assertNotIn("forward", model.features.__dict__)
        self.assertEqual(keys, set(model.state_dict()))
        # Batch norm counted each batch once, not again when recomputed.
        self.assertEqual(model.features[0][1].num_batches_tracked.item(), 2)


class ProcessMemoryTest(unittest.TestCase):
    """The training process's real memory, each configuration in a fresh process with a user's own
    loop (AdamW, cross-entropy), through python/examples/bench_process_memory.py's worker."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.db = os.path.join(cls.tmp.name, "costs.db")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_worker(self, config, model="resnet18"):
        import json
        import subprocess
        bench = os.path.join(os.path.dirname(__file__), "..", "examples", "bench_process_memory.py")
        done = subprocess.run([sys.executable, bench, "--worker", config, "--model", model, "--batch", "16",
                               "--size", "64", "--steps", "3", "--runtime-budget", "3x", "--platform", "a72",
                               "--db", self.db], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])

    def test_the_plan_predicts_the_process_peak(self):
        """Measured against the peak RSS its trial steps predicted. Which of two processes (or trials)
        peaks higher varies by tens of MB with glibc's heap layout, so the saving is the benchmark's."""
        plain, planned = self.run_worker("plain"), self.run_worker("50%")
        print(f"\nResNet18, batch 16, 64x64, AdamW: VmHWM plain {plain['peak_rss'] / 1e6:.1f} MB (predicted "
              f"{planned['predicted_plain_peak_rss'] / 1e6:.1f} MB), planned at 50% {planned['peak_rss'] / 1e6:.1f} MB "
              f"(predicted {planned['predicted_peak_rss'] / 1e6:.1f} MB)")
        self.assertTrue(planned["identical"])
        for measured, predicted in ((plain["peak_rss"], planned["predicted_plain_peak_rss"]),
                                    (planned["peak_rss"], planned["predicted_peak_rss"])):
            self.assertLess(abs(measured - predicted), 0.15 * measured)  # heap layout: +-30 MB run to run

    def test_trials_over_a_budget_lower_the_activation_budget_and_tighten_the_runtime(self):
        trials = ec.Trials(ram_budget_bytes=100, runtime_budget_s=1.0)
        asked = []
        # Each trial's process rise and step time, in the order the plans are solved.
        outcomes = iter([(70, 0.5), (55, 2.0), (40, 0.9)])

        def solved(activation_budget, runtime):
            asked.append((activation_budget, runtime["runtimeBudgetMultiple"]))
            rise, step_s = next(outcomes)
            trials.planned = ec.Trial(peak_rise_bytes=rise, step_s=step_s)
            return len(asked)

        self.assertEqual(ec._fitted(solved, 30, {"runtimeBudgetMultiple": 3.0}, 50, trials), 3)
        self.assertEqual(asked, [(30, 3.0), (10, 3.0), (5, 1.5)])
        # A step over time at the tightest budget a schedule can have (one plain step) is kept.
        trials.planned = ec.Trial(peak_rise_bytes=40, step_s=2.0)
        self.assertEqual(ec._fitted(lambda b, r: r, 5, {"runtimeBudgetMultiple": 1.0}, 50, trials),
                         {"runtimeBudgetMultiple": 1.0})
        # Lowered past any schedule, the smallest one (None) is tried once before giving up.
        trials.planned = ec.Trial(peak_rise_bytes=60, step_s=0.1)
        tried = []
        with self.assertRaisesRegex(Exception, "no plan kept its trial steps within the budgets"):
            ec._fitted(lambda b, r: tried.append(b), 5, {"runtimeBudgetMultiple": 3.0}, 50, trials)
        self.assertEqual(tried, [5, None])
        # A budget below every schedule (the solver: infeasible) goes to the smallest schedule.
        from edgecost import cli

        def below_the_smallest(budget, runtime):
            tried.append(budget)
            if budget is not None:
                raise cli.EdgecostError("status         infeasible (proven)")
            trials.planned = ec.Trial(peak_rise_bytes=45, step_s=0.1)
            return "smallest"
        tried.clear()
        self.assertEqual(ec._fitted(below_the_smallest, 5, {"runtimeBudgetMultiple": 3.0}, 50, trials), "smallest")
        self.assertEqual(tried, [5, None])

    def test_planning_leaves_the_training_process_peak_alone(self):
        """The export (several times a step's memory) and the trial steps run in forked copies."""
        import subprocess
        script = f"""
import sys, warnings
sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..')!r})
warnings.filterwarnings("ignore")
import torch, torchvision
import edgecost.torch as ec
from edgecost.process import peak_rss_bytes, rss_bytes
model, batch = torchvision.models.mobilenet_v2(num_classes=10), torch.randn(8, 3, 64, 64)
before = peak_rss_bytes()
plan = ec.plan(model, batch, activation_budget="50%", runtime_budget="3x", platform="a72", db={self.db!r},
               time_limit_s=5, progress=False)
print(before, peak_rss_bytes(), plan.trials.plain.peak_rise_bytes, plan.trials.planned.peak_rise_bytes)
"""
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        before, after, plain_rise, planned_rise = map(int, done.stdout.split()[-4:])
        self.assertLess(after - before, 8 << 20, "planning raised the process's peak RSS")
        self.assertGreater(plain_rise, 0)
        self.assertGreater(planned_rise, 0)


class NodeTimesTest(unittest.TestCase):
    def test_each_leaf_module_is_timed_forward_and_backward(self):
        model, batch = small_net()
        times = ec._ModuleTimes(model)
        for _ in range(2):
            with times:
                model(batch).sum().backward()
            times.end_step()
        leaves = [name for name, m in model.named_modules() if name and not list(m.children())]
        self.assertEqual(sorted(times.forward), sorted(leaves))
        self.assertEqual(sorted(times.backward), sorted(leaves))
        self.assertTrue(all(t > 0 for t in (*times.forward.values(), *times.backward.values())))

    def test_module_times_are_shared_among_its_nodes_and_add_up_to_the_step(self):
        from edgecost.schedule import Schedule
        node = lambda i, module, runtime, phase="PHASE_FORWARD": (  # noqa: E731
            {"index": i, "name": f"n{i}", "phase": phase, "module": module, "inputs": [i - 1] if i else []},
            {"node": i, "runtimeS": runtime})
        nodes, costs = zip(node(0, "", 1.0), node(1, "a", 1.0), node(2, "a", 3.0), node(3, "b", 2.0),
                           node(4, "a", 2.0, "PHASE_BACKWARD"))
        schedule = Schedule({"costTable": {"graph": {"nodes": list(nodes)}, "costs": list(costs)}, "stages": []})
        # a's forward measured 8 s (edgecost: 4), b's 6 s (2), a's backward 2 s; the batch's copy unmeasured.
        trial = ec.Trial(step_s=19.0, module_forward_s={"a": 8.0, "b": 6.0}, module_backward_s={"a": 2.0})
        times = ec._node_runtimes(schedule, trial)
        # Measured 16 s where edgecost says 8: the batch's copy at that ratio, 2 s; all add up to 18, scaled to 19.
        expected = [2.0, 2.0, 6.0, 6.0, 2.0]
        for got, want in zip(times, expected):
            self.assertAlmostEqual(got, want * 19.0 / 18.0)


class RealizedStagesTest(unittest.TestCase):
    def test_checkpoint_and_paging_as_stages(self):
        from edgecost.realize import Realization, realized_stages
        from edgecost.schedule import PAGE, RECOMPUTE, Schedule
        node = lambda i, inputs=(), phase="PHASE_FORWARD": {"index": i, "name": f"n{i}", "phase": phase,
                                                             "inputs": list(inputs), "outputBytes": "8"}
        # 0 batch, 1..4 forward, 5 loss; backward 6..9 reading 4, 3, 2 and 1.
        nodes = [node(0), node(1, [0]), node(2, [1]), node(3, [2]), node(4, [3]), node(5, [4]),
                 node(6, [5, 4], "PHASE_BACKWARD"), node(7, [6, 3], "PHASE_BACKWARD"),
                 node(8, [7, 2], "PHASE_BACKWARD"), node(9, [8, 1], "PHASE_BACKWARD")]
        schedule = Schedule({"costTable": {"graph": {"nodes": nodes}, "costs": []}, "stages": []})
        # Node 1 paged; nodes 3 and 4 one checkpointed part whose output is 4 (its input, 2, the part holds).
        realization = Realization(segments=[], paged_modules=[], segment_nodes=[[3, 4]],
                                  actions={0: "keep", 1: PAGE, 2: "keep", 3: RECOMPUTE, 4: "keep", 5: "keep"})
        stages = realized_stages(schedule, realization)
        self.assertEqual(stages[6]["compute"], [3, 4, 6])  # recomputed when backward first reads the part
        self.assertEqual(stages[2]["pageOut"], [1])
        self.assertEqual(stages[8]["pageIn"], [1])  # read back the stage before its backward reader, 9
        self.assertIn(1, stages[8]["keep"])
        self.assertEqual(stages[5]["keep"], [2, 4, 5])  # 1 on storage, 3 dropped after the forward
        self.assertEqual(stages[5]["onStorage"], [1])


class ScheduleReadingTest(unittest.TestCase):
    def test_decisions_from_stages(self):
        from edgecost.schedule import PAGE, RECOMPUTE, Schedule
        node = lambda i, phase="PHASE_FORWARD", inputs=(): {"index": i, "name": f"n{i}", "phase": phase,
                                                             "inputs": list(inputs), "module": f"m{i}", "outputBytes": "8"}
        message = {"status": "STATUS_OPTIMAL", "costTable": {"graph": {"nodes": [
            node(0), node(1, inputs=[0]), node(2, inputs=[1]), node(3, "PHASE_BACKWARD", [2])]}, "costs": []},
            "stages": [{"compute": [0]}, {"compute": [1], "pageOut": [1]}, {"compute": [2]}, {"compute": [2, 3]}]}
        actions = [d.action for d in Schedule(message).decisions]
        self.assertEqual(actions, [KEEP, PAGE, RECOMPUTE, KEEP])


if __name__ == "__main__":
    unittest.main()
