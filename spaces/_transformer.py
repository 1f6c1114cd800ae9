"""A BERT-style text classifier built from plain PyTorch layers, and the ``transformer``
student family.

Why not Hugging Face's ``BertModel``: every layer here is an ``nn.Linear``,
``nn.LayerNorm`` or ``nn.Embedding`` with the attention written out (MatMul, Softmax),
so it exports to ONNX as the ops a latency table prices, each encoder layer may keep its
own number of heads and FFN width after pruning, and nothing needs the ``transformers``
package at run time. ``experiments`` loads all-MiniLM-L6-v2's weights into it.

The model takes token ids (int64, ``[batch, length]``, padding id 0 by default), builds
the attention mask from them, and classifies the mean of the unmasked tokens' last hidden
states (how MiniLM was trained to embed sentences).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._plan import PlanError
from ._students import register_student


@dataclass(frozen=True)
class TransformerShape:
    """The architecture of a ``TextTransformer``.

    Attributes:
        vocab_size: rows of the token embedding.
        max_positions: rows of the position embedding (the longest input it takes).
        hidden: width of the residual stream.
        heads: attention heads per layer.
        ffn: feed-forward width per layer.
        head_dim: width of one attention head.
        num_classes: classifier outputs.
        pad_id: the padding token's id (masked out of attention and pooling).
    """

    vocab_size: int
    max_positions: int
    hidden: int
    heads: tuple[int, ...]
    ffn: tuple[int, ...]
    head_dim: int = 32
    num_classes: int = 2
    pad_id: int = 0
    eps: float = 1e-12

    def __post_init__(self) -> None:
        if len(self.heads) != len(self.ffn):
            raise ValueError(f"heads {self.heads} and ffn {self.ffn} differ in layer count")
        if min((*self.heads, *self.ffn, 0)) < 0:
            raise ValueError("heads and ffn widths must be >= 0")
        for name in ("vocab_size", "max_positions", "hidden", "head_dim", "num_classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class EncoderLayer(nn.Module):
    """Post-norm BERT encoder layer: self-attention, then GELU feed-forward, each added to
    the residual and layer-normalised. ``heads`` may be 0 (the attention block is skipped)
    and so may ``ffn``."""

    def __init__(self, hidden: int, heads: int, head_dim: int, ffn: int, eps: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.query = nn.Linear(hidden, inner)
        self.key = nn.Linear(hidden, inner)
        self.value = nn.Linear(hidden, inner)
        self.out = nn.Linear(inner, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if self.heads > 0:
            b, n = x.shape[0], x.shape[1]
            q = self.query(x).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
            k = self.key(x).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
            v = self.value(x).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
            probs = torch.softmax(scores + bias, dim=-1)
            inner = self.heads * self.head_dim
            context = torch.matmul(probs, v).transpose(1, 2).reshape(b, n, inner)
            x = self.attention_norm(x + self.out(context))
        else:
            x = self.attention_norm(x + self.out.bias)
        return self.ffn_norm(x + self.ffn_out(self.act(self.ffn_in(x))))


class TextTransformer(nn.Module):
    """Token ids -> class logits: embeddings, encoder layers, masked mean pooling, a
    linear classifier. ``shape`` holds the architecture; ``keep_heads`` and
    ``keep_ffn`` narrow a layer and keep ``shape`` in step."""

    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.shape = shape
        self.pad_id = shape.pad_id
        self.word = nn.Embedding(shape.vocab_size, shape.hidden)
        # BERT's token-type embedding of type 0 is folded into the positions on loading
        self.position = nn.Embedding(shape.max_positions, shape.hidden)
        self.norm = nn.LayerNorm(shape.hidden, eps=shape.eps)
        self.layers = nn.ModuleList(
            EncoderLayer(shape.hidden, h, shape.head_dim, f, shape.eps)
            for h, f in zip(shape.heads, shape.ffn, strict=True)
        )
        self.classifier = nn.Linear(shape.hidden, shape.num_classes)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != self.pad_id).to(self.norm.weight.dtype)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.norm(self.word(input_ids) + self.position(positions)[None])
        bias = ((1.0 - mask) * -10000.0)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias)
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
        return self.classifier(pooled)


#: the ``transformer`` family's reference: all-MiniLM-L6-v2 (BERT uncased vocabulary)
MINILM = TransformerShape(
    vocab_size=30522, max_positions=512, hidden=384, heads=(12,) * 6, ffn=(1536,) * 6
)


def _input_length(example_inputs: Any) -> int:
    x = example_inputs[0] if isinstance(example_inputs, list | tuple) else example_inputs
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.is_floating_point():
        raise PlanError(
            "student.family 'transformer': the task's inputs must be token ids "
            f"(an int64 [batch, length] tensor), got {getattr(x, 'dtype', type(x))}"
        )
    return int(x.shape[1])


def student_shape(
    *,
    num_classes: int,
    width_mult: float,
    depth_mult: float,
    length: int,
    reference: TransformerShape = MINILM,
) -> TransformerShape:
    """``reference`` scaled: hidden width (in whole heads of ``head_dim``) and FFN width by
    ``width_mult``, layer count by ``depth_mult``; positions only as many as ``length``."""
    heads = max(1, round(reference.heads[0] * width_mult))
    layers = max(1, round(len(reference.heads) * depth_mult))
    hidden = heads * reference.head_dim
    return TransformerShape(
        vocab_size=reference.vocab_size,
        max_positions=length,
        hidden=hidden,
        heads=(heads,) * layers,
        ffn=(max(1, round(reference.ffn[0] * width_mult)),) * layers,
        head_dim=reference.head_dim,
        num_classes=num_classes,
        pad_id=reference.pad_id,
    )


@register_student("transformer")
def transformer_student(
    *, num_classes: int, width_mult: float, depth_mult: float, example_inputs: Any
) -> nn.Module:
    """A ``TextTransformer`` shaped like all-MiniLM-L6-v2 (6 layers, hidden 384, 12 heads
    of 32, FFN 1536, BERT's uncased vocabulary) scaled by ``width_mult`` and
    ``depth_mult`` (``student_shape``)."""
    shape = student_shape(
        num_classes=num_classes,
        width_mult=width_mult,
        depth_mult=depth_mult,
        length=_input_length(example_inputs),
    )
    return TextTransformer(shape)


def layer_sizes(model: TextTransformer) -> list[tuple[int, int]]:
    """(heads, ffn width) of each encoder layer as the model is now."""
    layers: list[EncoderLayer] = list(model.layers)  # type: ignore[arg-type]
    return [(layer.heads, layer.ffn_in.out_features) for layer in layers]


def shape_of(model: TextTransformer) -> TransformerShape:
    """The model's ``TransformerShape`` as it is now (after pruning)."""
    sizes = layer_sizes(model)
    return TransformerShape(
        vocab_size=model.word.num_embeddings,
        max_positions=model.position.num_embeddings,
        hidden=model.word.embedding_dim,
        heads=tuple(h for h, _ in sizes),
        ffn=tuple(f for _, f in sizes),
        head_dim=model.shape.head_dim,
        num_classes=model.classifier.out_features,
        pad_id=model.pad_id,
        eps=model.shape.eps,
    )


def keep_heads(layer: EncoderLayer, keep: Sequence[int]) -> None:
    """Keep only the heads ``keep`` (indices, in order) of ``layer``'s attention."""
    d = layer.head_dim
    rows = torch.tensor([h * d + i for h in keep for i in range(d)], dtype=torch.long)
    for name in ("query", "key", "value"):
        setattr(layer, name, _rows(getattr(layer, name), rows))
    layer.out = _cols(layer.out, rows)
    layer.heads = len(keep)


def keep_ffn(layer: EncoderLayer, keep: Sequence[int]) -> None:
    """Keep only the FFN channels ``keep`` (indices) of ``layer``."""
    index = torch.tensor(list(keep), dtype=torch.long)
    layer.ffn_in = _rows(layer.ffn_in, index)
    layer.ffn_out = _cols(layer.ffn_out, index)


def _linear(like: nn.Linear, in_features: int, out_features: int) -> nn.Linear:
    """An uninitialised linear layer of ``like``'s kind (its values are copied in)."""
    return torch.nn.utils.skip_init(
        nn.Linear,
        in_features,
        out_features,
        bias=like.bias is not None,
        device=like.weight.device,
        dtype=like.weight.dtype,
    )


def _rows(linear: nn.Linear, index: torch.Tensor) -> nn.Linear:
    out = _linear(linear, linear.in_features, len(index))
    with torch.no_grad():
        out.weight.copy_(linear.weight[index])
        if linear.bias is not None:
            out.bias.copy_(linear.bias[index])
    return out


def _cols(linear: nn.Linear, index: torch.Tensor) -> nn.Linear:
    out = _linear(linear, len(index), linear.out_features)
    with torch.no_grad():
        out.weight.copy_(linear.weight[:, index])
        if linear.bias is not None:
            out.bias.copy_(linear.bias)
    return out
