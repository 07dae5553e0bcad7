#!/usr/bin/python3
"""PyTorch's own gradients of one training step, with edgecost's weights and batch.

Usage: /usr/bin/python3 tests/train/torch_gradients.py MODEL IN_FILE OUT_FILE [FLOAT32_OUT_FILE]

MODEL is a name from tests/graph/export_models.py. IN_FILE holds the model's parameters in the
order edgecost's executor lists its trained parameters (forward order, weight before bias:
export_models.forward_order, model.parameters() but for ViT's class token), then the input, then
the labels; OUT_FILE gets the gradient of the summed cross-entropy loss for each parameter, in the
same order, then the loss. Both files are sequences of tensors, each a little-endian uint32
element count followed by that many float32 values. The step runs in float64, so that the
reference's own rounding is negligible against edgecost's float32. FLOAT32_OUT_FILE, if given, gets
the same step's gradients and loss in PyTorch's float32 (same weights, batch and order): how far
float32 rounding alone carries a model from the float64 reference. Exit status 3: no PyTorch.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graph"))
import export_models  # noqa: E402  (exits 3 without PyTorch)
import torch  # noqa: E402


def read_tensors(path):
    tensors = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        (count,) = struct.unpack_from("<I", data, at)
        at += 4
        tensors.append(torch.tensor(struct.unpack_from(f"<{count}f", data, at), dtype=torch.float64))
        at += 4 * count
    return tensors


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        for t in tensors:
            values = t.detach().reshape(-1).to(torch.float32).tolist()
            f.write(struct.pack("<I", len(values)))
            f.write(struct.pack(f"<{len(values)}f", *values))


def gradients(name, model, tensors, dtype):
    """The parameters' gradients of the summed cross-entropy loss, then the loss, with `tensors` as weights,
    input and labels, computed in `dtype`."""
    make, example = export_models.MODELS[name]
    model = model.to(dtype)
    model.train()
    params = export_models.forward_order(name, model)
    for p, t in zip(params, tensors):
        p.data.copy_(t.reshape(p.shape))
    x = tensors[-2].reshape(example().shape)
    x = x.to(dtype) if example().is_floating_point() else x.round().long()
    labels = tensors[-1].round().long()
    loss = torch.nn.functional.cross_entropy(model(x), labels, reduction="sum")
    loss.backward()
    return [p.grad for p in params] + [loss.reshape(1)]


def main():
    name, in_path, out_path = sys.argv[1:4]
    float32_path = sys.argv[4] if len(sys.argv) > 4 else None
    torch.set_num_threads(1)
    make, example = export_models.MODELS[name]
    torch.manual_seed(0)
    model = make().double()
    model.train()
    params = export_models.forward_order(name, model)
    tensors = read_tensors(in_path)
    if len(tensors) != len(params) + 2:
        sys.exit(f"{in_path} has {len(tensors)} tensors; {name} has {len(params)} parameters, then input and labels")
    for i, (p, t) in enumerate(zip(params, tensors)):
        if p.numel() != t.numel():
            sys.exit(f"parameter {i} of {name} has shape {tuple(p.shape)}; edgecost's has {t.numel()} elements")
    write_tensors(out_path, gradients(name, model, tensors, torch.float64))
    if float32_path:
        torch.manual_seed(0)
        write_tensors(float32_path, gradients(name, make(), tensors, torch.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
