#!/usr/bin/env python3
"""Fine-tune MobileNetV2 on random stand-in data under an edgecost plan: half the activation
memory of a plain step, at most 1.5x its time. Copy it and put your model, data and loss in.

    EDGECOST_BIN=build/cli/edgecost /usr/bin/python3 python/examples/finetune.py --platform a72
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # run from the source tree too

import torch
import torchvision

import edgecost.torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", help="plan with a board preset's estimated costs (a72, ...) instead of "
                        "measuring this machine")
    parser.add_argument("--activation-budget", default="50%", help="e.g. 2MB, or 50%% of a plain step's peak")
    parser.add_argument("--runtime-budget", default="1.5x")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10)
    images = torch.randn(64, 3, 32, 32)        # your data here
    labels = torch.randint(0, 10, (64,))
    batch_size = 4
    loss_fn = torch.nn.CrossEntropyLoss()

    # The three lines: plan for one batch's shape, apply, then train as usual.
    plan = edgecost.torch.plan(model, images[:batch_size], activation_budget=args.activation_budget,
                               runtime_budget=args.runtime_budget, platform=args.platform, device="this")
    model = plan.apply(model, report_steps=True)
    print(plan.describe())

    check = plan.verify(model, images[:batch_size], loss_fn=lambda out: loss_fn(out, labels[:batch_size]))
    print(f"gradients as plain PyTorch's: {'identical' if check.identical else f'max rel err {check.max_relative_error:.2g}'}")

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for step in range(args.steps):
        start = (step * batch_size) % len(images)
        x, y = images[start:start + batch_size], labels[start:start + batch_size]
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    plan.remove(model)  # plain PyTorch again


if __name__ == "__main__":
    main()
