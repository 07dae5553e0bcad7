#!/usr/bin/python3
"""A small CNN exported by PyTorch, and the checks that edgecost trains it from its own weights.

Usage:
  /usr/bin/python3 tests/train/torch_weights.py export DIR
      DIR/cnn.onnx: the CNN (seeded random weights, training-mode export at batch 4, opset 13), and
      two broken copies for the loader's errors: cnn_f64.onnx (conv1.weight as float64) and
      cnn_badshape.onnx (conv1.weight's dims swapped, the same element count).
  /usr/bin/python3 tests/train/torch_weights.py check DIR BATCH FIRST_LOSS STEPS LR TRAINED_LOSS EVAL_LOSS EVAL_CORRECT
      BATCH holds the input and labels every step used (each a little-endian uint32 count, then that
      many float32 values); FIRST_LOSS is edgecost's first loss from cnn.onnx, STEPS and LR what it
      trained with, writing DIR/trained.onnx and DIR/trained.npz; TRAINED_LOSS is edgecost's loss
      on BATCH from trained.onnx. Checks, in float64 against edgecost's float32:
        - PyTorch's loss with the exported weights is FIRST_LOSS (the file's weights went in);
        - the .npz loads with load_state_dict(strict=True) and holds what STEPS steps of PyTorch's
          own SGD reach from the same weights and batch (the trained weights came out), batch-norm
          running mean and variance included (from the file's, momentum 0.1) and num_batches_tracked;
        - EVAL_LOSS and EVAL_CORRECT, edgecost's inference-mode loss (batch mean) and correct argmaxes
          on BATCH from trained.onnx, are PyTorch's in eval() mode with the .npz;
        - the ONNX checker accepts trained.onnx, its initializers are the .npz's, and PyTorch's
          forward with them gives TRAINED_LOSS (what edgecost computes from the written file).
Exit status 3: no PyTorch; 1: a check failed (stderr says which).
"""
import os
import struct
import sys

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    from torch import nn
except ImportError as e:
    print(f"needs numpy, onnx and torch: {e}", file=sys.stderr)
    sys.exit(3)

BATCH, CLASSES = 4, 10


class SmallCnn(nn.Module):
    """A convolution without bias and its batch norm, a depthwise convolution with bias, a Linear
    (Gemm with transB) and a product by a (in, out) weight plus a bias (MatMul then Add)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.w2 = nn.Parameter(torch.randn(16, CLASSES) * 0.3)
        self.b2 = nn.Parameter(torch.randn(CLASSES) * 0.1)
        with torch.no_grad():  # not PyTorch's defaults, so that loading them is seen
            self.bn1.weight.copy_(1 + 0.2 * torch.randn(8))
            self.bn1.bias.copy_(0.2 * torch.randn(8))
            self.bn1.running_mean.copy_(0.1 * torch.randn(8))
            self.bn1.running_var.copy_(1 + 0.1 * torch.rand(8))

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        return x @ self.w2 + self.b2


def make():
    torch.manual_seed(0)
    return SmallCnn()


def export(out_dir):
    model = make()
    model.train()
    path = os.path.join(out_dir, "cnn.onnx")
    torch.onnx.export(model, torch.randn(BATCH, 3, 8, 8), path, input_names=["input"], output_names=["logits"],
                      opset_version=13, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    for suffix, change in (("f64", to_float64), ("badshape", swap_dims)):
        broken = onnx.load(path)
        for i, t in enumerate(broken.graph.initializer):
            if t.name == "conv1.weight":
                broken.graph.initializer[i].CopyFrom(change(t))
        onnx.save(broken, os.path.join(out_dir, f"cnn_{suffix}.onnx"))
    return 0


def to_float64(t):
    return onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t).astype(np.float64), t.name)


def swap_dims(t):
    a = onnx.numpy_helper.to_array(t)
    return onnx.numpy_helper.from_array(np.ascontiguousarray(a.reshape(a.shape[1], a.shape[0], *a.shape[2:])), t.name)


def read_tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    tensors, at = [], 0
    while at < len(data):
        (count,) = struct.unpack_from("<I", data, at)
        at += 4
        tensors.append(np.frombuffer(data, dtype="<f4", count=count, offset=at).astype(np.float64))
        at += 4 * count
    return tensors


def loss_of(model, x, labels):
    return nn.functional.cross_entropy(model(x), labels).item()  # the batch mean, as edgecost reports it


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def close(a, b, what, tol):
    if not np.allclose(a, b, rtol=tol, atol=tol):
        fail(f"{what}: largest difference {np.max(np.abs(np.asarray(a) - np.asarray(b))):.3g} (tolerance {tol})")


def check(out_dir, batch_path, first_loss, steps, lr, trained_loss, eval_loss, eval_correct):
    torch.set_num_threads(1)
    inputs, labels = read_tensors(batch_path)
    x = torch.from_numpy(inputs.reshape(BATCH, 3, 8, 8))
    y = torch.from_numpy(labels).round().long()

    # Weights in: PyTorch's loss with the exported weights is edgecost's first.
    model = make().double()
    model.train()
    close(loss_of(model, x, y), first_loss, "the first loss from the file's weights, PyTorch's vs edgecost's", 1e-4)

    # Weights out: PyTorch's own SGD from the same weights on the same batch, running statistics from
    # the file's (the export's tracing pass moved them from make()'s; the loss above moved them again).
    exported = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(os.path.join(out_dir, "cnn.onnx")).graph.initializer}
    with torch.no_grad():
        for name in ("running_mean", "running_var"):
            getattr(model.bn1, name).copy_(torch.from_numpy(exported["bn1." + name].astype(np.float64)))
        model.bn1.num_batches_tracked.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    state = np.load(os.path.join(out_dir, "trained.npz"))
    loaded = make().double()
    loaded.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    for name, p in model.named_parameters():
        close(dict(loaded.named_parameters())[name].detach().numpy(), p.detach().numpy(),
              f"{name} after {steps} steps, edgecost's .npz vs PyTorch's SGD", 1e-4)
    for name in ("running_mean", "running_var"):
        close(state["bn1." + name], getattr(model.bn1, name).numpy(),
              f"bn1.{name} after {steps} steps, edgecost's vs PyTorch's", 1e-5)
        if np.array_equal(state["bn1." + name], exported["bn1." + name]):
            fail(f"bn1.{name} did not move from the file's")
    if int(state["bn1.num_batches_tracked"]) != steps:
        fail(f"num_batches_tracked is {state['bn1.num_batches_tracked']}, not {steps}")

    # Inference mode: PyTorch's eval() with the .npz, edgecost's Evaluate from trained.onnx.
    eval_model = make().double()
    eval_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    eval_model.eval()
    with torch.no_grad():
        logits = eval_model(x)
    close(nn.functional.cross_entropy(logits, y).item(), eval_loss, "the inference-mode loss, PyTorch's vs edgecost's",
          1e-4)
    if int((logits.argmax(1) == y).sum()) != eval_correct:
        fail(f"PyTorch's eval() gets {int((logits.argmax(1) == y).sum())} right, edgecost's Evaluate {eval_correct}")

    # The written ONNX: valid, its initializers are the .npz's, and edgecost's loss from it is PyTorch's.
    written = onnx.load(os.path.join(out_dir, "trained.onnx"))
    onnx.checker.check_model(written, full_check=True)
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in written.graph.initializer}
    for name, value in state.items():
        if name.endswith("num_batches_tracked"):  # a PyTorch buffer ONNX has no initializer for
            continue
        if name not in initializers or not np.array_equal(initializers[name], value):
            fail(f"trained.onnx's initializer {name} is not the .npz's")
    close(loss_of(loaded, x, y), trained_loss, "the loss from the trained weights, PyTorch's vs edgecost's from "
          "trained.onnx", 1e-4)
    print(f"ok: {len(state)} arrays; first loss {first_loss:.6f}, after {steps} steps {trained_loss:.6f}")
    return 0


def main():
    if sys.argv[1] == "export":
        return export(sys.argv[2])
    out_dir, batch_path = sys.argv[2], sys.argv[3]
    return check(out_dir, batch_path, float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7]),
                 float(sys.argv[8]), int(sys.argv[9]))


if __name__ == "__main__":
    sys.exit(main())
