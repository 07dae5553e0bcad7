"""Plan a PyTorch training step with edgecost and run it: `plan()` exports the model, has
edgecost measure (or look up) its costs and solve for an energy-optimal schedule under the
budgets; `Plan.apply()` makes autograd keep, recompute or page each saved tensor as planned."""

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from edgecost import cli
from edgecost.agent import AGENT_ENV, Agent, parse_bytes, runtime_budget_fields
from edgecost.process import FORKED_THREADS, PeakMeter, can_fork, file_pagemap, peak_rss_bytes, rss_bytes, run_forked
from edgecost.realize import realize, realized_stages
from edgecost.schedule import PAGE, RECOMPUTE, Schedule


def _export_onnx(model, example_inputs, path):
    # A copy: exporting in training mode runs the forward, which would move batch-norm statistics.
    exported = copy.deepcopy(model).train()
    for module in exported.modules():
        # Stochastic depth (torchvision's EfficientNet) draws a per-sample mask the exporter cannot
        # trace in training mode; at p=0 it is the identity, and the mask is a few bytes per sample.
        if type(module).__name__ == "StochasticDepth":
            module.p = 0.0
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    torch.onnx.export(exported, inputs, path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=13)
    _mark_runs_on_pytorch(path)


def _mark_runs_on_pytorch(path):
    """Tells edgecost's importer that the model trains on PyTorch's kernels (graph/onnx/importer.h,
    kRunsOnKey): it then fuses no batch norm with its activation, so plans map onto PyTorch's ops.
    One metadata_props entry (ModelProto field 14: key 1, value 2) appended to the serialized model,
    which protobuf reads as if it had been written with the rest."""
    def field(number, payload):
        return _varint(number << 3 | 2) + _varint(len(payload)) + payload
    entry = field(1, b"edgecost.runs_on") + field(2, b"pytorch")
    with open(path, "ab") as f:
        f.write(field(14, entry))


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def optimizer_state_tensors(optimizer):
    """The state tensors `optimizer` keeps per trained parameter: a torch.optim object or a name
    ("sgd", "adam", "adamw"), as edgecost's SGD (with momentum: 1), Adam and AdamW (2) keep them."""
    if optimizer is None:
        return 0
    if isinstance(optimizer, str):
        kinds = {"sgd": 0, "adam": 2, "adamw": 2}
        if optimizer.lower() not in kinds:
            raise ValueError(f"optimizer '{optimizer}': one of sgd, adam, adamw, or a torch.optim object")
        return kinds[optimizer.lower()]
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 2
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if any(group.get("momentum", 0) for group in optimizer.param_groups) else 0
    raise ValueError(f"optimizer {type(optimizer).__name__}: edgecost counts the state of SGD, Adam and AdamW")


def freeze(model, trainable):
    """Trains only what `trainable` names, as edgecost's `--trainable` does, and returns the parameters that
    train (for the optimizer); the others get requires_grad=False. "all"; "bias" (every parameter named
    bias: biases and batch-norm shifts); "layers:A,B", the parameters of modules A and B and of the modules
    inside them (names as `model.named_modules()` gives them, and as edgecost shows an ONNX export's)."""
    if trainable == "all":
        trains = lambda name: True  # noqa: E731
    elif trainable == "bias":
        trains = lambda name: name.rsplit(".", 1)[-1] == "bias"  # noqa: E731
    elif trainable.startswith("layers:") and ":" in trainable[7:]:
        raise ValueError(f"trainable={trainable!r}: a share of a layer's output channels (NAME:SHARE) is a sparse "
                         "tensor update edgecost's executor runs; PyTorch's autograd computes whole weight gradients, "
                         "so the bridge trains whole modules (layers:NAME,...)")
    elif trainable.startswith("layers:") and all(trainable[7:].split(",")):
        names = trainable[7:].split(",")
        modules = {name for name, _ in model.named_modules() if name}
        unknown = [n for n in names if n not in modules]
        if unknown:
            raise ValueError(f"trainable names no module {', '.join(unknown)} of {type(model).__name__}; its modules "
                             f"include {', '.join(sorted(modules)[:8])}")
        trains = lambda name: any(name.startswith(n + ".") for n in names)  # noqa: E731
    else:
        raise ValueError(f"trainable={trainable!r}: the PyTorch bridge takes 'all', 'bias' or 'layers:MODULE,...' "
                         "(last:K counts layers in the exported graph's order, which a module tree does not give)")
    trained = []
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(trains(name))
        if trains(name):
            trained.append(parameter)
    return trained


def plan(model, example_inputs, *, activation_budget=None, ram_budget=None, runtime_budget="1.5x", platform=None,
         device="this", db=None, agent=None, time_limit_s=30, progress=True, keep_files=None, accept_noisy_costs=False,
         optimizer=None, trainable="all"):
    """Solves edgecost's schedule for one training step of `model` on `example_inputs`. The export and
    the trial steps run in forked copies of this process, and edgecost in its own: planning never
    raises the peak RSS of the process that trains.

    activation_budget: the saved activations' RAM ("4MB", "3MiB", or "50%" of the plain step's peak);
    ram_budget: instead, the training process's peak RSS: its RSS now, the state `optimizer` (a
    torch.optim object or "sgd", "adam", "adamw") will add, and a step's own rise, measured in forked
    copies of this process until a plan fits. runtime_budget: "1.5x" the plain step, or "120ms".
    platform: a board preset ("a72") whose estimated costs are used instead of measuring `device`
    ("this": this machine, profiled first when its costs are missing). agent: a running agent
    (`edgecost serve`) to plan through, "unix:PATH" or "http://HOST:PORT" with the token in
    $EDGECOST_TOKEN (default: $EDGECOST_AGENT; without either, the local edgecost binary on the
    cost database `db`). keep_files: a directory to keep the ONNX model and schedule in.
    accept_noisy_costs: build the cost table even when other work on the CPU disturbed some
    measurements (`profile --accept-noisy`; they stay marked unreliable). trainable: what trains, as
    freeze() sets it (call it first): the plan leaves out the gradients frozen layers do not need and
    counts gradients and optimizer state for what trains."""
    if (activation_budget is None) == (ram_budget is None):
        raise ValueError("give one of activation_budget (saved activations) or ram_budget (the whole process)")
    ram_budget_bytes = parse_bytes(ram_budget) if ram_budget is not None else 0
    agent = agent or os.environ.get(AGENT_ENV)
    backend = Agent(agent) if agent else cli.Local(db, progress)
    trials = Trials(baseline_rss_bytes=rss_bytes(), ram_budget_bytes=ram_budget_bytes,
                    optimizer_state_bytes=_optimizer_state_bytes(optimizer, model),
                    training_threads=torch.get_num_threads())
    resident_code = file_pagemap() if can_fork() else None  # of this process, which the trial steps stand for
    # Without keep_files the exported model lives in a temporary folder, removed also after an error.
    with contextlib.ExitStack() as cleanup:
        workdir = keep_files or cleanup.enter_context(tempfile.TemporaryDirectory(prefix="edgecost-plan-"))

        def planned():
            made = _plan_in(workdir, bool(keep_files), backend, model, example_inputs, activation_budget, trials,
                            runtime_budget, platform, device, time_limit_s, progress, accept_noisy_costs,
                            optimizer, trainable, resident_code)
            made.realize(model)
            return made.saved(), made.realization, made.replay
        # The solver's messages and the realization are parsed in a forked copy too: what they leave
        # in the heap would stay in the training process's RSS.
        saved, realization, replay = run_forked(planned) if can_fork() else planned()
    made = Plan.from_saved(saved)
    made.realization, made.replay, made._realized_for = realization, replay, model
    t = made.trials
    if t.runtime_budget_s and t.planned.step_s > t.runtime_budget_s:
        warnings.warn(f"edgecost: trial steps under the plan take {t.planned.step_s * 1e3:.1f} ms, over the runtime budget "
                      f"of {t.runtime_budget_s * 1e3:.1f} ms at the fewest recomputations edgecost's costs allow: the rest "
                      "is the bridge's hooks, per module, which no schedule lowers", RuntimeWarning, stacklevel=2)
    if made.trials.peaks_in_optimizer():
        warnings.warn("edgecost: the process peaks in optimizer.step(), where no activation is held, with the "
                      "optimizer's state on top of what backward left in the heap: a plan lowers the process's peak "
                      "only by what it keeps backward from leaving (" + made.trials.text().strip() + ")",
                      RuntimeWarning, stacklevel=2)
    return made


def _plan_in(workdir, keep, backend, model, example_inputs, activation_budget, trials, runtime_budget, platform,
             device, time_limit_s, progress, accept_noisy_costs, optimizer, trainable, resident_code):
    os.makedirs(workdir, exist_ok=True)
    onnx_path = os.path.join(workdir, "model.onnx")
    # The exporter's peak (several times the model's step) stays in the forked copy.
    export = functools.partial(_export_onnx, model, example_inputs, onnx_path)
    run_forked(export) if can_fork() else export()
    with open(onnx_path, "rb") as f:
        model_name = "torch-" + type(model).__name__ + "-" + hashlib.sha256(f.read()).hexdigest()[:16]
    backend.add_model(model_name, onnx_path)
    # Paging time counts against the runtime budget on measured costs, as `edgecost solve` does.
    request = {"model": model_name, "device": platform or device, "countPagingTime": not platform,
               "timeLimitS": time_limit_s, "optimizerStateTensors": optimizer_state_tensors(optimizer),
               "trainable": trainable}
    if platform:
        request["costSource"] = "poet-flops"
    elif device == "this" and not backend.has_measured_costs(model_name):
        _profile(backend, model_name, accept_noisy_costs, progress)
    budget = str(activation_budget).strip() if activation_budget is not None else ""
    # Any schedule carries the plain step's memory and the graph's nodes; checkpoint-all is the quickest to solve.
    plain = Schedule(backend.solve(dict(request, activationBudgetBytes=str(1 << 50), strategy="checkpoint-all",
                                        runtimeBudgetMultiple=100.0)))
    plain_peak = plain.plain_activation_peak_bytes
    trial = _TrialSteps(model, example_inputs, optimizer, os.path.join(workdir, "pages"), resident_code)
    trials.plain = trial.run(None)
    # This machine's PyTorch times where the training runs as the trials do; a board preset's, or more
    # threads than a forked copy can run, keep edgecost's costs.
    trials.node_times = bool(not platform and device == "this" and trials.plain.step_s
                             and trials.training_threads == FORKED_THREADS)
    if trials.node_times:
        request["nodeRuntimeS"] = _node_runtimes(plain, trials.plain)
    runtime = runtime_budget_fields(runtime_budget)
    trials.runtime_budget_s = runtime.get("runtimeBudgetS") or runtime["runtimeBudgetMultiple"] * trials.plain.step_s

    def solved(activation_budget_bytes, runtime):
        """The plan at that activation budget (None: the smallest with a schedule), tried."""
        budget = {"minRam": True} if activation_budget_bytes is None else {"activationBudgetBytes": str(activation_budget_bytes)}
        message = backend.solve(dict(request, **budget, **runtime))
        if keep:
            with open(os.path.join(workdir, "schedule.json"), "w") as f:
                json.dump(message, f)
        schedule = Schedule(message)
        if schedule.status not in ("STATUS_OPTIMAL", "STATUS_FEASIBLE"):
            raise cli.EdgecostError(f"no schedule meets the budgets ({schedule.status}): {message.get('message', '')}"
                                    + trials.text())
        made = Plan(schedule, model_name=model_name, schedule_path=os.path.join(workdir, "schedule.json") if keep else "",
                    signature=model_signature(model, example_inputs), trials=trials)
        trials.planned = trial.run(made)
        return made

    if trials.ram_budget_bytes:
        room = trials.ram_budget_bytes - trials.baseline_rss_bytes
        if room <= 0:
            raise ValueError(f"ram_budget {trials.ram_budget_bytes / 1e6:.1f} MB leaves no room for a step:" + trials.text())
        activation_budget = plain_peak - max(0, trials.plain.peak_rise_bytes - room)
    else:
        room = None
        activation_budget = int(plain_peak * float(budget[:-1]) / 100) if budget.endswith("%") else parse_bytes(budget)
    return _fitted(solved, activation_budget, runtime, room, trials)


def _fitted(solved, activation_budget, runtime, room, trials):
    """The plan whose trial steps, on PyTorch's own kernels, keep within the runtime budget and (with a
    ram_budget) the process's room: each trial's excess lowers the activation budget, each overrun
    tightens the runtime budget the solver plans with, down to one plain step.
    A step no plan brings within time (the hooks' own cost on a small model) is left to plan() to warn about."""
    fits = None  # the last plan within the RAM budget, and its trial
    for _ in range(4):
        if activation_budget is None:
            break  # the smallest was tried
        if activation_budget <= 0:
            activation_budget = None  # lowered past any schedule: the smallest one, tried once
        try:
            made = solved(activation_budget, runtime)
        except cli.EdgecostError as refused:
            if activation_budget is None or "infeasible" not in str(refused).lower():
                raise
            activation_budget = 0  # below the smallest schedule: that one next
            continue
        excess_bytes = trials.planned.peak_rise_bytes - room if room is not None else 0
        overrun = trials.planned.step_s / trials.runtime_budget_s if trials.runtime_budget_s else 0
        tighter = {k: v / overrun for k, v in runtime.items()} if overrun > 1 else runtime
        can_tighten = tighter.get("runtimeBudgetMultiple", 1.0) >= 1.0
        if excess_bytes <= 0:
            fits = made, trials.planned
            if overrun <= 1 or not can_tighten:
                return made
        if activation_budget is not None:
            activation_budget -= max(0, excess_bytes)
        runtime = tighter if can_tighten else runtime
    if fits is not None:  # over time still: plan() says so
        made, trials.planned = fits
        return made
    raise cli.EdgecostError("no plan kept its trial steps within the budgets (ram_budget "
                            f"{trials.ram_budget_bytes / 1e6:.1f} MB, runtime {trials.runtime_budget_s * 1e3:.1f} ms);"
                            + trials.text())


def _optimizer_state_bytes(optimizer, model):
    """What the optimizer's state will add: its state tensors for each parameter that trains and has none yet."""
    per_parameter = optimizer_state_tensors(optimizer)
    has_state = getattr(optimizer, "state", {})
    return sum(per_parameter * p.numel() * p.element_size() for p in model.parameters()
               if p.requires_grad and not has_state.get(p))


@dataclass
class Trial:
    """Training steps run in a forked copy of the planning process, on PyTorch's own kernels."""
    peak_rise_bytes: int = 0            # how far the steps raise the peak RSS over the RSS before them
    backward_peak_rise_bytes: int = 0   # the same within forward and backward
    optimizer_peak_rise_bytes: int = 0  # the same within optimizer.step()
    step_s: float = 0.0                 # the fastest forward and backward after the first step
    module_forward_s: dict = dataclasses.field(default_factory=dict)   # leaf module name -> seconds
    module_backward_s: dict = dataclasses.field(default_factory=dict)  # (plain trials only)


@dataclass
class Trials:
    """What a plan predicts for the training process, from trial steps in forked copies of the
    process that planned: PyTorch's own allocations, kernels and optimizer, not only the activations."""
    baseline_rss_bytes: int = 0      # the planning process's RSS when plan() was called
    optimizer_state_bytes: int = 0   # what the optimizer's state adds at its first step (within the rises)
    ram_budget_bytes: int = 0        # the process's peak RSS asked for (0: an activation budget was)
    runtime_budget_s: float = 0.0    # the runtime budget in the trial steps' seconds
    training_threads: int = 1        # torch's in the process that planned
    node_times: bool = False         # the plan was solved on node times from the plain trial (PyTorch's kernels)
    plain: Trial = dataclasses.field(default_factory=Trial)
    planned: Trial = dataclasses.field(default_factory=Trial)

    @classmethod
    def from_dict(cls, saved):
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: Trial(**v) if k in ("plain", "planned") else v for k, v in saved.items() if k in known})

    def peak_rss_bytes(self, rss_before_steps, plain=False):
        """The process's peak RSS predicted from its RSS before its first step."""
        return rss_before_steps + (self.plain if plain else self.planned).peak_rise_bytes

    def peaks_in_optimizer(self):
        """Whether the plain steps peak in optimizer.step(), where no activation is held (above what
        backward left resident)."""
        return self.plain.optimizer_peak_rise_bytes > 1.01 * self.plain.backward_peak_rise_bytes > 0

    def text(self):
        return (f" the process holds {self.baseline_rss_bytes / 1e6:.1f} MB before training; plain trial steps raise its "
                f"peak by {self.plain.peak_rise_bytes / 1e6:.1f} MB ({self.plain.optimizer_peak_rise_bytes / 1e6:.1f} MB "
                f"in the optimizer's step, whose state is {self.optimizer_state_bytes / 1e6:.1f} MB) and take "
                f"{self.plain.step_s * 1e3:.1f} ms, steps under the last plan {self.planned.peak_rise_bytes / 1e6:.1f} MB "
                f"and {self.planned.step_s * 1e3:.1f} ms")


class _ModuleTimes:
    """Each leaf module's forward and backward seconds in the steps run inside it (the fastest of
    them), from global module hooks and a gradient hook on each leaf's output: autograd runs one op
    at a time, so the time from one leaf output's gradient to the next is the backward of the module
    that output came from."""

    def __init__(self, model):
        self.names = {m: name for name, m in model.named_modules() if name and not any(True for _ in m.children())}
        self.forward, self.backward = {}, {}  # name -> fastest seconds over steps
        self.step_forward, self.step_backward, self.started, self.last = {}, {}, {}, None

    def __enter__(self):
        self.handles = [torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
                        torch.nn.modules.module.register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    def _pre(self, module, inputs):
        if module in self.names:
            self.started[module] = time.perf_counter()

    def _post(self, module, inputs, output):
        name, start = self.names.get(module), self.started.pop(module, None)
        if name is None or start is None:
            return
        self.step_forward[name] = self.step_forward.get(name, 0.0) + time.perf_counter() - start
        first = next((t for t in (output if isinstance(output, (tuple, list)) else (output,))
                      if torch.is_tensor(t) and t.requires_grad), None)
        if first is not None:
            first.register_hook(lambda grad: self._gradient(name))

    def _gradient(self, name):
        now = time.perf_counter()
        if self.last is not None:
            self.step_backward[self.last[0]] = self.step_backward.get(self.last[0], 0.0) + now - self.last[1]
        self.last = (name, now)

    def end_step(self):
        self._gradient(None)  # the last module's backward ends with the step's
        for step, fastest in ((self.step_forward, self.forward), (self.step_backward, self.backward)):
            for name, seconds in step.items():
                if name is not None:
                    fastest[name] = min(fastest.get(name, seconds), seconds)
        self.step_forward, self.step_backward, self.last = {}, {}, None


def _node_runtimes(schedule, trial):
    """Seconds for each node of `schedule`'s graph on PyTorch's kernels: a leaf module's measured
    forward (backward) time shared among its forward (backward) nodes as edgecost's costs share it;
    nodes outside leaf modules at the same PyTorch-to-edgecost ratio; all scaled so a plain step
    adds up to the trial's."""
    times = [0.0] * len(schedule.decisions)
    grouped = {}
    for d in schedule.decisions:
        grouped.setdefault((d.module, d.backward), []).append(d)
    measured_s = estimated_s = 0.0
    for (module, backward), nodes in grouped.items():
        module_s = (trial.module_backward_s if backward else trial.module_forward_s).get(module)
        if module_s is None:
            continue
        total = sum(d.runtime_s for d in nodes)
        for d in nodes:
            times[d.node] = module_s * (d.runtime_s / total if total > 0 else 1 / len(nodes))
        measured_s += module_s
        estimated_s += total
    ratio = measured_s / estimated_s if estimated_s > 0 else 1.0
    for d in schedule.decisions:
        if (d.module, d.backward) not in grouped or not times[d.node]:
            times[d.node] = times[d.node] or d.runtime_s * ratio
    scale = trial.step_s / sum(times) if sum(times) > 0 else 1.0
    return [t * scale for t in times]


class _TrialSteps:
    """Training steps of the model (forward, backward of the outputs' sum, the optimizer's update) run
    in forked copies of the planning process: plain, or under a plan. As the user's loop: the first
    allocates the gradients and the optimizer's state, the next show what the allocator keeps
    between steps and are timed; plain trials then time each leaf module in two more."""
    STEPS = 3
    MODULE_STEPS = 2

    def __init__(self, model, example_inputs, optimizer, page_dir, resident_code):
        self.model, self.optimizer, self.page_dir, self.resident_code = model, optimizer, page_dir, resident_code
        self.inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)

    def _optimizer(self):
        if self.optimizer is None or isinstance(self.optimizer, torch.optim.Optimizer):
            return self.optimizer
        kinds = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
        return kinds[self.optimizer.lower()]([p for p in self.model.parameters() if p.requires_grad], lr=1e-9)

    def run(self, plan):
        if not can_fork():
            return Trial()
        if plan is not None:
            plan.realize(self.model)  # `edgecost check` runs here, not in the measured copy

        def steps():
            optimizer = self._optimizer()
            if plan is not None:
                plan.apply(self.model, page_dir=self.page_dir)
            meter = PeakMeter(self.resident_code)
            in_backward = in_optimizer = 0
            times = []
            module_times = _ModuleTimes(self.model)
            for step in range(self.STEPS + (self.MODULE_STEPS if plan is None else 0)):
                for p in self.model.parameters():
                    p.grad = None
                with module_times if step >= self.STEPS else contextlib.nullcontext():
                    start = time.perf_counter()
                    _default_loss(self.model(*self.inputs)).backward()
                    times.append(time.perf_counter() - start)
                if step >= self.STEPS:
                    module_times.end_step()
                in_backward = max(in_backward, meter.phase_peak_bytes())
                if optimizer is not None:
                    optimizer.step()
                    in_optimizer = max(in_optimizer, meter.phase_peak_bytes())
            code = meter.code_pages_bytes()
            return Trial(peak_rise_bytes=max(in_backward, in_optimizer) + code, backward_peak_rise_bytes=in_backward + code,
                         optimizer_peak_rise_bytes=in_optimizer + code if in_optimizer else 0,
                         step_s=min(times[1:self.STEPS]), module_forward_s=module_times.forward,
                         module_backward_s=module_times.backward)
        return run_forked(steps)


PLAN_FORMAT = "edgecost-torch-plan/1"


def model_signature(model, example_inputs):
    """What a plan depends on in `model`: each module's name and type, each parameter's name and shape,
    and the example inputs' shapes and types. A plan loaded for another signature is refused."""
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    return {"modules": [[name, type(m).__name__] for name, m in model.named_modules()],
            "parameters": [[name, list(p.shape)] for name, p in model.named_parameters()],
            "inputs": [[list(x.shape), str(x.dtype)] for x in inputs if torch.is_tensor(x)]}


def _signature_changes(saved, now, limit=5):
    """What differs between two signatures, in words (at most `limit` items per kind)."""
    changes = []
    for kind in ("modules", "parameters", "inputs"):
        before = [tuple(map(str, x)) for x in saved.get(kind, [])]
        after = [tuple(map(str, x)) for x in now.get(kind, [])]
        gone = [x for x in before if x not in after][:limit]
        new = [x for x in after if x not in before][:limit]
        if gone or new:
            changes.append(f"{kind}: " + "; ".join([f"was {' '.join(x)}" for x in gone] + [f"now {' '.join(x)}" for x in new]))
    return changes


def load_plan(path):
    """A plan `Plan.save` (or `python3 -m edgecost.torch`) wrote: nothing is exported or solved here.
    `apply` then checks it was planned for the model it is applied to."""
    with open(path) as f:
        saved = json.load(f)
    if saved.get("format") != PLAN_FORMAT:
        raise ValueError(f"{path} is not an edgecost plan of the PyTorch bridge ({PLAN_FORMAT})")
    return Plan.from_saved(saved, path)


def _profile(backend, model_name, accept_noisy, progress):
    """Profiles this machine; a table refused for a few disturbed ops (other work on the CPU) is
    measured once more, then kept with those ops marked unreliable, said loudly."""
    try:
        backend.profile(model_name, accept_noisy=accept_noisy, progress=progress)
        return
    except cli.EdgecostError as refused:
        if accept_noisy or "--accept-noisy" not in str(refused):
            raise
    try:
        backend.profile(model_name, progress=progress)
    except cli.EdgecostError as refused_again:
        if "--accept-noisy" not in str(refused_again):
            raise
        warnings.warn("edgecost: other work on this machine disturbed some measurements twice; the cost table keeps "
                      "them marked unreliable (profile again on a quiet machine for better predictions)",
                      RuntimeWarning, stacklevel=3)
        backend.profile(model_name, accept_noisy=True, progress=progress)


def _storage_key(tensor):
    return tensor.storage().data_ptr()


def _storage_bytes(tensor):
    return tensor.storage().nbytes()


@dataclass
class StepReport:
    step: int
    step_time_s: float            # forward start to backward end
    saved_peak_bytes: int         # saved activations resident at once, counted through the hooks
    state_peak_bytes: int         # what ops save for their own backward beyond their inputs, outputs and
                                  # copies of them (batch-norm statistics, max-pool indices): layer state
                                  # to edgecost, outside its activation peak
    paged_bytes: int              # written to storage this step
    paged_files: int              # the files written this step
    read_ahead_files: int         # of those, read back before autograd asked for them
    peak_rss_bytes: int           # the process's peak so far (VmHWM)
    predicted_step_time_s: float  # the plan's trial steps on PyTorch's kernels (Trials.threads); without
                                  # trials, edgecost check's replay of the realized stages on edgecost's costs
    predicted_peak_bytes: int     # that replay's activation peak
    predicted_peak_rss_bytes: int = 0        # VmHWM predicted from the RSS before the first planned step
    predicted_plain_peak_rss_bytes: int = 0  # the same for plain steps: the difference is the plan's saving

    def __str__(self):
        rss = f"peak RSS {self.peak_rss_bytes / 1e6:.1f} MB"
        if self.predicted_peak_rss_bytes:
            rss += (f" (predicted {self.predicted_peak_rss_bytes / 1e6:.1f} MB; plain steps "
                    f"{self.predicted_plain_peak_rss_bytes / 1e6:.1f} MB)")
        return (f"step {self.step}: {rss}, {self.step_time_s * 1e3:.1f} ms (predicted "
                f"{self.predicted_step_time_s * 1e3:.1f} ms), saved activations peak {self.saved_peak_bytes / 1e6:.3f} MB "
                f"(predicted {self.predicted_peak_bytes / 1e6:.3f} MB) + op state {self.state_peak_bytes / 1e6:.3f} MB, "
                f"paged {self.paged_bytes / 1e6:.2f} MB in {self.paged_files} files ({self.read_ahead_files} read ahead)")


class _Counter:
    """Bytes of saved tensors resident now and at most this step, one count per storage, in two
    kinds: activations (what the plan counts) and op state (see StepReport.state_peak_bytes)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.refs = {}   # storage key -> [handles, bytes, is state]
        self.extra = 0   # recomputed tensors, counted per checkpointed module
        self.now = self.peak = 0              # activations
        self.state_now = self.state_peak = 0  # op state

    def _count(self, nbytes, state):
        if state:
            self.state_now += nbytes
            self.state_peak = max(self.state_peak, self.state_now)
        else:
            self.now += nbytes
            self.peak = max(self.peak, self.now)

    def add(self, key, nbytes, state=False):
        with self.lock:
            entry = self.refs.setdefault(key, [0, nbytes, state])
            entry[0] += 1
            if entry[0] == 1:
                self._count(nbytes, state)

    def remove(self, key):
        with self.lock:
            entry = self.refs.get(key)
            if entry is None:
                return
            entry[0] -= 1
            if entry[0] == 0:
                self._count(-entry[1], entry[2])
                del self.refs[key]

    def reclassify(self, key, state):
        with self.lock:
            entry = self.refs.get(key)
            if entry is not None and entry[2] != state:
                self._count(-entry[1], entry[2])
                entry[2] = state
                self._count(entry[1], state)

    def add_extra(self, nbytes):
        with self.lock:
            self.extra += nbytes
            self._count(nbytes, False)

    def start_step(self):
        self.peak, self.state_peak = self.now, self.state_now


class _Kept:
    """A saved tensor: in RAM (counted until autograd drops it), or moved to a page file."""
    __slots__ = ("tensor", "file", "key", "counter", "__weakref__")

    def __init__(self, tensor, counter, state=False):
        self.tensor, self.file, self.key, self.counter = tensor, None, ("kept", _storage_key(tensor)), counter
        counter.add(self.key, _storage_bytes(tensor), state)

    def move_to(self, file):
        """Drops the RAM copy for `file`: a tensor saved before we knew it was to be paged."""
        self.file, self.tensor = file, None
        self.counter.remove(self.key)

    def get(self):
        return self.tensor if self.file is None else self.file.read()

    def __del__(self):
        if self.file is None:
            self.counter.remove(self.key)


class _PageFile:
    """One tensor on storage: written on the pager's thread, read back on it ahead of backward (the
    file paged out before this one is read while backward uses this one), and waited for only when
    autograd asks before it is back. Counted while it is being written and from its read until
    autograd drops it (after the backward op)."""

    def __init__(self, tensor, path, pager):
        self.path, self.nbytes, self.counter, self.executor = path, _storage_bytes(tensor), pager.counter, pager.executor
        self.key = ("writing", path)
        self.read_key = None
        self.loading = None  # the read, once started
        self.position = 0    # the leaf module running when it was written (Runtime.leaf_position)
        self.read_ahead_set = False
        self.counter.add(self.key, self.nbytes)  # resident until written
        self.future = self.executor.submit(self._write, tensor)

    def _write(self, tensor):
        torch.save(tensor.detach(), self.path)
        self.counter.remove(self.key)

    def _load(self):
        self.future.result()
        return torch.load(self.path)

    def prefetch(self):
        if self.loading is None:
            self.read_key = ("read", self.path)
            self.counter.add(self.read_key, self.nbytes)
            self.loading = self.executor.submit(self._load)

    def read(self):
        self.prefetch()
        return self.loading.result()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.future.result()
            if self.loading is not None:
                self.loading.result()
            if self.read_key is not None:
                self.counter.remove(self.read_key)
            os.unlink(self.path)


class _Paged:
    __slots__ = ("file",)

    def __init__(self, file):
        self.file = file

    def get(self):
        return self.file.read()


class _Hold(torch.autograd.Function):
    """Identity in front of a checkpointed module: counts the input the checkpoint holds, and the
    module's recomputed tensors, until the gradient reaches the input (the module's backward is done)."""

    @staticmethod
    def forward(ctx, x, runtime, invocation):
        ctx.kept = _Kept(x, runtime.counter)
        ctx.invocation = invocation
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.kept = None
        ctx.invocation.release()
        return grad, None, None


class _Invocation:
    """One checkpointed module's call: the bytes its recomputation holds."""

    def __init__(self, counter):
        self.counter, self.nbytes = counter, 0

    def release(self):
        if self.nbytes:
            self.counter.add_extra(-self.nbytes)
            self.nbytes = 0


class _Runtime:
    """The hooks applying a realization to one model."""

    def __init__(self, plan, model, realization, page_dir):
        self.plan, self.model, self.realization = plan, model, realization
        self.counter = _Counter()
        self.page_dir = page_dir or tempfile.mkdtemp(prefix="edgecost-pages-")
        os.makedirs(self.page_dir, exist_ok=True)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgecost-pager")
        # Storage of a module output to page -> (weak ref to that output, {view: weak _PageFile}). While the
        # output object lives its storage cannot be freed and its address reused by another tensor;
        # the views let a tensor saved by two ops be written once.
        self.paged_outputs = {}
        # The model's modules running their forward now, innermost last: what a module saves is known
        # to be its output, its own state, or something else only when it returns.
        self.calls = []
        # Parameters and buffers (batch-norm statistics), saved as themselves or as views (a linear
        # layer's transposed weight): the model's state, not activations.
        self.uncounted_keys = set()
        self.paged_bytes = 0
        self.file_number = 0
        self.last_write = None
        self.page_files = []  # this step's, in the order written: backward reads them about in reverse
        self.files_read_ahead = 0  # files read before autograd asked for them, this step
        self.leaf_position = 0  # leaf modules entered in this step's forward
        self.step = 0
        self.step_start = None
        self.rss_before_first_step = None
        self.invocations = []
        self.handles = []
        self.hooks_context = None
        modules = dict(model.named_modules())
        self.patched = set()  # modules whose forward is replaced (an instance attribute)
        runs = {}
        for segment in realization.segments:
            if segment.first < 0:
                module = modules[segment.module]
                module.forward = self._checkpointed([module], module.forward)
                self.patched.add(segment.module)
            else:
                runs.setdefault(segment.module, []).append((segment.first, segment.last))
        for parent, spans in runs.items():
            modules[parent].forward = self._sequential_with_runs(modules[parent], dict(spans))
            self.patched.add(parent)
        self.paged_modules = {modules[name] for name in realization.paged_modules}
        self.own_modules = set(modules.values())
        self.handles.append(torch.nn.modules.module.register_module_forward_pre_hook(self._enter_module))
        self.handles.append(torch.nn.modules.module.register_module_forward_hook(self._leave_module))
        self.handles.append(model.register_forward_pre_hook(self._begin_forward))
        self.handles.append(model.register_forward_hook(self._end_forward))

    def remove(self):
        modules = dict(self.model.named_modules())
        for name in self.patched:
            del modules[name].forward  # the instance attribute; the class's forward shows again
        for handle in self.handles:
            handle.remove()
        self.executor.shutdown(wait=True)

    # --- forward and step boundaries
    def _begin_forward(self, module, inputs):
        if not torch.is_grad_enabled():
            return
        for invocation in self.invocations:  # from a step whose backward did not run
            invocation.release()
        self.invocations = []
        self.paged_outputs.clear()
        self.page_files = []
        self.files_read_ahead = 0
        self.leaf_position = 0
        self.calls = []
        # The batch too: the caller holds it through the step, so autograd's reference costs nothing
        # (the plan reads it again for backward).
        self.uncounted_keys = {_storage_key(t) for t in (*self.model.parameters(), *self.model.buffers(), *inputs)
                           if torch.is_tensor(t)}
        self.counter.start_step()
        self.paged_bytes = 0
        self.step += 1
        if self.rss_before_first_step is None:
            self.rss_before_first_step = rss_bytes()
        self.step_start = time.perf_counter()
        self.hooks_context = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.hooks_context.__enter__()

    def _end_forward(self, module, inputs, output):
        if self.hooks_context is None:
            return
        self.hooks_context.__exit__(None, None, None)
        self.hooks_context = None
        first = next((t for t in (output if isinstance(output, (tuple, list)) else (output,))
                      if torch.is_tensor(t) and t.requires_grad), None)
        if first is not None:
            step = self.step
            first.register_hook(lambda grad: self._backward_started(step))

    def _backward_started(self, step):
        torch.autograd.Variable._execution_engine.queue_callback(lambda: self._end_step(step))

    def _end_step(self, step):
        trials = self.plan.trials
        measured = bool(trials.planned.peak_rise_bytes)
        report = StepReport(
            step=step, step_time_s=time.perf_counter() - self.step_start, saved_peak_bytes=self.counter.peak,
            state_peak_bytes=self.counter.state_peak,
            paged_bytes=self.paged_bytes, paged_files=len(self.page_files), read_ahead_files=self.files_read_ahead,
            peak_rss_bytes=peak_rss_bytes(),
            predicted_step_time_s=trials.planned.step_s if measured else self.plan.realized_step_time_s,
            predicted_peak_bytes=self.plan.realized_peak_bytes,
            predicted_peak_rss_bytes=trials.peak_rss_bytes(self.rss_before_first_step) if measured else 0,
            predicted_plain_peak_rss_bytes=trials.peak_rss_bytes(self.rss_before_first_step, plain=True) if measured else 0)
        self.plan.reports.append(report)
        if self.plan.report_steps:
            print("edgecost:", report, flush=True)
        if trials.ram_budget_bytes and report.peak_rss_bytes > trials.ram_budget_bytes:
            warnings.warn(f"edgecost: step {step} took the process's peak RSS to {report.peak_rss_bytes / 1e6:.1f} MB, over "
                          f"the plan's ram_budget of {trials.ram_budget_bytes / 1e6:.1f} MB (predicted "
                          f"{report.predicted_peak_rss_bytes / 1e6:.1f} MB): the process grew after planning (plan "
                          "later, or with a lower budget)", RuntimeWarning, stacklevel=2)
        budget = self.plan.schedule.budget_bytes
        if budget and report.saved_peak_bytes > budget:
            warnings.warn(f"edgecost: step {step} held {report.saved_peak_bytes / 1e6:.3f} MB of saved activations, over "
                          f"the plan's budget of {budget / 1e6:.3f} MB (predicted {report.predicted_peak_bytes / 1e6:.3f}"
                          " MB): the model saves tensors its export does not show; plan with a lower budget",
                          RuntimeWarning, stacklevel=2)

    # --- saved tensors
    def _enter_module(self, module, inputs):
        if self.hooks_context is not None and module in self.own_modules:
            leaf = not any(True for _ in module.children())
            self.leaf_position += leaf
            self.calls.append((module, leaf, {_storage_key(t) for t in inputs if torch.is_tensor(t)}, []))

    def _leave_module(self, module, inputs, output):
        if self.hooks_context is None or not self.calls or self.calls[-1][0] is not module:
            return
        _, leaf, input_keys, pending = self.calls.pop()
        outputs = [t for t in (output if isinstance(output, (tuple, list)) else (output,)) if torch.is_tensor(t)]
        if leaf and outputs:
            self._read_ahead(outputs[0], self.leaf_position)
        output_keys = {_storage_key(t) for t in outputs}
        saved = [kept for kept in (ref() for ref in pending) if kept is not None and kept.file is None]
        if leaf:
            # What it saved that is its output (ReLU's result) or a copy of an input or output (an
            # in-place SiLU's input, kept before it was overwritten) is an activation after all.
            like = {(tuple(t.shape), t.dtype) for t in (*inputs, *outputs) if torch.is_tensor(t)}
            # A copy of an input that is to be paged is paged too (that is what the plan decided for it).
            paged_inputs = {(tuple(t.shape), t.dtype) for t in inputs if torch.is_tensor(t) and self._to_page(t)}
            for kept in saved:
                shape = (tuple(kept.tensor.shape), kept.tensor.dtype)
                if kept.key[1] not in input_keys and kept.key[1] not in output_keys and shape in paged_inputs:
                    kept.move_to(self._page_file(kept.tensor))
                elif kept.key[1] in output_keys or shape in like:
                    self.counter.reclassify(kept.key, state=False)
        if module not in self.paged_modules:
            return
        for t in outputs:
            known, _ = self.paged_outputs.get(_storage_key(t), (None, None))
            if known is None or known() is None:  # not seen, or freed and its address reused
                self.paged_outputs[_storage_key(t)] = (weakref.ref(t), {})
        # What the module saved itself while it ran (ReLU's result, max-pool's indices, batch norm's
        # statistics) goes with its output: its own output always, and for a leaf module all it
        # made, since nothing outside the module can use it.
        for kept in saved:
            key = kept.key[1]
            if kept.file is None and (key in output_keys or (leaf and key not in input_keys)):
                kept.move_to(self._page_file(kept.tensor))

    def _to_page(self, tensor):
        """Whether `tensor` is (a view of) a module output the plan pages."""
        output, _ = self.paged_outputs.get(_storage_key(tensor), (None, None))
        return output is not None and output() is not None

    def _read_ahead(self, output, position):
        """Has backward read the files written up to `position` two leaf modules back while it
        computes the gradient of `output` (leaf module `position`'s): each is back one module before
        the backward that reads it first (the consumer's), as the plan's page-ins are one stage ahead."""
        files = [f for f in (ref() for ref in self.page_files) if f is not None and not f.read_ahead_set
                 and f.position <= position - 2]
        if not files or not output.requires_grad:
            return
        for f in files:
            f.read_ahead_set = True
        files = [weakref.ref(f) for f in files]  # the hook lives as long as `output`, the files not

        def read(grad):
            for f in (ref() for ref in files):
                # Not above the activation peak predicted for what runs: that waits for autograd.
                if f is not None and f.loading is None and self.counter.now + f.nbytes <= self.plan.realized_peak_bytes:
                    f.prefetch()
                    self.files_read_ahead += 1
        output.register_hook(read)

    def _page_file(self, tensor):
        """The file `tensor` is written to: one per view of a paged output, one per other tensor."""
        output, files = self.paged_outputs.get(_storage_key(tensor), (None, {}))
        if output is None or output() is None:
            files = {}  # not a paged output, or an entry for a freed one whose address is reused
        view = (tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), tensor.dtype)
        file = files.get(view)
        file = file() if file else None
        if file is None:
            # One write in flight: a paged tensor leaves RAM about when the plan says, not when a
            # queue of writes behind a fast forward reaches it.
            if self.last_write is not None:
                self.last_write.result()
            self.file_number += 1
            file = _PageFile(tensor, os.path.join(self.page_dir, f"{self.file_number}.pt"), self)
            file.position = self.leaf_position
            self.page_files.append(weakref.ref(file))
            files[view] = weakref.ref(file)
            self.last_write = file.future
            self.paged_bytes += file.nbytes
        return file

    def _pack(self, tensor):
        key = _storage_key(tensor)
        if key in self.uncounted_keys or isinstance(tensor, torch.nn.Parameter) or (tensor.is_leaf and tensor.requires_grad):
            return tensor
        if self._to_page(tensor):
            return _Paged(self._page_file(tensor))
        # Made inside a leaf module and not its input: op state, unless it proves to be the output.
        inner = self.calls[-1] if self.calls and self.calls[-1][1] else None
        kept = _Kept(tensor, self.counter, state=inner is not None and key not in inner[2])
        for call in self.calls:
            call[3].append(weakref.ref(kept))
        return kept

    @staticmethod
    def _unpack(packed):
        return packed if torch.is_tensor(packed) else packed.get()

    # --- recomputation
    def _sequential_with_runs(self, sequential, last_of_run):
        """nn.Sequential's forward with the runs of children first..last checkpointed as one."""
        children = list(sequential)
        checkpointed = {}
        for first, last in last_of_run.items():
            run = children[first:last + 1]

            def run_children(x, run=run):
                for child in run:
                    x = child(x)
                return x
            checkpointed[first] = (last, self._checkpointed(run, run_children))

        def forward(x):
            i = 0
            while i < len(children):
                if i in checkpointed:
                    last, run_forward = checkpointed[i]
                    x, i = run_forward(x), last + 1
                else:
                    x, i = children[i](x), i + 1
            return x
        return forward

    def _checkpointed(self, parts, forward):
        """`forward` (computing the modules `parts`) under non-reentrant checkpointing."""
        runtime = self

        def checkpointed_forward(*args, **kwargs):
            if not torch.is_grad_enabled():
                return forward(*args, **kwargs)
            invocation = _Invocation(runtime.counter)
            runtime.invocations.append(invocation)
            args = tuple(_Hold.apply(a, runtime, invocation) if torch.is_tensor(a) and a.requires_grad else a
                         for a in args)
            calls = [0]

            def run(*run_args, **run_kwargs):
                calls[0] += 1
                if calls[0] == 1:
                    return forward(*run_args, **run_kwargs)
                with _buffers_restored(parts), _counting_outputs(parts, invocation):  # the recomputation
                    return forward(*run_args, **run_kwargs)

            return checkpoint(run, *args, use_reentrant=False, **kwargs)

        return checkpointed_forward


@contextlib.contextmanager
def _buffers_restored(parts):
    # Recomputing a batch norm in training mode would update its running statistics twice.
    buffers = [b for part in parts for b in part.buffers()]
    saved = [b.clone() for b in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in zip(buffers, saved):
                buffer.copy_(value)


@contextlib.contextmanager
def _counting_outputs(parts, invocation):
    # The recomputed tensors live in the checkpoint's storage, out of our hooks' sight: count each
    # submodule's output while the recomputation runs, until the module's backward is done.
    inner = {m for part in parts for m in part.modules()}

    def count(m, inputs, output):
        if m in inner and not list(m.children()):
            for t in output if isinstance(output, (tuple, list)) else (output,):
                if torch.is_tensor(t):
                    invocation.nbytes += _storage_bytes(t)
                    invocation.counter.add_extra(_storage_bytes(t))

    handle = torch.nn.modules.module.register_module_forward_hook(count)
    try:
        yield
    finally:
        handle.remove()


@dataclass
class VerifyResult:
    identical: bool              # every gradient bit for bit
    max_relative_error: float    # the largest |planned - plain| / max |plain| over parameters
    saved_peak_bytes: int        # the planned step's activations, counted through the hooks
    plain_saved_peak_bytes: int  # the plain step's, counted the same way
    state_peak_bytes: int        # the planned step's op state (StepReport.state_peak_bytes)
    report: StepReport

    @property
    def ok(self):
        return self.identical or self.max_relative_error <= 1e-6


def _default_loss(output):
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    return sum(o.float().sum() for o in outputs if torch.is_tensor(o) and o.is_floating_point())


class Plan:
    """A solved schedule and how it runs in PyTorch."""

    def __init__(self, schedule, model_name="", schedule_path="", signature=None, trials=None):
        self.schedule, self.model_name, self.schedule_path = schedule, model_name, schedule_path
        self.signature = signature  # model_signature() of what was planned; None: not checked
        self.trials = trials or Trials()  # what trial steps in forked copies measured for the process
        self.reports = []          # a StepReport per training step run under the plan
        self.report_steps = False  # print each step's report
        self.realization = None
        self.replay = None  # CheckResult (protobuf JSON) of the realized stages
        self._realized_for = None
        self._runtimes = {}

    # Predictions: the schedule's, and for what runs (checkpointed modules recompute more).
    @property
    def predicted_step_time_s(self):
        return self.schedule.step_time_s

    @property
    def predicted_peak_bytes(self):
        return self.schedule.peak_bytes

    @property
    def predicted_energy_j(self):
        return self.schedule.energy_j

    # Predictions for what runs: `edgecost check` replays the realized stages on the plan's costs.
    @property
    def realized_step_time_s(self):
        return self.replay["runtimeS"] if self.replay else self.schedule.step_time_s

    @property
    def realized_peak_bytes(self):
        return int(self.replay["peakRamBytes"]) if self.replay else self.schedule.peak_bytes

    @property
    def realized_energy_j(self):
        return self.replay["energy"]["totalJ"] if self.replay else self.schedule.energy_j

    def decisions(self):
        """Per-node decisions, with module names."""
        return self.schedule.decisions

    def realize(self, model):
        if self.realization is None or self._realized_for is not model:
            self.realization = realize(self.schedule, dict(model.named_modules()))
            self.replay = _replay(self.schedule, realized_stages(self.schedule, self.realization))
            self._realized_for = model
        return self.realization

    def describe(self):
        s = self.schedule
        lines = [f"plan {self.model_name}: {s.status}, step {s.step_time_s * 1e3:.2f} ms (budget "
                 f"{s.runtime_budget_s * 1e3:.2f} ms), activations peak {s.peak_bytes / 1e6:.3f} MB (budget "
                 f"{s.budget_bytes / 1e6:.3f} MB, plain {s.plain_activation_peak_bytes / 1e6:.3f} MB), "
                 f"energy {s.energy_j:.4g} J ({s.energy_source})"]
        lines += ["  " + d.describe() for d in s.changed()]
        t = self.trials
        if t.planned.step_s:
            lines.append(f"trial steps (PyTorch at {FORKED_THREADS} thread, in forked copies): "
                         f"plain {t.plain.step_s * 1e3:.1f} ms raising the peak RSS by {t.plain.peak_rise_bytes / 1e6:.1f} MB, "
                         f"planned {t.planned.step_s * 1e3:.1f} ms (budget {t.runtime_budget_s * 1e3:.1f} ms) raising it by "
                         f"{t.planned.peak_rise_bytes / 1e6:.1f} MB")
        if self.realization is not None:
            r = self.realization
            lines.append(f"as run: checkpointed {', '.join(map(str, r.segments)) or 'nothing'}; paged outputs of "
                         f"{', '.join(r.paged_modules) or 'nothing'}; replayed by edgecost check: step "
                         f"{self.realized_step_time_s * 1e3:.2f} ms, activations peak {self.realized_peak_bytes / 1e6:.3f} MB, "
                         f"energy {self.realized_energy_j:.4g} J")
            lines += ["  moved: " + n for n in r.notes]
        return "\n".join(lines)

    def saved(self):
        """The plan as `save` writes it: the schedule with its costs, what it was planned for, and
        what its trial steps measured."""
        return {"format": PLAN_FORMAT, "model_name": self.model_name, "signature": self.signature,
                "trials": dataclasses.asdict(self.trials), "schedule": self.schedule.raw}

    @classmethod
    def from_saved(cls, saved, path=""):
        return cls(Schedule(saved["schedule"]), model_name=saved.get("model_name", ""), schedule_path=path,
                   signature=saved.get("signature"), trials=Trials.from_dict(saved.get("trials", {})))

    def save(self, path):
        """Writes the plan to `path`, for `load_plan` in the process that trains: planning once,
        training anywhere."""
        with open(path, "w") as f:
            json.dump(self.saved(), f)
        return path

    def report(self):
        """The last step against the plan's predictions, the process's peak RSS first."""
        if not self.reports:
            return "no step has run under the plan yet"
        return str(self.reports[-1])

    def check_model(self, model):
        """Refuses a model other than the one planned, saying what changed."""
        if self.signature is None:
            return
        # The modules and parameters; the inputs' shapes are the batch's, seen only when it runs.
        planned = {kind: self.signature.get(kind, []) for kind in ("modules", "parameters")}
        changes = _signature_changes(planned, model_signature(model, ()))
        if changes:
            raise ValueError(f"the plan {self.model_name} was made for another model; plan it again: " + " | ".join(changes))

    def apply(self, model, page_dir=None, report_steps=None):
        """Makes `model` run under the plan (in place) and returns it; `remove(model)` undoes it. A
        loaded plan is checked against the model first."""
        if id(model) in self._runtimes:
            return model
        self.check_model(model)
        if report_steps is not None:
            self.report_steps = report_steps
        self._runtimes[id(model)] = _Runtime(self, model, self.realize(model), page_dir)
        return model

    def remove(self, model):
        runtime = self._runtimes.pop(id(model), None)
        if runtime:
            runtime.remove()

    @contextlib.contextmanager
    def applied(self, model, page_dir=None):
        self.apply(model, page_dir)
        try:
            yield model
        finally:
            self.remove(model)

    def verify(self, model, example_inputs, loss_fn=_default_loss):
        """One step on `example_inputs` in two copies of `model`, plain and under the plan;
        compares every parameter's gradient. `model` itself is left as it was."""
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        was_applied = id(model) in self._runtimes
        self.remove(model)  # its hooks and patched forwards do not copy
        try:
            plain_copy, planned_copy = copy.deepcopy(model).train(), copy.deepcopy(model).train()
        finally:
            if was_applied:
                self.apply(model)
        rng = torch.get_rng_state()
        results = []
        for planned, copied in ((False, plain_copy), (True, planned_copy)):
            if planned:
                self.apply(copied)
            else:  # the same counting hooks with nothing changed, for the plain peak
                plain = Plan(self.schedule)
                plain.realization = None
                plain._runtimes[id(copied)] = _Runtime(plain, copied, _keep_everything(), None)
            torch.set_rng_state(rng)
            loss_fn(copied(*inputs)).backward()
            owner = self if planned else plain
            report = owner.reports[-1]
            owner.remove(copied)
            results.append(({n: p.grad.clone() for n, p in copied.named_parameters() if p.grad is not None}, report))
        (plain_grads, plain_report), (planned_grads, planned_report) = results
        identical, worst = plain_grads.keys() == planned_grads.keys(), 0.0
        for name, reference in plain_grads.items():
            got = planned_grads.get(name)
            if got is None:
                identical, worst = False, float("inf")
                continue
            identical = identical and torch.equal(reference, got)
            scale = reference.abs().max().item() or 1.0
            worst = max(worst, (reference - got).abs().max().item() / scale)
        return VerifyResult(identical=identical, max_relative_error=worst, saved_peak_bytes=planned_report.saved_peak_bytes,
                            plain_saved_peak_bytes=plain_report.saved_peak_bytes,
                            state_peak_bytes=planned_report.state_peak_bytes, report=planned_report)


def _replay(schedule, stages):
    """`edgecost check` on `schedule` with `stages` instead of its own, budgets lifted so the replay
    runs to the end and reports runtime, peak and energy whether or not they fit."""
    message = dict(schedule.raw, stages=stages)
    lifted = ("runtimeBudgetMultiple", "processRamBudgetBytes", "activationBudgetPercent")
    request = {k: v for k, v in (message.get("request") or {}).items() if k not in lifted}
    message["request"] = dict(request, activationBudgetBytes=str(1 << 62), runtimeBudgetS=1e12)
    with tempfile.TemporaryDirectory(prefix="edgecost-realized-") as workdir:
        path = os.path.join(workdir, "realized.json")
        with open(path, "w") as f:
            json.dump(message, f)
        result = json.loads(cli.run(["check", path, "--json"], progress=False))
    if not result.get("valid"):
        raise cli.EdgecostError(f"the realized schedule does not replay: {result.get('violation')}")
    return result


def _keep_everything():
    from edgecost.realize import Realization
    return Realization(segments=[], paged_modules=[], actions={})


__all__ = ["plan", "load_plan", "Plan", "StepReport", "Trial", "Trials", "VerifyResult", "Schedule", "PAGE", "RECOMPUTE"]


def _main(argv=None):
    """Plans ahead of time, outside the training process: `python3 -m edgecost.torch MODULE:FUNCTION
    --activation-budget 50% --out plan.json`, where FUNCTION() returns (model, example_inputs)."""
    import argparse
    import importlib
    parser = argparse.ArgumentParser(prog="python3 -m edgecost.torch", description=_main.__doc__)
    parser.add_argument("factory", help="MODULE:FUNCTION returning (model, example_inputs)")
    parser.add_argument("--out", required=True, help="where the plan goes, for edgecost.torch.load_plan")
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--activation-budget", help='the saved activations: "4MB" or "50%%" of the plain peak')
    budget.add_argument("--ram-budget", help="the training process's peak RSS")
    parser.add_argument("--runtime-budget", default="1.5x")
    parser.add_argument("--optimizer", help="sgd, adam or adamw: its state counts in --ram-budget")
    parser.add_argument("--trainable", default="all")
    parser.add_argument("--platform", help="a board preset's estimated costs instead of measuring this machine")
    parser.add_argument("--db", help="the cost database (default: edgecost's)")
    parser.add_argument("--time-limit-s", type=float, default=30)
    args = parser.parse_args(argv)
    module_name, _, function = args.factory.partition(":")
    if not function:
        parser.error(f"{args.factory}: give MODULE:FUNCTION")
    model, example_inputs = getattr(importlib.import_module(module_name), function)()
    if args.trainable != "all":
        freeze(model, args.trainable)
    made = plan(model, example_inputs, activation_budget=args.activation_budget, ram_budget=args.ram_budget,
                runtime_budget=args.runtime_budget, platform=args.platform, db=args.db,
                time_limit_s=args.time_limit_s, optimizer=args.optimizer, trainable=args.trainable)
    made.save(args.out)
    print(made.describe())
    print(f"written {args.out}: edgecost.torch.load_plan({args.out!r}).apply(model) in the training process")


if __name__ == "__main__":
    _main()
