#!/usr/bin/python3
"""Real data for the fine-tuning proof: scikit-learn's 8x8 handwritten digits (1,797 images).

  digits.py prepare DIR [--batch N] [--split records|classes]
      Splits the digits (seeded): 500 to pretrain a small CNN in PyTorch for one epoch, 997 to
      fine-tune it on the device, 300 held out. Writes DIR/digits_cnn.onnx (exported in training
      mode, batch N), DIR/finetune.npz and DIR/heldout.npz (x: float32 N x 1 x 8 x 8 in [0, 1],
      y: int64), and prints the pretrained model's held-out accuracy. With --split classes, a
      transfer task: pretrained for five epochs on the digits 0-4, fine-tuned on 600 of the 5-9s,
      the other 5-9s held out.
  digits.py accuracy DIR WEIGHTS.npz
      Loads a state dict written by `edgecost train --out` into the same CNN and prints its
      accuracy on DIR/heldout.npz in eval mode (running batch-norm statistics), as a fraction.
"""
import argparse
import os
import sys
import warnings

import numpy as np

try:
    import sklearn.datasets  # noqa: F401  (the data)
    import torch
    from torch import nn
except ImportError as e:  # exit 3: the tests skip, saying what to install
    print(f"{e}: apt-get install python3-torch python3-onnx python3-sklearn", file=sys.stderr)
    sys.exit(3)

PRETRAIN, FINETUNE = 500, 997


class DigitsCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.classifier = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def splits(by_class=False):
    digits = sklearn.datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(y))
    x, y = x[order], y[order]
    if by_class:
        old, new = y < 5, y >= 5
        return [(x[old], y[old]), (x[new][:600], y[new][:600]), (x[new][600:], y[new][600:])]
    cut = [0, PRETRAIN, PRETRAIN + FINETUNE, len(y)]
    return [(x[a:b], y[a:b]) for a, b in zip(cut, cut[1:])]


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((predicted == y).mean())


def prepare(out_dir, batch, by_class):
    (x_pre, y_pre), finetune, heldout = splits(by_class)
    torch.manual_seed(0)
    model = DigitsCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    epochs = 5 if by_class else 1
    for _ in range(epochs):
        for start in range(0, len(y_pre) - batch + 1, batch):
            optimizer.zero_grad()
            loss = loss_fn(model(torch.from_numpy(x_pre[start:start + batch])),
                           torch.from_numpy(y_pre[start:start + batch]))
            loss.backward()
            optimizer.step()
    print(f"pretrained on {len(y_pre)} digits for {epochs} epoch(s): held-out accuracy "
          f"{accuracy(model, *heldout):.4f}")
    os.makedirs(out_dir, exist_ok=True)
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.zeros(batch, 1, 8, 8), os.path.join(out_dir, "digits_cnn.onnx"),
                          input_names=["input"], output_names=["logits"], opset_version=13,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    for name, (x, y) in (("finetune", finetune), ("heldout", heldout)):
        np.savez_compressed(os.path.join(out_dir, name + ".npz"), x=x, y=y)


def trained_accuracy(out_dir, weights):
    model = DigitsCnn()
    state = {k: torch.from_numpy(v) for k, v in np.load(weights).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # num_batches_tracked does not change the eval-mode forward pass.
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    held = np.load(os.path.join(out_dir, "heldout.npz"))
    print(f"{accuracy(model, held['x'], held['y']):.6f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("dir")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--split", choices=("records", "classes"), default="records")
    a = sub.add_parser("accuracy")
    a.add_argument("dir")
    a.add_argument("weights")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.dir, args.batch, args.split == "classes")
    else:
        trained_accuracy(args.dir, args.weights)


if __name__ == "__main__":
    main()
