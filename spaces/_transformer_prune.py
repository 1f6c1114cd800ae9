"""Two techniques for ``TextTransformer`` encoders, each a registered technique.

``transformer-prune``: per encoder layer, a share of its attention heads
(``heads.LAYER``) and of its feed-forward channels (``ffn.LAYER``) removed, the
smallest by L1 norm (a head's query, key and value rows and its columns of the output
projection; an FFN channel's row in and column out). The model really shrinks: the
Linear layers are rebuilt narrower, so it exports and runs with fewer MACs.

``layer-drop``: per encoder layer, keep it or drop it whole (``drop.LAYER``); a dropped
layer passes its input through. It applies after quantization (order 45), so bit widths
chosen for a dropped layer's Linears are simply discarded with it.

Plan data: ``{"transformer-prune": {"layers.0": {"heads": 0.5, "ffn": 0.25}}}`` and
``{"layer-drop": ["layers.4", "layers.5"]}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ._dims import Dimension, SpaceView
from ._param_shapes import ParamShapes
from ._plan import CompressionPlan, PlanError, check_ratio, check_ratios
from ._techniques import DROPPED, ApplyInputs, Chooser, Technique, register_technique
from ._transformer import EncoderLayer, keep_ffn, keep_heads
from .onnx._onnx_int8 import onnx_module_name


def encoder_layers(space: SpaceView) -> list[str]:
    """Names of the encoder layers in ``space``: the parents of ``*.query`` Linears that
    have an ``ffn_in`` sibling (how ``EncoderLayer`` names its parts)."""
    names = {q.name for q in space.layers}
    found = []
    for q in space.layers:
        m = re.fullmatch(r"(.+)\.query", q.name)
        if m and f"{m.group(1)}.ffn_in" in names:
            found.append(m.group(1))
    return found


def _encoder(model: nn.Module, name: str, technique: str) -> EncoderLayer:
    module = dict(model.named_modules()).get(name)
    if not isinstance(module, EncoderLayer):
        raise PlanError(
            f"techniques.{technique}: {name!r} is not an encoder layer of "
            f"{type(model).__name__} (got {type(module).__name__})"
        )
    return module


def _kept(n: int, ratio: float) -> int:
    """How many of ``n`` stay after removing ``ratio`` of them: one at least (removing
    a whole block is ``layer-drop``'s)."""
    return max(1, n - round(n * ratio))


def _smallest_kept(scores: torch.Tensor, ratio: float) -> list[int]:
    """Indices to keep (in their order) after removing ``ratio`` of them, lowest first."""
    order = torch.argsort(scores, descending=True, stable=True)[: _kept(len(scores), ratio)]
    return sorted(order.tolist())


def head_scores(layer: EncoderLayer) -> torch.Tensor:
    """L1 norm of each head's query, key, value rows and output-projection columns."""
    d = layer.head_dim
    with torch.no_grad():
        rows = sum(
            getattr(layer, n).weight.abs().reshape(layer.heads, d, -1).sum((1, 2))
            for n in ("query", "key", "value")
        )
        cols = layer.out.weight.abs().reshape(-1, layer.heads, d).sum((0, 2))
    return rows + cols


def ffn_scores(layer: EncoderLayer) -> torch.Tensor:
    """L1 norm of each FFN channel's input row and output column."""
    with torch.no_grad():
        return layer.ffn_in.weight.abs().sum(1) + layer.ffn_out.weight.abs().sum(0)


@register_technique("transformer-prune")
@dataclass(frozen=True)
class TransformerPrune(Technique):
    """Per encoder layer: ``head_ratios`` and ``ffn_ratios`` to choose from (each < 1)."""

    head_ratios: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    ffn_ratios: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)

    order: ClassVar[int] = 25
    kind: ClassVar[str] = "pruned"

    def __post_init__(self) -> None:
        # ratios below 1: layer-drop is what removes a whole layer
        check_ratios("head_ratios", self.head_ratios)
        check_ratios("ffn_ratios", self.ffn_ratios)

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        dims = []
        for name in encoder_layers(space):
            if len(self.head_ratios) > 1:
                dims.append(
                    Dimension(
                        f"heads.{name}",
                        "head prune ratio",
                        self.head_ratios,
                        "",
                        min(self.head_ratios),
                        name,
                    )
                )
            if len(self.ffn_ratios) > 1:
                dims.append(
                    Dimension(
                        f"ffn.{name}",
                        "FFN prune ratio",
                        self.ffn_ratios,
                        "",
                        min(self.ffn_ratios),
                        name,
                    )
                )
        return dims

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        entry = {}
        for name in encoder_layers(space):
            ratios = {
                "heads": choose(f"{prefix}heads.{name}", self.head_ratios)
                if len(self.head_ratios) > 1
                else self.head_ratios[0],
                "ffn": choose(f"{prefix}ffn.{name}", self.ffn_ratios)
                if len(self.ffn_ratios) > 1
                else self.ffn_ratios[0],
            }
            kept = {k: float(v) for k, v in ratios.items() if v > 0}
            if kept:
                entry[name] = kept
        return self.entry_field(entry or None)

    def read(self, entry: Any) -> Any:
        if not isinstance(entry, Mapping):
            raise PlanError(
                f"techniques.transformer-prune: a mapping of layer -> ratios, got {entry!r}"
            )
        out = {}
        for name, ratios in entry.items():
            if not isinstance(ratios, Mapping) or not set(ratios) <= {"heads", "ffn"}:
                raise PlanError(
                    f"techniques.transformer-prune[{name!r}]: "
                    f"{{'heads': ratio, 'ffn': ratio}}, got {ratios!r}"
                )
            for k, r in ratios.items():
                check_ratio(f"techniques.transformer-prune[{name!r}].{k}", r)
            out[str(name)] = {k: float(v) for k, v in ratios.items()}
        return out

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        layers = set(encoder_layers(space))
        for name in self.entry(plan) or {}:
            if name not in layers:
                raise PlanError(
                    f"techniques.transformer-prune: {name!r} is not an encoder layer; "
                    f"the space has {sorted(layers)}"
                )

    def latency_variants(self, space: SpaceView) -> dict[str, CompressionPlan]:
        """Every encoder layer at one head ratio, and every one at one FFN ratio."""
        layers = encoder_layers(space)
        out = {}
        for kind, ratios in (("heads", self.head_ratios), ("ffn", self.ffn_ratios)):
            for r in ratios:
                if r > 0:
                    entry = {name: {kind: float(r)} for name in layers}
                    out[f"{kind}={r:g}"] = CompressionPlan(techniques={self.name: entry})
        return out

    def latency_variant(self, node: str, plan: CompressionPlan) -> str | None:
        module = onnx_module_name(node)
        for name, ratios in (self.entry(plan) or {}).items():
            if module != name and not module.startswith(name + "."):
                continue
            ffn = module.removeprefix(name + ".").split(".")[0] in ("ffn_in", "act", "ffn_out")
            kind = "ffn" if ffn else "heads"
            return f"{kind}={ratios[kind]:g}" if ratios.get(kind, 0) > 0 else None
        return None

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        for name, ratios in (self.entry(plan) or {}).items():
            layer = _encoder(model, name, self.name)
            if ratios.get("heads", 0) > 0 and layer.heads > 0:
                keep_heads(layer, _smallest_kept(head_scores(layer), ratios["heads"]))
            if ratios.get("ffn", 0) > 0:
                keep_ffn(layer, _smallest_kept(ffn_scores(layer), ratios["ffn"]))

    def reshape(self, plan: CompressionPlan, shapes: ParamShapes) -> bool:
        for name, ratios in (self.entry(plan) or {}).items():
            layer = _encoder(shapes.model, name, self.name)
            if ratios.get("heads", 0) > 0 and layer.heads > 0:
                inner = _kept(layer.heads, ratios["heads"]) * layer.head_dim
                for part in ("query", "key", "value"):
                    shapes.resize(f"{name}.{part}", 0, inner)
                shapes.resize(f"{name}.out", 1, inner)
            if ratios.get("ffn", 0) > 0:
                width = _kept(layer.ffn_in.out_features, ratios["ffn"])
                shapes.resize(f"{name}.ffn_in", 0, width)
                shapes.resize(f"{name}.ffn_out", 1, width)
        return True


class Skip(nn.Module):
    """A dropped encoder layer: its input passes through."""

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return x


@register_technique("layer-drop")
@dataclass(frozen=True)
class LayerDrop(Technique):
    """Per encoder layer: keep it or drop it (``drop.LAYER``); at most ``max_share`` of
    the layers are dropped (drops chosen beyond that, the later layers', are ignored)."""

    max_share: float = 0.5

    order: ClassVar[int] = 45
    kind: ClassVar[str] = "pruned"

    def __post_init__(self) -> None:
        check_ratio("max_share", self.max_share)

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        return [
            Dimension(f"drop.{n}", "drop layer", (False, True), layer=n)
            for n in encoder_layers(space)
        ]

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        layers = encoder_layers(space)
        dropped = [n for n in layers if choose(f"{prefix}drop.{n}", (False, True))]
        most = int(len(layers) * self.max_share)
        return self.entry_field(dropped[:most] or None)

    def read(self, entry: Any) -> Any:
        if not isinstance(entry, list) or not all(isinstance(n, str) for n in entry):
            raise PlanError(f"techniques.layer-drop: a list of encoder layer names, got {entry!r}")
        return entry

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        layers = encoder_layers(space)
        dropped = self.entry(plan) or []
        for name in dropped:
            if name not in layers:
                raise PlanError(f"techniques.layer-drop: {name!r} is not an encoder layer")
        if len(dropped) >= len(layers):
            raise PlanError("techniques.layer-drop: at least one encoder layer must stay")

    def latency_variant(self, node: str, plan: CompressionPlan) -> str | None:
        module = onnx_module_name(node)
        for name in self.entry(plan) or []:
            if module == name or module.startswith(name + "."):
                return DROPPED
        return None

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        for name in self.entry(plan) or []:
            _encoder(model, name, self.name)
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, Skip())  # a ModuleList's items are named "0", "1", ...

    def reshape(self, plan: CompressionPlan, shapes: ParamShapes) -> bool:
        for name in self.entry(plan) or []:
            _encoder(shapes.model, name, self.name)
            shapes.remove(name)
        return True
