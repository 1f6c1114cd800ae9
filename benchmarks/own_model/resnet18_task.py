"""A user's own torchvision ResNet-18 (a one-channel stem, 32x32 Fashion-MNIST images,
trained here): the third own model of ``bench_own_model.py``, with the defaults.

Run: PYTHONPATH=benchmarks/own_model frontier search benchmarks/own_model/resnet18.yaml
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from user_task import OwnMnasnet


class OwnResnet18(OwnMnasnet):
    """ResNet-18 on the same data and training as ``OwnMnasnet``."""

    name = "own-resnet18"

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        model = torchvision.models.resnet18(num_classes=10)
        model.conv1 = nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
        return model
