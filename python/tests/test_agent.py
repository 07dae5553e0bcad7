"""Plans through a real agent: `edgecost serve` started on a temporary Unix socket and database."""

import os
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import edgecost.torch as ec  # noqa: E402
from edgecost import cli  # noqa: E402
from edgecost.agent import Agent, parse_bytes, runtime_budget_fields  # noqa: E402


class AgentPlanTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        warnings.filterwarnings("ignore")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.address = "unix:" + os.path.join(cls.tmp.name, "agent.sock")
        cls.log = open(os.path.join(cls.tmp.name, "agent.log"), "w")
        cls.agent = subprocess.Popen([cli.find_binary(), "--db", os.path.join(cls.tmp.name, "agent.db"), "serve",
                                      "--socket", cls.address[len("unix:"):]], stdout=cls.log, stderr=cls.log)
        deadline = time.monotonic() + 30
        while True:
            try:
                Agent(cls.address).call("CostService", "ListModels", {})
                break
            except cli.EdgecostError:
                if time.monotonic() > deadline or cls.agent.poll() is not None:
                    raise
                time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.agent.terminate()
        cls.agent.wait(timeout=30)
        cls.log.close()
        cls.tmp.cleanup()

    def test_plan_applies_like_the_local_one(self):
        model = torch.nn.Sequential(*[layer for _ in range(6) for layer in (torch.nn.Linear(64, 64), torch.nn.Tanh())])
        batch = torch.randn(8, 64)
        plan = ec.plan(model, batch, activation_budget="50%", runtime_budget="2x", platform="a72", agent=self.address,
                       time_limit_s=2, progress=False)
        self.assertIn(plan.model_name, [m["name"] for m in Agent(self.address).call("CostService", "ListModels", {})
                                        ["models"]])
        self.assertTrue(plan.schedule.changed())
        result = plan.verify(model, batch)
        self.assertTrue(result.identical)
        self.assertLessEqual(result.saved_peak_bytes, plan.predicted_peak_bytes)

    def test_profile_job_with_progress(self):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        agent = Agent(self.address)
        path = os.path.join(self.tmp.name, "tiny.onnx")
        ec._export_onnx(model, torch.randn(2, 8), path)
        agent.add_model("tiny", path)
        self.assertFalse(agent.has_measured_costs("tiny"))
        job = agent.profile("tiny", accept_noisy=True, progress=False)
        self.assertEqual(job["state"], "STATE_SUCCEEDED")
        self.assertTrue(agent.has_measured_costs("tiny"))

    def test_budget_names_over_rpc(self):
        agent = Agent(self.address)
        request = {"model": "linear", "device": "a72", "runtimeBudgetMultiple": 2, "timeLimitS": 5}
        half = agent.call("SolverService", "Solve", dict(request, activationBudgetPercent=50))
        self.assertEqual(half["request"]["activationBudgetPercent"], 50)
        self.assertGreater(int(half["request"]["activationBudgetBytes"]), 0)
        # The deprecated name of the activation budget is still read, as the activation budget.
        old = agent.call("SolverService", "Solve", dict(request, ramBudgetBytes="200000"))
        self.assertEqual(old["request"]["activationBudgetBytes"], "200000")
        self.assertEqual(old["request"]["processRamBudgetBytes"], "0")
        with self.assertRaisesRegex(cli.EdgecostError, "give one budget"):
            agent.call("SolverService", "Solve", dict(request, activationBudgetPercent=50, activationBudgetBytes="1"))

    def test_errors_and_budgets(self):
        with self.assertRaisesRegex(cli.EdgecostError, "not_found"):
            Agent(self.address).call("CostService", "GetCostTable", {"model": "no-such-model"})
        self.assertEqual(parse_bytes("4MB"), 4_000_000)
        self.assertEqual(parse_bytes("2MiB"), 2 << 20)
        self.assertEqual(runtime_budget_fields("120ms"), {"runtimeBudgetS": 0.12})
        self.assertEqual(runtime_budget_fields("1.5x"), {"runtimeBudgetMultiple": 1.5})


if __name__ == "__main__":
    unittest.main()
