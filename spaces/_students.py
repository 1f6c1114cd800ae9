"""Student architectures: a registry of factories by family.

A factory is called as ``factory(num_classes=..., width_mult=..., depth_mult=...,
example_inputs=...)`` and returns a freshly initialised ``nn.Module``. Users add their
own with ``@register_student("family")``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from ._plan import PlanError, StudentSpec
from ._registry import Registry


class StudentFactory(Protocol):
    def __call__(
        self, *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
    ) -> nn.Module: ...


_FACTORIES: Registry[StudentFactory] = Registry("student family")


def register_student(family: str) -> Callable[[StudentFactory], StudentFactory]:
    """Decorator registering a student factory under ``family``."""
    return _FACTORIES.register(family)


def student_families() -> list[str]:
    """Names of every registered student family."""
    return _FACTORIES.names()


def build_student(spec: StudentSpec, *, num_classes: int, example_inputs: Any) -> nn.Module:
    """Build the student ``spec`` describes, with fresh weights.

    Args:
        spec: family and multipliers.
        num_classes: size of the output the student must produce.
        example_inputs: inputs the teacher takes; factories read shapes from them.
    """
    factory = _FACTORIES.get(spec.family)
    if factory is None:
        raise PlanError(
            f"student.family: unknown family {spec.family!r}; registered: {student_families()}"
        )
    return factory(
        num_classes=num_classes,
        width_mult=spec.width_mult,
        depth_mult=spec.depth_mult,
        example_inputs=example_inputs,
    )


def _scaled(width: int, mult: float) -> int:
    return max(1, round(width * mult))


def _depth(base: int, mult: float) -> int:
    return max(1, round(base * mult))


def _first_tensor(example_inputs: Any) -> torch.Tensor:
    x = example_inputs[0] if isinstance(example_inputs, list | tuple) else example_inputs
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"example inputs must be a tensor or a tuple of tensors, got {type(x)}")
    return x


class MLP(nn.Module):
    """A fully-connected classifier: flatten, then hidden Linear+ReLU layers, then Linear."""

    def __init__(self, *, in_features: int, num_classes: int, hidden: Sequence[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class CNN(nn.Module):
    """A small CNN: Conv+BN+ReLU stages, max-pool between stages while space allows,
    global average pooling and a Linear classifier."""

    def __init__(
        self, *, in_channels: int, num_classes: int, channels: Sequence[int], pool_every: int = 2
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_channels
        for i, c in enumerate(channels):
            layers += [nn.Conv2d(width, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
            if pool_every and (i + 1) % pool_every == 0 and i + 1 < len(channels):
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            width = c
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


MLP_HIDDEN: tuple[int, ...] = (256, 128)
CNN_CHANNELS: tuple[int, ...] = (16, 32, 64)


def _stretch(base: Sequence[int], width_mult: float, depth_mult: float) -> list[int]:
    n = _depth(len(base), depth_mult)
    return [_scaled(base[min(i, len(base) - 1)], width_mult) for i in range(n)]


@register_student("mlp")
def mlp_student(
    *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
) -> nn.Module:
    x = _first_tensor(example_inputs)
    return MLP(
        in_features=math.prod(x.shape[1:]),
        num_classes=num_classes,
        hidden=_stretch(MLP_HIDDEN, width_mult, depth_mult),
    )


@register_student("cnn")
def cnn_student(
    *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
) -> nn.Module:
    x = _first_tensor(example_inputs)
    return CNN(
        in_channels=x.shape[1],
        num_classes=num_classes,
        channels=_stretch(CNN_CHANNELS, width_mult, depth_mult),
    )


def _no_depth(family: str, depth_mult: float) -> None:
    if depth_mult != 1.0:
        raise PlanError(
            f"student.depth_mult: family {family!r} has a fixed depth, got {depth_mult}"
        )


def _no_width(family: str, width_mult: float) -> None:
    if width_mult != 1.0:
        raise PlanError(
            f"student.width_mult: family {family!r} has a fixed width, got {width_mult}"
        )


@register_student("mobilenet_v2")
def mobilenet_v2_student(
    *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
) -> nn.Module:
    from torchvision.models import mobilenet_v2

    _no_depth("mobilenet_v2", depth_mult)
    return mobilenet_v2(weights=None, num_classes=num_classes, width_mult=width_mult)


def _mobilenet_v3(arch: str) -> StudentFactory:
    def factory(
        *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
    ) -> nn.Module:
        # The public constructors pass width_mult on to MobileNetV3.__init__, which rejects
        # it; the configuration helper is where torchvision applies it.
        from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

        _no_depth(arch, depth_mult)
        setting, last_channel = _mobilenet_v3_conf(arch, width_mult=width_mult)
        return MobileNetV3(setting, last_channel, num_classes=num_classes)

    return factory


register_student("mobilenet_v3_small")(_mobilenet_v3("mobilenet_v3_small"))
register_student("mobilenet_v3_large")(_mobilenet_v3("mobilenet_v3_large"))


def _resnet(arch: str) -> StudentFactory:
    def factory(
        *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
    ) -> nn.Module:
        import torchvision.models as tvm

        _no_depth(arch, depth_mult)
        if arch == "resnet50":
            # Bottleneck blocks scale their inner width with width_per_group.
            return tvm.resnet50(
                weights=None, num_classes=num_classes, width_per_group=_scaled(64, width_mult)
            )
        _no_width(arch, width_mult)
        constructor = getattr(tvm, arch)
        model: nn.Module = constructor(weights=None, num_classes=num_classes)
        return model

    return factory


for _arch in ("resnet18", "resnet34", "resnet50"):
    register_student(_arch)(_resnet(_arch))

# torchvision's compound-scaling coefficients (width, depth) of EfficientNet-B0..B3.
_EFFICIENTNET = {
    "efficientnet_b0": (1.0, 1.0, 0.2),
    "efficientnet_b1": (1.0, 1.1, 0.2),
    "efficientnet_b2": (1.1, 1.2, 0.3),
    "efficientnet_b3": (1.2, 1.4, 0.3),
}


def _efficientnet(arch: str) -> StudentFactory:
    def factory(
        *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
    ) -> nn.Module:
        from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

        width, depth, dropout = _EFFICIENTNET[arch]
        setting, last_channel = _efficientnet_conf(
            arch, width_mult=width * width_mult, depth_mult=depth * depth_mult
        )
        return EfficientNet(setting, dropout, num_classes=num_classes, last_channel=last_channel)

    return factory


for _arch in _EFFICIENTNET:
    register_student(_arch)(_efficientnet(_arch))
