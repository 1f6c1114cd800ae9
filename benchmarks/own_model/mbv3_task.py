"""The README's own-model journey with torchvision's MobileNetV3-Small (a one-channel
stem, 32x32 Fashion-MNIST images, trained here): the model a new user tried on
2026-11-27, whose first trial then waited half an hour for its device table.

Run: PYTHONPATH=benchmarks/own_model frontier search benchmarks/own_model/mbv3.yaml
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from user_task import OwnMnasnet


class OwnMbv3(OwnMnasnet):
    """MobileNetV3-Small on the same data and training as ``OwnMnasnet``."""

    name = "own-mbv3"

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        model = torchvision.models.mobilenet_v3_small(num_classes=10)
        model.features[0][0] = nn.Conv2d(1, 16, 3, stride=2, padding=1, bias=False)
        return model
