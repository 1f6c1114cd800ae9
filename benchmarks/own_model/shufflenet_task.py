"""A user's own torchvision ShuffleNetV2 x0.5 (a one-channel stem, 32x32 Fashion-MNIST
images, trained here): a third own model of ``bench_own_model.py`` that fits a session on
two cores (ResNet-18 takes longer), with the defaults.

Run: PYTHONPATH=benchmarks/own_model frontier search benchmarks/own_model/shufflenet.yaml
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from user_task import OwnMnasnet


class OwnShufflenet(OwnMnasnet):
    """ShuffleNetV2 x0.5 on the same data and training as ``OwnMnasnet``."""

    name = "own-shufflenet"

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        model = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
        # stride 1: 32x32 images keep 2x2 maps in the last stage instead of 1x1
        model.conv1[0] = nn.Conv2d(1, 24, 3, stride=1, padding=1, bias=False)
        return model
