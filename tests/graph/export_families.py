#!/usr/bin/python3
"""Exports every torchvision classification builder under 100 M parameters as an ONNX training graph.

The builders are what `torchvision.models.list_models(module=torchvision.models)` returns for Debian's
python3-torchvision, so a family added later is tried without editing this file. Each is built with
random weights (nothing is downloaded), 10 classes and batch 2, at the smallest input its family accepts,
and exported in training mode at opset 13, or 17 where it has a LayerNorm (the transformers, ConvNeXt).
Usage:

  /usr/bin/python3 tests/graph/export_families.py OUT_DIR [--smallest] [BUILDER ...]

`--smallest` exports only the smallest builder of each family (tests/graph/onnx_families_test.cc);
without it, every builder (scripts/onnx_families). OUT_DIR/manifest.tsv gets a row per builder:
builder, family, input side in pixels, parameters (millions, at 1000 classes), opset, and "ok" or why the
export failed. Exit status 3: PyTorch is not installed.
"""
import argparse
import os
import sys
import warnings

try:
    import torch
    import torchvision
    from torch import nn
except ImportError as e:  # the tests skip, saying so
    print(f"PyTorch is not installed ({e}): apt-get install python3-torch python3-torchvision python3-onnx",
          file=sys.stderr)
    sys.exit(3)

MAX_PARAMS_M = 100
BATCH = 2
DEFAULT_SIDE_PX = 64

# The families whose smallest accepted input is not DEFAULT_SIDE_PX, and why.
SIDE_PX = {
    # Its stem reduces by 8 with unpadded convolutions before the 3x3 grid blocks: 75 is the minimum.
    "inception": 80,
    # Its block and grid partitions of 7 need every stage's side to be a multiple of 7: 224 = 7 x 32.
    "maxvit": 224,
    # Its windows of 7: below 224 a stage's side is not a multiple of 7 and the windows are zero-padded
    # (pad ops); 64 keeps the family's test small and pads at every stage.
    "swin_transformer": 64,
}

# Keyword arguments a family's builder needs to export at a small input in training mode.
BUILDER_KWARGS = {
    # The auxiliary classifiers make the training-mode output a tuple; their init needs scipy.
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception": {"aux_logits": False, "init_weights": False},
    # The position embeddings are sized for the input.
    "vision_transformer": {"image_size": DEFAULT_SIDE_PX},
    "maxvit": {"input_size": (SIDE_PX["maxvit"], SIDE_PX["maxvit"])},
}



def family(builder):
    """The torchvision module that defines the builder: resnet (ResNet, ResNeXt, Wide ResNet), vgg, ..."""
    return torchvision.models.get_model_builder(builder).__module__.rsplit(".", 1)[-1]


def params_m(builder):
    """Parameters in millions at 1000 classes, from the weights' metadata (no weights are downloaded)."""
    return torchvision.models.get_model_weights(builder).DEFAULT.meta["num_params"] / 1e6


def smallest_builders(builders=None):
    """The builder with the fewest parameters of each family, sorted by name."""
    smallest = {}
    for b in sorted(builders or all_builders(), key=params_m):
        smallest.setdefault(family(b), b)
    return sorted(smallest.values())


def all_builders():
    """Every classification builder of this torchvision under MAX_PARAMS_M million parameters."""
    return [b for b in torchvision.models.list_models(module=torchvision.models) if params_m(b) < MAX_PARAMS_M]


def exportable_stochastic_depth(module):
    """torchvision's StochasticDepth as PyTorch 1.13 exports it in training mode: its in-place bernoulli_
    has no ONNX symbolic, torch.bernoulli has (RandomUniformLike, Less, Cast), which edgecost imports as
    a row dropout. The same arithmetic: noise divided by the survival rate, then the product."""
    def forward(x):
        if not module.training or module.p == 0.0:
            return x
        survival = 1.0 - module.p
        size = [x.shape[0]] + [1] * (x.dim() - 1) if module.mode == "row" else [1] * x.dim()
        noise = torch.bernoulli(torch.full(size, survival, dtype=x.dtype, device=x.device))
        return x * (noise / survival)
    return forward


class ExportableAdaptiveAvgPool2d(nn.Module):
    """nn.AdaptiveAvgPool2d to any size, as ops PyTorch 1.13 exports (it refuses sizes that are not factors
    of the input's): output cell i of an axis of n -> m averages [floor(i n / m), ceil((i + 1) n / m)), as
    PyTorch computes it; rows first, then columns (a rectangle's mean is the mean of its rows' means)."""

    def __init__(self, output_size):
        super().__init__()
        size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
        self.output_size = tuple(size)

    def forward(self, x):
        for axis, m in ((2, self.output_size[0]), (3, self.output_size[1])):
            n = int(x.shape[axis])  # a constant of the export: the cells' bounds are fixed
            if m is None or n == m:
                continue
            if n % m == 0:
                x = nn.functional.adaptive_avg_pool2d(x, (m, x.shape[3]) if axis == 2 else (x.shape[2], m))
                continue
            cells = [x.narrow(axis, (i * n) // m, -((-(i + 1) * n) // m) - (i * n) // m).mean(axis, keepdim=True)
                     for i in range(m)]
            x = torch.cat(cells, axis)
        return x


def build(builder):
    kwargs = dict(num_classes=10, **BUILDER_KWARGS.get(family(builder), {}))
    model = torchvision.models.get_model_builder(builder)(**kwargs)
    for module in model.modules():
        if isinstance(module, torchvision.ops.StochasticDepth):
            module.forward = exportable_stochastic_depth(module)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.AdaptiveAvgPool2d) and child.output_size not in (1, (1, 1)):
                setattr(parent, name, ExportableAdaptiveAvgPool2d(child.output_size))
    return model


def export(builder, out_dir):
    """The opset used and "ok", or the reason the export failed."""
    torch.manual_seed(0)
    model = build(builder)
    opset = 17 if any(isinstance(m, nn.LayerNorm) for m in model.modules()) else 13
    side_px = SIDE_PX.get(family(builder), DEFAULT_SIDE_PX)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, torch.randn(BATCH, 3, side_px, side_px), os.path.join(out_dir, builder + ".onnx"),
                              input_names=["input"], output_names=["logits"], opset_version=opset,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    except Exception as e:  # reported in the table, not fatal: the sweep goes on
        return opset, "export: " + " ".join(str(e).split())[:200]
    return opset, "ok"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("builders", nargs="*")
    parser.add_argument("--smallest", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    builders = args.builders or all_builders()
    if args.smallest:
        builders = smallest_builders(builders)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "manifest.tsv"), "w") as manifest:
        for b in builders:
            opset, status = export(b, args.out_dir)
            side_px = SIDE_PX.get(family(b), DEFAULT_SIDE_PX)
            manifest.write(f"{b}\t{family(b)}\t{side_px}\t{params_m(b):.1f}\t{opset}\t{status}\n")
            manifest.flush()
            print(b, status, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
