"""The plain-PyTorch text transformer: the ``transformer`` student family scales MiniLM's
shape; narrowing heads and FFN keeps a model that runs, is smaller, and (keeping all)
computes the same; it exports to ONNX and ONNX Runtime agrees with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from frontier.spaces import (
    PlanError,
    StudentSpec,
    TextTransformer,
    TransformerShape,
    build_student,
    keep_ffn,
    keep_heads,
    shape_of,
)

SMALL = TransformerShape(
    vocab_size=50,
    max_positions=12,
    hidden=32,
    heads=(4, 4),
    ffn=(64, 64),
    head_dim=8,
    num_classes=3,
)


def _ids(batch: int = 4, length: int = 12, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 50, (batch, length), generator=gen)
    ids[0, 7:] = 0  # padding: masked out of attention and pooling
    return ids


def _model(seed: int = 0) -> TextTransformer:
    torch.manual_seed(seed)
    return TextTransformer(SMALL).eval()


def test_padding_does_not_change_the_prediction() -> None:
    model, ids = _model(), _ids()
    with torch.no_grad():
        full = model(ids)
        cut = model(ids[:1, :7])
    assert torch.allclose(full[:1], cut, atol=1e-5)


def test_the_transformer_student_family_scales_minilm() -> None:
    ids = torch.ones(1, 64, dtype=torch.long)
    student = build_student(
        StudentSpec("transformer", width_mult=0.5, depth_mult=0.5),
        num_classes=3,
        example_inputs=ids,
    )
    assert isinstance(student, TextTransformer)
    shape = shape_of(student)
    assert shape.heads == (6, 6, 6) and shape.hidden == 192 and shape.ffn == (768,) * 3
    assert shape.max_positions == 64 and shape.vocab_size == 30522
    assert student(ids).shape == (1, 3)
    with pytest.raises(PlanError, match="token ids"):
        build_student(StudentSpec("transformer"), num_classes=3, example_inputs=torch.rand(1, 8))


def test_narrowing_heads_and_ffn_keeps_a_smaller_model_that_runs() -> None:
    model, ids = _model(), _ids()
    with torch.no_grad():
        before = model(ids)
    layer = model.layers[0]
    keep_heads(layer, [0, 1, 2, 3])  # every head, in order: the same function
    keep_ffn(layer, list(range(64)))
    with torch.no_grad():
        assert torch.allclose(model(ids), before, atol=1e-6)
    params = sum(p.numel() for p in model.parameters())
    keep_heads(layer, [1, 3])
    keep_ffn(model.layers[1], list(range(0, 64, 4)))
    keep_heads(model.layers[1], [])  # a layer may lose its whole attention
    assert shape_of(model).heads == (2, 0) and shape_of(model).ffn == (64, 16)
    assert sum(p.numel() for p in model.parameters()) < params
    with torch.no_grad():
        out = model(ids)
    assert out.shape == (4, 3) and torch.isfinite(out).all()


def test_it_exports_to_onnx_and_onnx_runtime_agrees(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    model, ids = _model(), _ids()
    path = tmp_path / "text.onnx"
    torch.onnx.export(model, (ids,), str(path), input_names=["ids"], dynamo=False)
    session = ort.InferenceSession(str(path))
    got = session.run(None, {"ids": ids.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(ids).numpy(), atol=1e-4)
