"""``embedding-quant``: the model's embedding tables stored as INT8, one FP32 scale per
row (symmetric, the row's largest magnitude at 127), a registered technique.

A text model's embeddings are most of its size (all-MiniLM-L6-v2: 11.9M of its 22.7M
parameters are the word and position tables) and no quantizable layer covers them:
ONNX Runtime's quantizer leaves a ``Gather`` on FP32 weights. Here the tables become
``QuantEmbedding`` modules that hold the INT8 rows themselves, so the accuracy a search
measures is the quantized model's, the cost prices the tables at one byte per weight,
and the ONNX export stores them as INT8 initializers (a ``Gather`` of INT8 rows, a
``Cast`` and a ``Mul`` by the gathered row scales). The rows are frozen from then on;
fine-tuning trains the rest of the model.

Latency tables leave embedding lookups out either way (a ``Gather`` takes integer
ids, and the graph's integer ops are not priced); the INT8 lookup adds a ``Cast`` and a
``Mul`` on ``[length, hidden]`` values, a few microseconds, which the calibration on
whole models absorbs.

Plan data: ``{"embedding-quant": 8}`` (absent: FP32 tables).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ._dims import Dimension, SpaceView
from ._param_shapes import ParamShapes
from ._plan import CompressionPlan, PlanError
from ._techniques import ApplyInputs, Chooser, Technique, register_technique

#: the bit widths the technique stores tables at (32: left as they are)
EMBEDDING_BITS = (8, 32)


class QuantEmbedding(nn.Module):
    """An embedding table as INT8 rows and an FP32 scale per row; looks up like
    ``nn.Embedding`` (ids in, FP32 vectors out). Its tensors are frozen parameters, so
    a model's cost and state dict count them at their stored size."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        weight = embedding.weight.detach().float()
        # in place where the values allow it: a text model's tables are tens of MB, and
        # every plan that quantizes them pays this (the same values as out of place)
        scale = weight.abs().amax(1, keepdim=True).clamp_min_(1e-12).div_(127.0)
        rows = (weight / scale).round_().clamp_(-127, 127).to(torch.int8)
        self.rows = nn.Parameter(rows, requires_grad=False)
        self.scale = nn.Parameter(scale, requires_grad=False)
        self.num_embeddings, self.embedding_dim = weight.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows[ids].float() * self.scale[ids]

    def dequantized(self) -> torch.Tensor:
        """The table as the model sees it, FP32 ``[num_embeddings, embedding_dim]``."""
        return self.rows.float() * self.scale


@register_technique("embedding-quant")
@dataclass(frozen=True)
class EmbeddingQuant(Technique):
    """``bits``: the widths to choose from for every embedding table at once (8, 32)."""

    bits: tuple[int, ...] = EMBEDDING_BITS

    order: ClassVar[int] = 42  # after pruning and layer quantization, before layer-drop
    kind: ClassVar[str] = "quantized"

    def __post_init__(self) -> None:
        if not self.bits or any(b not in EMBEDDING_BITS for b in self.bits):
            raise PlanError(
                f"techniques.embedding-quant.bits: each of {list(EMBEDDING_BITS)}, "
                f"got {list(self.bits)}"
            )

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        if len(self.bits) < 2:
            return []
        return [Dimension("embed_bits", "embedding bits", self.bits, uncompressed=max(self.bits))]

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        bits = choose(f"{prefix}embed_bits", self.bits) if len(self.bits) > 1 else self.bits[0]
        return self.entry_field(int(bits) if int(bits) < 32 else None)

    def read(self, entry: Any) -> Any:
        if isinstance(entry, bool) or entry not in EMBEDDING_BITS:
            raise PlanError(
                f"techniques.embedding-quant: a bit width, one of {list(EMBEDDING_BITS)}, "
                f"got {entry!r}"
            )
        return int(entry)

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        if (self.entry(plan) or 32) >= 32:
            return
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Embedding):
                parent_name, _, child = name.rpartition(".")
                parent = model.get_submodule(parent_name) if parent_name else model
                setattr(parent, child, QuantEmbedding(module))

    def reshape(self, plan: CompressionPlan, shapes: ParamShapes) -> bool:
        if (self.entry(plan) or 32) >= 32:
            return True
        for name, module in shapes.model.named_modules():
            if name and isinstance(module, nn.Embedding) and f"{name}.weight" in shapes:
                rows = shapes.shape(f"{name}.weight")
                shapes.remove(name)  # QuantEmbedding's tensors: INT8 rows, an FP32 scale each
                shapes.add(f"{name}.rows", rows, 1)
                shapes.add(f"{name}.scale", (rows[0], 1), 4)
        return True
