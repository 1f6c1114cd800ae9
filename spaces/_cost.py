"""Cost accounting: parameters, bytes at each layer's bit width, MACs and BOPs.

MACs come from ``torch.utils.flop_counter``, which counts convolutions and matrix
products the way torchvision's published ``_ops`` do (one FLOP pair per MAC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ._forward import eval_mode, run_model
from ._plan import CompressionPlan
from ._quant import channel_axis

#: Bytes of one quantization parameter pair: an FP32 scale and an 8-bit zero point.
QPARAM_BYTES = 5


@dataclass(frozen=True)
class LayerCost:
    """The cost of one quantizable layer."""

    name: str
    kind: str
    params: int
    weight_bits: int
    act_bits: int
    size_bytes: int
    macs: int
    bops: int
    nonzero_weights: int = 0


@dataclass(frozen=True)
class Cost:
    """The cost of a whole model under a plan; per-layer rows in ``layers``.

    ``other_params``/``other_bytes`` are parameters outside quantizable layers (batch
    norm, embeddings), at their stored size; ``other_macs`` are MACs outside them
    (functional matmuls), priced at 32x32 bits in ``bops``. Unstructured sparsity does not shrink
    ``size_bytes`` or ``macs`` (dense storage and kernels); ``nonzero_weights`` counts
    what a sparse format or kernel could exploit.
    """

    params: int
    size_bytes: int
    macs: int
    bops: int
    layers: tuple[LayerCost, ...]
    other_params: int
    other_bytes: int
    other_macs: int
    nonzero_weights: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "size_bytes": self.size_bytes,
            "macs": self.macs,
            "bops": self.bops,
            "other_params": self.other_params,
            "other_bytes": self.other_bytes,
            "other_macs": self.other_macs,
            "nonzero_weights": self.nonzero_weights,
            "layers": [vars(layer) for layer in self.layers],
        }


def count_macs(model: nn.Module, example_inputs: Any) -> dict[str, int]:
    """MACs per module name ('' = the whole model) for one forward on ``example_inputs``."""
    with FlopCounterMode(display=False) as counter, torch.no_grad(), eval_mode(model):
        run_model(model, example_inputs)
    root = type(model).__name__
    macs: dict[str, int] = {}
    for key, per_op in counter.get_flop_counts().items():
        total = sum(per_op.values()) // 2
        if key == "Global":
            macs[""] = total
        elif key == root:
            macs.setdefault("", total)
        elif key.startswith(root + "."):
            macs[key[len(root) + 1 :]] = total
    return macs


def _weight(module: nn.Module) -> torch.Tensor:
    # Under fake quantization the stored weight is parametrizations.weight.original.
    return module.weight  # type: ignore[return-value]


def model_cost(
    model: nn.Module, plan: CompressionPlan, example_inputs: Any, *, macs: bool = True
) -> Cost:
    """Cost of ``model`` (the model ``plan`` was applied to) at the plan's bit widths.

    Size counts each quantized weight at its bit width plus an FP32 scale and an 8-bit
    zero point per output channel, biases as 32-bit (16-bit under FP16 weights), one
    scale/zero-point pair per quantized input activation, and every other parameter at
    its stored size (FP32, or INT8 for ``embedding-quant``'s tables). BOPs are MACs x
    weight bits x activation bits.

    Args:
        model: the (compressed) model.
        plan: the plan whose bit widths price the layers.
        example_inputs: the input batch MACs are counted for (use batch size 1).
        macs: count MACs (one forward pass); False leaves MACs and BOPs at 0, for what
            needs the size alone.
    """
    counted = count_macs(model, example_inputs) if macs else {}
    layers: list[LayerCost] = []
    seen: set[int] = set()
    for name, module in model.named_modules():
        if not name or channel_axis(module) is None:
            continue
        weight = _weight(module)
        bias = getattr(module, "bias", None)
        layers.append(
            layer_cost(
                name,
                type(module).__name__,
                plan,
                weight_numel=weight.numel(),
                bias_numel=bias.numel() if isinstance(bias, torch.Tensor) else 0,
                channels=weight.shape[channel_axis(module) or 0],
                macs=counted.get(name, 0),
                nonzero_weights=int(torch.count_nonzero(weight.detach())),
            )
        )
        for p in module.parameters(recurse=True):
            seen.add(id(p))
    all_params = {id(p): p for p in model.parameters()}
    other = [p for key, p in all_params.items() if key not in seen]
    return total_cost(
        layers,
        params=sum(p.numel() for p in all_params.values()),
        other_params=sum(p.numel() for p in other),
        other_bytes=sum(p.numel() * p.element_size() for p in other),
        macs=counted.get("", sum(layer.macs for layer in layers)),
    )


def layer_cost(
    name: str,
    kind: str,
    plan: CompressionPlan,
    *,
    weight_numel: int,
    bias_numel: int,
    channels: int,
    macs: int,
    nonzero_weights: int,
) -> LayerCost:
    """One quantizable layer priced at ``plan``'s bit widths (``model_cost``'s rules;
    ``channels``: its weight's output channels, one scale and zero point each)."""
    wbits = plan.weight_bits.get(name, 32)
    abits = plan.act_bits.get(name, 32)
    size = math.ceil(weight_numel * wbits / 8)
    if wbits < 16:
        size += QPARAM_BYTES * channels
    size += bias_numel * (2 if wbits == 16 else 4)
    if abits < 16:
        size += QPARAM_BYTES
    return LayerCost(
        name=name,
        kind=kind,
        params=weight_numel + bias_numel,
        weight_bits=wbits,
        act_bits=abits,
        size_bytes=size,
        macs=macs,
        bops=macs * wbits * abits,
        nonzero_weights=nonzero_weights,
    )


def total_cost(
    layers: list[LayerCost], *, params: int, other_params: int, other_bytes: int, macs: int
) -> Cost:
    """A whole model's cost from its quantizable layers and the rest: ``macs`` of the
    whole model, those outside the layers priced at 32x32 bits."""
    other_macs = max(0, macs - sum(layer.macs for layer in layers))
    return Cost(
        params=params,
        size_bytes=sum(layer.size_bytes for layer in layers) + other_bytes,
        macs=macs,
        bops=sum(layer.bops for layer in layers) + other_macs * 32 * 32,
        layers=tuple(layers),
        other_params=other_params,
        other_bytes=other_bytes,
        other_macs=other_macs,
        nonzero_weights=sum(layer.nonzero_weights for layer in layers),
    )
