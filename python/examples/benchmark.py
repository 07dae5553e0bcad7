#!/usr/bin/env python3
"""Per model: the saved-tensor peak under the plan against the planned peak, the step time
against the prediction for what runs, and whether gradients equal plain PyTorch's. A benchmark
that prints figures, not a test. Measures this machine's costs unless --platform is given.

    EDGECOST_BIN=build/cli/edgecost /usr/bin/python3 python/examples/benchmark.py [--platform a72] [--accept-noisy]
"""

import argparse
import os
import time
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch
import torchvision

import edgecost.torch


def models():
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.encoder, self.head = torch.nn.Linear(16, 32), torch.nn.TransformerEncoder(layer, 2), \
                torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.head(self.encoder(self.embed(x)).mean(dim=1))

    yield "resnet18", torchvision.models.resnet18(num_classes=10), torch.randn(2, 3, 32, 32)
    yield "mobilenet_v2", torchvision.models.mobilenet_v2(num_classes=10), torch.randn(2, 3, 32, 32)
    yield "efficientnet_b0", torchvision.models.efficientnet_b0(num_classes=10), torch.randn(2, 3, 32, 32)
    yield "transformer_encoder", Encoder(), torch.randn(2, 8, 16)


def _median_plain_step_s(model, batch, steps):
    """Plain PyTorch's step, no hooks: PyTorch's kernels against the ones edgecost measured."""
    times = []
    for _ in range(steps):
        model.zero_grad()
        start = time.perf_counter()
        model(batch).sum().backward()
        times.append(time.perf_counter() - start)
    times = sorted(times[1:] or times)
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform")
    # On measured costs paging time counts against the runtime budget: at half the peak ResNet18 has no
    # schedule within 2x on a VM whose storage is slow next to its compute.
    parser.add_argument("--activation-budget", default="70%")
    parser.add_argument("--runtime-budget", default="2x")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--db")
    parser.add_argument("--accept-noisy", action="store_true",
                        help="build this machine's cost table even if other work disturbed some measurements")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    torch.manual_seed(0)  # the same weights each run: the same stored model, its costs measured once
    for name, model, batch in models():
        torch.manual_seed(0)
        try:
            plan = edgecost.torch.plan(model, batch, activation_budget=args.activation_budget,
                                       runtime_budget=args.runtime_budget, platform=args.platform, db=args.db,
                                       time_limit_s=20, progress=False, accept_noisy_costs=args.accept_noisy)
        except Exception as error:  # e.g. an export PyTorch cannot do in training mode
            print(f"{name}: not planned: {str(error).splitlines()[0][:200]}")
            continue
        check = plan.verify(model, batch)
        plan.apply(model)
        for _ in range(args.steps):
            model.zero_grad()
            model(batch).sum().backward()
        plan.remove(model)
        steps = plan.reports[-args.steps + 1:] or plan.reports[-1:]  # the first step warms up
        step_s = sorted(r.step_time_s for r in steps)[len(steps) // 2]
        plain_s = _median_plain_step_s(model, batch, args.steps)
        rows.append((name, check.saved_peak_bytes, plan.realized_peak_bytes, plan.predicted_peak_bytes,
                     check.plain_saved_peak_bytes, check.state_peak_bytes, step_s, plan.realized_step_time_s,
                     plan.predicted_step_time_s, plain_s, plan.schedule.plain_step_time_s,
                     "identical" if check.identical else f"{check.max_relative_error:.1g}",
                     len(plan.realization.moved(plan.schedule))))
    # saved: activations autograd held (through the hooks); as run / plan: the peak `edgecost check`
    # replays for the realized stages, and the schedule's; op state: batch-norm statistics and the like,
    # layer state to edgecost. step: the median measured step under the plan; predicted: the replay's
    # for the realized stages; plain: PyTorch without the plan, and edgecost's plain step on its
    # measured kernels; slowdown: the plan's step over the plain one, measured and predicted. PyTorch's
    # kernels are not the oneDNN primitives edgecost measured, so the absolute prediction is off by
    # their ratio; scaled: PyTorch's plain step times the predicted slowdown, and the measured step over it.
    print(f"{'model':20} {'saved':>8} {'as run':>8} {'plan':>8} {'plain':>8} {'op state':>8} {'step':>9} "
          f"{'predicted':>9} {'ratio':>6} {'(plan)':>9} {'plain':>9} {'predicted':>9} {'slowdown':>8} {'predicted':>9} "
          f"{'scaled':>9} {'ratio':>6} {'gradients':>10} {'moved':>5}")
    for (name, peak, realized, planned, plain, state, step_s, realized_s, planned_s, plain_s, plain_predicted_s,
         grads, moved) in rows:
        print(f"{name:20} {peak / 1e3:6.0f}kB {realized / 1e3:6.0f}kB {planned / 1e3:6.0f}kB {plain / 1e3:6.0f}kB "
              f"{state / 1e3:6.0f}kB {step_s * 1e3:7.1f}ms {realized_s * 1e3:7.1f}ms {step_s / realized_s:6.2f} "
              f"{planned_s * 1e3:7.1f}ms {plain_s * 1e3:7.1f}ms {plain_predicted_s * 1e3:7.1f}ms "
              f"{step_s / plain_s:8.2f} {realized_s / plain_predicted_s:9.2f} "
              f"{plain_s * realized_s / plain_predicted_s * 1e3:7.1f}ms {step_s / (plain_s * realized_s / plain_predicted_s):6.2f} "
              f"{grads:>10} {moved:5}")

if __name__ == "__main__":
    main()
