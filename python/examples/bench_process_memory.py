#!/usr/bin/env python3
"""What a plan does to the training process's real memory: each configuration trains in a fresh
process with the user's own loop (AdamW, cross-entropy), and its peak RSS (VmHWM) is read there.

  plain        PyTorch as it is
  plan N%      edgecost.torch.plan(activation_budget="N%") in that process, then applied
  checkpoint   torch.utils.checkpoint around each block (the usual hand-written answer)
  plan =ckpt   edgecost.torch.plan(ram_budget=the checkpoint run's VmHWM): the same memory, side by side

For each: VmHWM, the saving against plain, the saving the plan predicted from its trial steps, the
fastest and median step (forward and backward) beside the trial steps' prediction, and whether the
gradients equal plain PyTorch's. A benchmark that prints
figures; the test keeps one small case.

    EDGECOST_BIN=build/cli/edgecost /usr/bin/python3 python/examples/bench_process_memory.py [--platform a72]
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torch.utils.checkpoint  # noqa: E402
import torchvision  # noqa: E402

import edgecost.torch  # noqa: E402
from edgecost.process import peak_rss_bytes, rss_bytes  # noqa: E402


def build(name, batch, size):
    torch.manual_seed(0)
    model = {"mobilenet_v3_small": torchvision.models.mobilenet_v3_small,
             "resnet18": torchvision.models.resnet18}[name](num_classes=10)
    return model, torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))


def blocks(model):
    """(parent, index) of each block a hand-written checkpointing wraps: MobileNet's features,
    ResNet's residual blocks."""
    parents = [model.features] if hasattr(model, "features") else [model.layer1, model.layer2, model.layer3, model.layer4]
    return [(parent, i) for parent in parents for i in range(len(parent))]


class Checkpointed(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)


def checkpoint_each_block(model):
    for parent, i in blocks(model):
        parent[i] = Checkpointed(parent[i])


def worker(args):
    """One configuration in this fresh process: a JSON line on stdout."""
    warnings.filterwarnings("ignore")
    model, batch, labels = build(args.model, args.batch, args.size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    plan, result = None, {}
    if args.worker == "checkpoint":
        checkpoint_each_block(model)
    elif args.worker != "plain":
        budget = ({"activation_budget": args.worker} if args.worker.endswith("%")
                  else {"ram_budget": f"{args.worker}B"})
        plan = edgecost.torch.plan(model, batch, runtime_budget=args.runtime_budget, platform=args.platform,
                                   db=args.db, optimizer=optimizer, progress=False, time_limit_s=20, **budget)
        plan.apply(model)
    rss_before = rss_bytes()
    times = []
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        start = time.perf_counter()
        torch.nn.functional.cross_entropy(model(batch), labels).backward()
        times.append(time.perf_counter() - start)  # forward and backward, as the plan's trial steps time them
        optimizer.step()
    result.update(peak_rss=peak_rss_bytes(), rss_before=rss_before, fastest_s=min(times),
                  median_s=sorted(times)[len(times) // 2])
    if plan is not None:
        report = plan.reports[-1]
        result.update(predicted_peak_rss=report.predicted_peak_rss_bytes,
                      predicted_plain_peak_rss=report.predicted_plain_peak_rss_bytes,
                      predicted_step_s=report.predicted_step_time_s, changed=len(plan.schedule.changed()))
        plan.remove(model)
        fresh, _, _ = build(args.model, args.batch, args.size)  # gradients compared on the initial weights
        result["identical"] = plan.verify(fresh, batch).ok
    print(json.dumps(result))


def run(args, config):
    command = [sys.executable, os.path.abspath(__file__), "--worker", config, "--model", args.model,
               "--batch", str(args.batch), "--size", str(args.size), "--steps", str(args.steps),
               "--runtime-budget", args.runtime_budget] + (["--platform", args.platform] if args.platform else []) \
        + (["--db", args.db] if args.db else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mobilenet_v3_small,resnet18")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--budgets", default="50%,25%", help="activation budgets, shares of the plain peak")
    parser.add_argument("--runtime-budget", default="3x")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--platform", help="a board preset's estimated costs instead of measuring this machine")
    parser.add_argument("--db")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    print(f"batch {args.batch}, {args.size}x{args.size}, AdamW, {torch.get_num_threads()} threads, runtime budget "
          f"{args.runtime_budget}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'model':19} {'config':12} {'VmHWM':>8} {'saving':>8} {'predicted':>9} {'ratio':>6} {'VmHWM pred':>10} "
          f"{'fastest':>8} {'median':>8} {'predicted':>9} {'gradients':>9}")
    for args.model in args.models.split(","):
        plain = run(args, "plain")
        checkpointed = run(args, "checkpoint")
        configs = [(f"plan {b}", b) for b in args.budgets.split(",")]
        if "peak_rss" in checkpointed:
            configs.append(("plan =ckpt", str(checkpointed["peak_rss"])))
        rows = [("plain", plain), ("checkpoint", checkpointed)] + [(label, run(args, c)) for label, c in configs]
        for label, r in rows:
            if "error" in r:
                print(f"{args.model:19} {label:12} {r['error']}")
                continue
            saving = plain.get("peak_rss", 0) - r["peak_rss"]
            predicted = r.get("predicted_plain_peak_rss", 0) - r.get("predicted_peak_rss", 0)
            ratio = f"{saving / predicted:6.2f}" if predicted > 0 else f"{'':6}"
            print(f"{args.model:19} {label:12} {r['peak_rss'] / 1e6:6.1f}MB {saving / 1e6:6.1f}MB "
                  f"{predicted / 1e6 if predicted else 0:7.1f}MB {ratio} "
                  f"{r.get('predicted_peak_rss', 0) / 1e6:8.1f}MB {r['fastest_s'] * 1e3:6.1f}ms "
                  f"{r['median_s'] * 1e3:6.1f}ms {r.get('predicted_step_s', 0) * 1e3:7.1f}ms "
                  f"{'' if 'identical' not in r else 'identical' if r['identical'] else 'DIFFER':>9}")


if __name__ == "__main__":
    main()
