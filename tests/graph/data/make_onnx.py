#!/usr/bin/python3
"""Makes the small ONNX models the import tests read, with Debian's python3-torch.

Run from this folder: /usr/bin/python3 make_onnx.py. The outputs are committed, so
tests do not need torch.
"""
import torch
from torch import nn


class SmallResNet(nn.Module):
    """Conv, batch norm, ReLU, max pool with padding, a residual add, global pooling, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=1, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        y = self.bn2(self.conv2(x))
        x = torch.relu(x + y)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        return self.fc(torch.flatten(x, 1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class WithDropout(nn.Module):
    """Dropout at a quarter between two linear layers, and one at 0 (the identity)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.25)
        self.none = nn.Dropout(0.0)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.none(self.drop(torch.relu(self.fc1(x)))))


class WithSigmoid(nn.Module):
    """A sigmoid after a linear layer."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


class Unsupported(nn.Module):
    """Two op kinds the importer does not take (Sin, CumSum), each used twice, for the error that lists them all."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x = torch.sin(self.fc(x))
        x = torch.cumsum(x, dim=1)
        return torch.cumsum(torch.sin(x), dim=1)


class ViewByShape(nn.Module):
    """ShuffleNet's chunk and channel shuffle: shape arithmetic (Shape, Gather, Add, Div, Mul, Unsqueeze,
    Concat) that the importer folds, leaving Slice, Reshape and Transpose of activations."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        a, b = x.chunk(2, dim=1)
        x = torch.cat((b, a), dim=1)
        n, c, h, w = x.size()
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, -1)
        return self.fc(x)


class TinyBnNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class PaddedPools(nn.Module):
    """Average pooling as PyTorch exports it: padding counted in the mean is a Pad before the
    AveragePool, no padding a Pad of zeros, and padding left out of the mean the AveragePool's own."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        x = nn.functional.avg_pool2d(self.conv(x), 3, stride=1, padding=1)  # 8x8
        x = nn.functional.avg_pool2d(x, 2, stride=2)  # 4x4
        x = nn.functional.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)  # 2x2
        return self.fc(torch.flatten(x, 1))


def export(model, example, path):
    # Training mode keeps batch normalisation as its own op instead of folding it into the convolution.
    torch.onnx.export(model, example, path, input_names=["input"], output_names=["logits"], opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


if __name__ == "__main__":
    torch.manual_seed(0)
    export(SmallResNet(), torch.randn(2, 3, 16, 16), "small_resnet.onnx")
    export(Mlp(), torch.randn(4, 20), "mlp.onnx")
    export(WithSigmoid(), torch.randn(1, 4), "sigmoid.onnx")
    export(WithDropout(), torch.randn(2, 4), "dropout.onnx")
    export(Unsupported(), torch.randn(2, 4), "unsupported.onnx")
    export(ViewByShape(), torch.randn(2, 3, 4, 4), "view_by_shape.onnx")
    export(PaddedPools(), torch.randn(2, 3, 8, 8), "padded_pools.onnx")
    # Eval mode, as users export by mistake: the batch norm is folded into the convolution.
    model = TinyBnNet().eval()
    torch.onnx.export(model, torch.randn(2, 3, 8, 8), "tiny_bn_eval.onnx", input_names=["input"],
                      output_names=["logits"], opset_version=13)
