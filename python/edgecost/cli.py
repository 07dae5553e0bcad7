"""Runs the edgecost binary: finds it, streams its progress, returns its output."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _budget_flags(request):
    """`edgecost solve`'s budget flags for a ScheduleRequest: the activation budget (bytes or a
    percentage of the plain step's activation peak), the RAM budget (the whole process), or --min-ram.
    The deprecated JSON names ramBudgetBytes and deviceRamBytes are read too."""
    r = request
    if r.get("minRam"):
        return ["--min-ram"]
    if r.get("activationBudgetPercent"):
        return ["--activation-budget", f"{r['activationBudgetPercent']}%"]
    for name, flag in (("activationBudgetBytes", "--activation-budget"), ("ramBudgetBytes", "--activation-budget"),
                       ("processRamBudgetBytes", "--ram-budget"), ("deviceRamBytes", "--ram-budget")):
        if int(r.get(name) or 0):
            return [flag, f"{r[name]}B"]
    raise ValueError("the request gives no budget: activationBudgetBytes, activationBudgetPercent, "
                     "processRamBudgetBytes or minRam")


class EdgecostError(RuntimeError):
    """The edgecost binary failed or could not be found."""


def find_binary():
    """EDGECOST_BIN, else `edgecost` on PATH, else the build tree next to this package."""
    explicit = os.environ.get("EDGECOST_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EdgecostError(f"EDGECOST_BIN={explicit} is not an executable file")
        return explicit
    on_path = shutil.which("edgecost")
    if on_path:
        return on_path
    build_tree = Path(__file__).resolve().parents[2] / "build" / "cli" / "edgecost"
    if build_tree.is_file() and os.access(build_tree, os.X_OK):
        return str(build_tree)
    raise EdgecostError("no edgecost binary: set EDGECOST_BIN, put edgecost on PATH, or build build/cli/edgecost")


def run(args, db=None, progress=True):
    """Runs `edgecost ARGS` and returns its stdout. Progress lines (stderr) go to our stderr
    as they come when `progress` is true; on failure they are part of the error."""
    command = [find_binary()] + ([f"--db={db}"] if db else []) + [str(a) for a in args]
    # stdout to a file, so that a large result cannot block the process while we read its progress
    with tempfile.TemporaryFile(mode="w+") as stdout_file:
        process = subprocess.Popen(command, stdout=stdout_file, stderr=subprocess.PIPE, text=True)
        stderr_lines = []
        for line in process.stderr:  # the CLI writes progress to stderr and the result to stdout
            stderr_lines.append(line)
            if progress:
                sys.stderr.write("edgecost: " + line)
                sys.stderr.flush()
        process.wait()
        stdout_file.seek(0)
        stdout = stdout_file.read()
    if process.returncode != 0:
        raise EdgecostError(f"{' '.join(command)} failed (exit {process.returncode}):\n{''.join(stderr_lines)}{stdout}")
    return stdout


class Local:
    """The edgecost binary on this machine and its database `db` (default: edgecost's); the same
    calls as edgecost.agent.Agent, so that plan() runs either way."""

    def __init__(self, db=None, progress=True):
        self.db, self.progress = db, progress

    def add_model(self, name, onnx_path):
        run(["models", "add", onnx_path, "--name", name], db=self.db, progress=self.progress)

    def has_measured_costs(self, model):
        try:
            run(["costs", model, "--device", "this"], db=self.db, progress=False)
            return True
        except EdgecostError:
            return False

    def profile(self, model, accept_noisy=False, progress=True):
        run(["profile", "--model", model, *(["--accept-noisy"] if accept_noisy else [])], db=self.db, progress=progress)

    def solve(self, request):
        """A ScheduleRequest (protobuf JSON) solved by `edgecost solve`; the Schedule it writes."""
        r = request
        costs = ["--platform", r["device"]] if r.get("costSource") == "poet-flops" else ["--device", r["device"]]
        budget = _budget_flags(r)
        runtime = f"{r['runtimeBudgetMultiple']}x" if "runtimeBudgetMultiple" in r else f"{r['runtimeBudgetS']}s"
        args = ["solve", "--model", r["model"], *costs, *budget, "--runtime-budget", runtime,
                "--count-paging-time" if r.get("countPagingTime") else "--no-count-paging-time"]
        if "timeLimitS" in r:
            args += ["--time-limit-s", r["timeLimitS"]]
        if r.get("strategy"):
            args += ["--strategy", r["strategy"]]
        if r.get("trainable"):
            args += ["--trainable", r["trainable"]]
        # The solve counts the optimizer's state tensors per parameter: an optimizer keeping as many.
        args += {0: [], 1: ["--optimizer", "sgd", "--momentum", "0.9"], 2: ["--optimizer", "adam"]}[
            int(r.get("optimizerStateTensors", 0))]
        with tempfile.TemporaryDirectory(prefix="edgecost-solve-") as workdir:
            path = os.path.join(workdir, "schedule.json")
            if r.get("nodeRuntimeS"):
                times = os.path.join(workdir, "node_runtimes.json")
                with open(times, "w") as f:
                    json.dump(r["nodeRuntimeS"], f)
                args += ["--node-runtimes", times]
            run(args + ["--out", path], db=self.db, progress=self.progress)
            with open(path) as f:
                return json.load(f)
