#!/usr/bin/python3
"""Exports the models edge devices train, with random weights, as ONNX training graphs.

Run by the ONNX model tests (tests/graph/onnx_models_test.cc) during the test run, with Debian's
python3-torch and python3-torchvision: nothing is downloaded. Usage:

  /usr/bin/python3 tests/graph/export_models.py OUT_DIR [MODEL ...] [--opset N] [--eval] [--batch N]
  /usr/bin/python3 tests/graph/export_models.py --time [MODEL ...] [--threads N] [--steps N] [--batch N]
  /usr/bin/python3 tests/graph/export_models.py OUT_DIR --suite

`--suite` exports what tests/graph/onnx_models_test.cc reads in one run: every model (opset 13) but
the HEAVY ones, the transformers at opset 17 into OUT_DIR/opset17 and mobilenet_v2 in eval mode into
OUT_DIR/eval; `--suite --heavy` adds the HEAVY ones (scripts/onnx_families).
Exit status 3: PyTorch is not installed.
`--list` prints the model names. `--eval` exports in eval mode (batch norm folded), as users do by
mistake. `--time` measures a PyTorch training step (forward, loss, backward, SGD update) per model
and prints `model median_s min_s` lines, for scripts/compare_models and `edgecost bench train
--vs-pytorch`, after a `# blas PATH ...` line naming the BLAS libraries the process mapped.
"""
import argparse
import os
import re
import statistics
import sys
import time
import warnings

try:
    import torch
    from torch import nn
except ImportError as e:  # the tests skip, saying so
    print(f"PyTorch is not installed ({e}): apt-get install python3-torch python3-torchvision python3-onnx",
          file=sys.stderr)
    sys.exit(3)

import export_families  # noqa: E402 (after the check that PyTorch is there)


class TransformerClassifier(nn.Module):
    """A 2-layer nn.TransformerEncoder (d_model 128, 4 heads) over a sequence of 64 feature vectors,
    with a classification head on the mean over the sequence."""

    def __init__(self, d_model=128, heads=4, layers=2, classes=10):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


class BertBlock(nn.Module):
    """One post-norm BERT layer in plain torch.nn: self-attention, GELU feed-forward, LayerNorm."""

    def __init__(self, d_model, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        n, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(n, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        context = (self.drop(scores.softmax(dim=-1)) @ v).transpose(1, 2).reshape(n, s, d)
        x = self.norm1(x + self.drop(self.out(context)))
        return self.norm2(x + self.drop(self.ff(x)))


class SmallBert(nn.Module):
    """A small BERT-style encoder: token and position embeddings, 2 blocks, a [CLS] classifier."""

    def __init__(self, vocab=1000, seq=64, d_model=128, heads=4, layers=2, classes=2, dropout=0.1):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.blocks = nn.ModuleList(BertBlock(d_model, heads, dropout) for _ in range(layers))
        self.head = nn.Linear(d_model, classes)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(torch.tanh(x[:, 0]))


class GptBlock(nn.Module):
    """One pre-norm GPT-2 block in plain torch.nn: causal self-attention, then a GELU MLP."""

    def __init__(self, d_model, heads, dropout):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        n, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(n, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        positions = torch.arange(s, device=x.device)
        future = positions[None, :] > positions[:, None]  # token i sees tokens 0..i
        scores = scores.masked_fill(future, float("-inf"))
        context = (self.drop(scores.softmax(dim=-1)) @ v).transpose(1, 2).reshape(n, s, d)
        x = x + self.drop(self.out(context))
        return x + self.drop(self.mlp(self.norm2(x)))


class SmallGpt(nn.Module):
    """A small GPT-2-style causal language model: token and position embeddings, pre-norm blocks, a final
    LayerNorm and an LM head tied to the token embedding (one parameter, two uses). Returns the next-token
    logits of every position as rows, (batch * sequence, vocabulary), for a per-token cross-entropy."""

    def __init__(self, vocab=256, seq=32, d_model=64, heads=4, layers=2, dropout=0.1):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(GptBlock(d_model, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).reshape(-1, self.head.out_features)


def conv_block(cin, cout):
    """Two 3x3 convolutions, each with batch norm and ReLU: U-Net's unit."""
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class SmallUNet(nn.Module):
    """A small U-Net for segmentation: two encoder levels (conv block, 2x2 max pooling), a bottleneck, two
    decoder levels that upsample (bilinear, then nearest: F.interpolate's two common modes), concatenate the
    encoder's skip and convolve, and a 1x1 convolution to per-pixel class logits. Returns one row of logits
    per pixel, (batch * height * width, classes), for a per-pixel cross-entropy."""

    def __init__(self, classes=3, width=8):
        super().__init__()
        self.enc1, self.enc2 = conv_block(3, width), conv_block(width, 2 * width)
        self.bottleneck = conv_block(2 * width, 4 * width)
        self.dec2, self.dec1 = conv_block(6 * width, 2 * width), conv_block(3 * width, width)
        self.head = nn.Conv2d(width, classes, 1)
        self.up_bilinear = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up_nearest = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(nn.functional.max_pool2d(e1, 2))
        b = self.bottleneck(nn.functional.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up_bilinear(b), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up_nearest(d2), e1], dim=1))
        logits = self.head(d1)
        return logits.permute(0, 2, 3, 1).reshape(-1, logits.shape[1])


class TinyResNet(nn.Module):
    """A ResNet of torchvision's BasicBlocks at widths 8 and 16: a stem convolution, an identity block
    and a strided block with its 1x1 downsampling convolution, global pooling and a Linear, for tests
    that train many steps."""

    def __init__(self, classes=10):
        super().__init__()
        from torchvision.models.resnet import BasicBlock

        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        downsample = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
        self.blocks = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, stride=2, downsample=downsample))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class SequenceClassifier(nn.Module):
    """A recurrent classifier of feature sequences: keyword spotting over MFCC frames or activity
    recognition over sensor readings. An nn.LSTM or nn.GRU, then a Linear on the last step's
    output (`last="output"`, batch-first or time-major) or on the last layer's final state
    (`last="state"`, h_n[-1])."""

    def __init__(self, rnn, features, hidden, layers, classes, batch_first, last="output"):
        super().__init__()
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[rnn](features, hidden, num_layers=layers, batch_first=batch_first)
        self.head = nn.Linear(hidden, classes)
        self.batch_first = batch_first
        self.last = last

    def forward(self, x):
        y, state = self.rnn(x)
        if self.last == "state":
            h = state[0] if isinstance(state, tuple) else state
            return self.head(h[-1])
        return self.head(y[:, -1] if self.batch_first else y[-1])


class KeywordCrnn(nn.Module):
    """Keyword spotting as a convolutional recurrent network (Arik et al., 2017): two 3x3 convolutions
    with batch norm over the (time, MFCC) plane, 2x2 max pooling, then the channels of each frame as
    one feature vector into a 2-layer batch-first LSTM, and a Linear on the last frame's output."""

    def __init__(self, mfcc=10, channels=16, hidden=64, classes=12):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.MaxPool2d(2))
        self.rnn = nn.LSTM(channels * (mfcc // 2), hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):  # x: (batch, 1, frames, mfcc)
        f = self.conv(x)  # (batch, channels, frames / 2, mfcc / 2)
        f = f.permute(0, 2, 1, 3).flatten(2)  # (batch, frames / 2, channels * mfcc / 2)
        y, _ = self.rnn(f)
        return self.head(y[:, -1])


class SensorGru(nn.Module):
    """Activity recognition over time-major IMU readings: a per-step MLP encoder (three Linear + ReLU),
    a 2-layer GRU, and a Linear on the last layer's final state (h_n[-1])."""

    def __init__(self, channels=6, width=32, hidden=32, classes=6):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(channels, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                     nn.Linear(width, width), nn.ReLU())
        self.rnn = nn.GRU(width, hidden, num_layers=2)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):  # x: (time, batch, channels)
        _, h = self.rnn(self.encoder(x))
        return self.head(h[-1])


def vit_tiny():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                             num_classes=3)


def swin_tiny():
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 1], num_heads=[2, 2], window_size=[4, 4],
                           stochastic_depth_prob=0.0, num_classes=3)


def maxvit_tiny():
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(28, 28), stem_channels=8, partition_size=7, block_channels=[16], block_layers=[1],
                  head_dim=8, stochastic_depth_prob=0.0, mlp_dropout=0.0, attention_dropout=0.0, num_classes=3)


def torchvision_model(name, **kwargs):
    import torchvision

    return getattr(torchvision.models, name)(num_classes=10, **kwargs)


# name: (constructor, example input)
MODELS = {
    # torchvision's resnet18 at CIFAR size; "resnet18" names the zoo's own (224x224).
    "resnet18_tv": (lambda: torchvision_model("resnet18"), lambda: torch.randn(2, 3, 32, 32)),
    "mobilenet_v2": (lambda: torchvision_model("mobilenet_v2"), lambda: torch.randn(2, 3, 64, 64)),
    "mobilenet_v3_small": (lambda: torchvision_model("mobilenet_v3_small"), lambda: torch.randn(2, 3, 64, 64)),
    # PyTorch 1.13 cannot export stochastic depth's bernoulli_ in training mode: it is left out.
    "efficientnet_b0": (lambda: torchvision_model("efficientnet_b0", stochastic_depth_prob=0.0), lambda: torch.randn(2, 3, 64, 64)),
    "mnasnet0_5": (lambda: torchvision_model("mnasnet0_5"), lambda: torch.randn(2, 3, 64, 64)),
    "shufflenet_v2_x0_5": (lambda: torchvision_model("shufflenet_v2_x0_5"), lambda: torch.randn(2, 3, 64, 64)),
    "squeezenet1_1": (lambda: torchvision_model("squeezenet1_1"), lambda: torch.randn(2, 3, 64, 64)),
    # The smallest builders of families that import since issue 31, built as tests/graph/export_families.py
    # builds them (stochastic depth through torch.bernoulli, imported as a row dropout).
    "densenet121": (lambda: export_families.build("densenet121"), lambda: torch.randn(2, 3, 64, 64)),
    "convnext_tiny": (lambda: export_families.build("convnext_tiny"), lambda: torch.randn(2, 3, 64, 64)),
    "inception_v3": (lambda: export_families.build("inception_v3"),
                     lambda: torch.randn(2, 3, export_families.SIDE_PX["inception"], export_families.SIDE_PX["inception"])),
    # Keyword spotting: 50 frames of 10 MFCCs (a second of audio at 20 ms hops), conv front end, 2-layer LSTM, 12 words.
    # The smallest builders of the other families (issue 31), at the inputs tests/graph/export_families.py
    # exports them at (AlexNet's 6x6 adaptive pooling of a 1x1 map as slices and a concat).
    "alexnet": (lambda: export_families.build("alexnet"), lambda: torch.randn(2, 3, 64, 64)),
    "googlenet": (lambda: export_families.build("googlenet"), lambda: torch.randn(2, 3, 64, 64)),
    "regnet_y_400mf": (lambda: export_families.build("regnet_y_400mf"), lambda: torch.randn(2, 3, 64, 64)),
    "kws_lstm": (KeywordCrnn, lambda: torch.randn(2, 1, 50, 10)),
    # Activity recognition: 64 time-major steps of 6 IMU channels, an MLP encoder, a 2-layer GRU, 6 activities.
    "sensor_gru": (SensorGru, lambda: torch.randn(64, 2, 6)),
    "vit_b_16": (lambda: export_families.build("vit_b_16"), lambda: torch.randn(2, 3, 64, 64)),
    "maxvit_t": (lambda: export_families.build("maxvit_t"),
                 lambda: torch.randn(2, 3, export_families.SIDE_PX["maxvit"], export_families.SIDE_PX["maxvit"])),
    "swin_t": (lambda: export_families.build("swin_t"),
               lambda: torch.randn(2, 3, export_families.SIDE_PX["swin_transformer"],
                                   export_families.SIDE_PX["swin_transformer"])),
    "transformer_encoder": (TransformerClassifier, lambda: torch.randn(2, 64, 128)),
    "small_bert": (SmallBert, lambda: torch.randint(0, 1000, (2, 64))),
    "small_gpt": (SmallGpt, lambda: torch.randint(0, 256, (2, 32))),
    "small_unet": (SmallUNet, lambda: torch.randn(2, 3, 32, 32)),
}

# Tiny variants without dropout for the training tests (tests/train/onnx_train_test.cc): seconds for 50
# steps, and gradients comparable with PyTorch's own (edgecost's dropout masks are its own draws).
TINY_MODELS = {
    "mobilenet_v2_tiny": (lambda: torchvision_model("mobilenet_v2", width_mult=0.25, dropout=0.0),
                          lambda: torch.randn(2, 3, 64, 64)),
    "mobilenet_v3_tiny": (lambda: torchvision_model("mobilenet_v3_small", width_mult=0.5, dropout=0.0),
                          lambda: torch.randn(2, 3, 64, 64)),
    "resnet_tiny": (TinyResNet, lambda: torch.randn(2, 3, 16, 16)),
    "lstm_tiny": (lambda: SequenceClassifier("lstm", 5, 8, 1, 3, batch_first=False), lambda: torch.randn(6, 2, 5)),
    "gru_tiny": (lambda: SequenceClassifier("gru", 5, 8, 2, 3, batch_first=True, last="state"),
                 lambda: torch.randn(2, 6, 5)),
    "lstm2_tiny": (lambda: SequenceClassifier("lstm", 5, 8, 2, 3, batch_first=True, last="state"),
                   lambda: torch.randn(2, 6, 5)),
    "unet_tiny": (lambda: SmallUNet(classes=3, width=8), lambda: torch.randn(2, 3, 8, 4)),
    "gpt_tiny": (lambda: SmallGpt(vocab=40, seq=6, d_model=16, heads=2, layers=1, dropout=0.0),
                 lambda: torch.randint(0, 40, (2, 6))),
    "bert_tiny": (lambda: SmallBert(vocab=50, seq=8, d_model=16, heads=2, layers=1, classes=3, dropout=0.0),
                  lambda: torch.randint(0, 50, (2, 8))),
    # torchvision's VisionTransformer (class token expanded to the batch, position embeddings, its
    # nn.MultiheadAttention) at 16x16 in 4x4 patches, one layer of width 16.
    "vit_tiny": (lambda: vit_tiny(), lambda: torch.randn(2, 3, 16, 16)),
    # torchvision's SwinTransformer at 32x32: 8x8 patches in windows of 4 (a relative position bias per
    # block, the second block's windows shifted by 2 with their mask), then patch merging (strided slices).
    "swin_tiny": (lambda: swin_tiny(), lambda: torch.randn(2, 3, 32, 32)),
    # The same at 24x24: 6x6 patches in windows of 4, zero-padded to 8x8 (Pad), as Swin below 224 is.
    "swin_pad_tiny": (lambda: swin_tiny(), lambda: torch.randn(2, 3, 24, 24)),
    # torchvision's MaxVit at 28x28: one block (MBConv, then window and grid attention over partitions of 7,
    # its attention written as Einsum, a relative position bias per attention).
    "maxvit_tiny": (lambda: maxvit_tiny(), lambda: torch.randn(2, 3, 28, 28)),
    # The batch-normed MLP of tabular data: BatchNorm1d on a 2-D (batch, features) input.
    "mlp_bn_tiny": (lambda: torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                                torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                                torch.nn.Linear(16, 3)),
                    lambda: torch.randn(2, 5)),
}
MODELS.update(TINY_MODELS)

# Exported for `edgecost bench predict` only, so that its predictions are judged on a model no test has seen.
BENCH_ONLY = {"bench_regnet_x_400mf": (lambda: torchvision_model("regnet_x_400mf"), lambda: torch.randn(2, 3, 64, 64))}
MODELS.update(BENCH_ONLY)


def without_dropout(model):
    """Dropout and stochastic depth off (p = 0), as PyTorch exports them at p = 0: edgecost draws its own
    masks, so only a model without them has PyTorch's gradients to compare with."""
    import torchvision

    for module in model.modules():
        if isinstance(module, (nn.Dropout, torchvision.ops.StochasticDepth)):
            module.p = 0.0
    return model


def family_example(builder):
    side_px = export_families.SIDE_PX.get(export_families.family(builder), export_families.DEFAULT_SIDE_PX)
    return lambda: torch.randn(export_families.BATCH, 3, side_px, side_px)


# The smallest builder of every torchvision family (tests/graph/export_families.py: its list, its input and
# its build), without dropout or stochastic depth, for the gradient comparison with PyTorch
# (tests/train/onnx_train_test.cc): BUILDER_nodrop. Not in --list, --time or --suite: they are the
# families' builders again.
FAMILY_MODELS = {
    builder + "_nodrop": (lambda builder=builder: without_dropout(export_families.build(builder)),
                          family_example(builder))
    for builder in export_families.smallest_builders()
}
MODELS.update(FAMILY_MODELS)

# Models whose profile and training step take tens of CPU seconds (swin_t and maxvit_t run at 224x224,
# the smallest side their windows of 7 take without padding; alexnet's classifier has 58 M parameters): exported for onnx_models_test only in the
# full sweep.
HEAVY = {"swin_t", "maxvit_t", "alexnet"}


def forward_order(name, model):
    """The model's parameters in the order edgecost's executor lists them: the order of first use in the
    forward pass. model.parameters() is that order for the models here, except where a module registers
    its own parameters before its children that run first (ViT's class token, used after conv_proj)."""
    params = list(model.parameters())
    from torchvision.models import convnext, maxvit, swin_transformer, vision_transformer

    if isinstance(model, vision_transformer.VisionTransformer):
        first = [model.conv_proj.weight, model.conv_proj.bias, model.class_token]
        params = first + [p for p in params if all(p is not f for f in first)]
    if isinstance(model, convnext.ConvNeXt):
        # Each block's layer scale multiplies its block's output: after the block's last Linear.
        params, scale = [], None
        for n, p in model.named_parameters():
            if n.endswith("layer_scale"):
                scale = p
                continue
            params.append(p)
            if scale is not None and n.endswith("block.5.bias"):
                params.append(scale)
                scale = None
    if isinstance(model, (swin_transformer.SwinTransformer, maxvit.MaxVit)):
        # Each attention's bias table is added to the logits after its qkv projection; Swin's patch
        # merging normalizes before its reduction.
        params, table, reduction = [], None, None
        for n, p in model.named_parameters():
            if n.endswith("relative_position_bias_table"):
                table = p
            elif n.endswith("reduction.weight"):
                reduction = p
            else:
                params.append(p)
            if n.endswith("qkv.bias") or n.endswith("to_qkv.bias"):
                params.append(table)
            if reduction is not None and n.endswith("norm.bias"):
                params.append(reduction)
                reduction = None
    return params


def example_input(name, batch=None):
    """The model's example input; `batch` replaces its batch (the first axis)."""
    x = MODELS[name][1]()
    return torch.randn(batch, *x.shape[1:]) if batch else x


def export(name, out_dir, opset, eval_mode, batch=None):
    make = MODELS[name][0]
    torch.manual_seed(0)
    model = make()
    path = os.path.join(out_dir, name + ".onnx")
    mode = torch.onnx.TrainingMode.EVAL if eval_mode else torch.onnx.TrainingMode.TRAINING
    if eval_mode:
        model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example_input(name, batch), path, input_names=["input"], output_names=["logits"],
                          opset_version=opset, training=mode, do_constant_folding=eval_mode)
    # The qualified names of its modules, which the importer recovers from the export's scopes.
    with open(os.path.join(out_dir, name + ".modules"), "w") as f:
        f.write("\n".join(n for n, _ in model.named_modules() if n) + "\n")
    print(path)


def loaded_blas():
    """The BLAS and LAPACK libraries this process mapped: which one PyTorch runs on, whatever
    LD_LIBRARY_PATH and the system's alternatives chose."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if re.search(r"lib(open)?blas|liblapack", line)}
    return sorted(os.path.realpath(p) for p in paths) or ["none"]


def time_step(name, steps, batch=None):
    """Median and fastest seconds of a training step: forward, cross-entropy loss, backward, SGD update.
    The fastest is what a step costs without preemption on a shared machine."""
    torch.manual_seed(0)
    model = MODELS[name][0]()
    model.train()
    x = example_input(name, batch)
    logits = model(x)
    labels = torch.randint(0, logits.shape[-1], (logits.shape[0],))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
        if i >= 2:  # two warm-up steps
            times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("models", nargs="*")
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("--eval", action="store_true")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--suite", action="store_true")
    parser.add_argument("--heavy", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, help="the batch size exported or timed (default: each example's)")
    args = parser.parse_args()
    if args.list:
        print("\n".join(name for name in MODELS if name not in FAMILY_MODELS))
        return 0
    if args.time:
        torch.set_num_threads(args.threads)
        blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
        print(f"# torch {torch.__version__}, BLAS {blas.group(1) if blas else 'unknown'}, {args.threads} thread(s)")
        names = ([args.out_dir] if args.out_dir else []) + args.models
        for name in names:
            if name not in MODELS:
                parser.error(f"unknown model '{name}'; --list prints the names")
        torch.randn(64, 64) @ torch.randn(64, 64)  # loads the BLAS before it is looked for
        print("# blas " + " ".join(loaded_blas()), flush=True)
        for name in names or [name for name in MODELS if name not in FAMILY_MODELS]:
            median_s, min_s = time_step(name, args.steps, args.batch)
            print(f"{name} {median_s:.6f} {min_s:.6f}", flush=True)
        return 0
    if not args.out_dir:
        parser.error("OUT_DIR is required")
    if args.suite:
        for name in MODELS:
            if (name not in TINY_MODELS and name not in FAMILY_MODELS and name not in BENCH_ONLY
                    and (args.heavy or name not in HEAVY)):
                export(name, args.out_dir, 13, False)
        for sub, names, opset, eval_mode in (("opset17", ["transformer_encoder", "small_bert"], 17, False),
                                             ("eval", ["mobilenet_v2"], 13, True)):
            os.makedirs(os.path.join(args.out_dir, sub), exist_ok=True)
            for name in names:
                export(name, os.path.join(args.out_dir, sub), opset, eval_mode)
        return 0
    for name in args.models or [name for name in MODELS if name not in FAMILY_MODELS]:
        if name not in MODELS:
            parser.error(f"unknown model '{name}'; --list prints the names")
        export(name, args.out_dir, args.opset, args.eval, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
