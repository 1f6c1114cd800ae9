"""The plain data a search space is made of (channel groups, quantizable layers, the
dimensions a search chooses along) and ``SpaceView``, what a technique reads of a space."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class LayerGroup:
    """A set of coupled channels pruned together, named after its first member."""

    name: str
    channels: int
    members: tuple[str, ...]
    tie: str | None = None
    channel_groups: int = 1


@dataclass(frozen=True)
class QuantLayer:
    """A layer whose weights and input activations take a bit width."""

    name: str
    kind: str
    weight_bits: tuple[int, ...]
    act_bits: tuple[int, ...]
    tie: str | None = None
    sparsity: tuple[float, ...] = (0.0,)


@dataclass(frozen=True)
class SkippedGroup:
    """A group left out of pruning, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Dimension:
    """One searchable dimension: an Optuna parameter name and its choices.

    Attributes:
        name, kind, choices, detail: the parameter, what it chooses, its choices and a
            note for ``describe``.
        uncompressed: the choice that leaves the model as it is (no pruning, the widest
            bits, no student); the reference a plan takes where it says nothing (None:
            the first choice). Sensitivity, anchors and the surrogate read it.
        layer: the layer, channel group or tie the choice belongs to; "" for a choice
            about the whole model. Per-layer sensitivity scores each per-layer choice.
    """

    name: str
    kind: str
    choices: tuple[Any, ...]
    detail: str = ""
    uncompressed: Any = None
    layer: str = ""

    def __post_init__(self) -> None:
        if self.uncompressed is None and self.choices:
            object.__setattr__(self, "uncompressed", self.choices[0])


class SpaceView(Protocol):
    """What a technique reads of the space it searches (``SearchSpace`` is one)."""

    @property
    def groups(self) -> tuple[LayerGroup, ...]: ...

    @property
    def layers(self) -> tuple[QuantLayer, ...]: ...
