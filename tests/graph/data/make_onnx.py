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


class WithSigmoid(nn.Module):
    """Uses an op the importer does not support, to test the error."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


def export(model, example, path):
    # Training mode keeps batch normalisation as its own op instead of folding it into the convolution.
    torch.onnx.export(model, example, path, input_names=["input"], output_names=["logits"], opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


if __name__ == "__main__":
    torch.manual_seed(0)
    export(SmallResNet(), torch.randn(2, 3, 16, 16), "small_resnet.onnx")
    export(Mlp(), torch.randn(4, 20), "mlp.onnx")
    export(WithSigmoid(), torch.randn(1, 4), "sigmoid.onnx")
