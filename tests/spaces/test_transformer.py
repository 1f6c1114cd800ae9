"""The plain-PyTorch text transformer: the ``transformer`` student family scales MiniLM's
shape; narrowing heads and FFN keeps a model that runs, is smaller, and (keeping all)
computes the same; it exports to ONNX and ONNX Runtime agrees with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from frontier.spaces import (
    CompressionPlan,
    PlanError,
    SearchSpace,
    SpaceError,
    SpaceOptions,
    StudentSpec,
    TextTransformer,
    TransformerShape,
    apply_plan,
    build_student,
    discover,
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


def _text_space(model: TextTransformer, **techniques: dict) -> SearchSpace:
    options = SpaceOptions(
        prune_ratios=(0.0,), weight_bits=(8, 32), act_bits=(32,), techniques=techniques
    )
    return discover(model, _ids(), options)


def test_transformer_prune_is_searched_per_layer_and_shrinks_the_model() -> None:
    model = _model()
    space = _text_space(model, **{"transformer-prune": {}, "layer-drop": {}})
    names = {d.name for d in space.dimensions()}
    assert {"heads.layers.0", "ffn.layers.1", "drop.layers.0", "wbits.layers.0.query"} <= names
    plan = CompressionPlan(
        techniques={
            "transformer-prune": {"layers.0": {"heads": 0.5, "ffn": 0.75}},
            "layer-drop": ["layers.1"],
        },
        weight_bits={"layers.1.query": 8, "layers.0.ffn_in": 8},
    )
    space.validate(plan)
    again = CompressionPlan.from_json(plan.to_json(), space=space)
    assert again == plan
    out = apply_plan(model, plan, _ids())
    layer = out.layers[0]
    assert layer.heads == 2 and layer.query.out_features == 16 and layer.ffn_in.out_features == 16
    assert type(out.layers[1]).__name__ == "Skip"
    before = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in out.parameters()) < before / 2
    with torch.no_grad():
        logits = out(_ids())
    assert logits.shape == (4, 3) and torch.isfinite(logits).all()
    assert model.layers[0].heads == 4  # the original is left alone


def test_transformer_prune_removes_the_weakest_heads() -> None:
    model = _model()
    with torch.no_grad():  # head 2 of layer 0 made the weakest by far
        for name in ("query", "key", "value"):
            getattr(model.layers[0], name).weight[16:24] *= 0.01
        model.layers[0].out.weight[:, 16:24] *= 0.01
    plan = CompressionPlan(techniques={"transformer-prune": {"layers.0": {"heads": 0.25}}})
    out = apply_plan(model, plan, _ids())
    kept = out.layers[0].query.weight
    assert kept.shape[0] == 24
    expected = torch.cat([model.layers[0].query.weight[:16], model.layers[0].query.weight[24:]])
    assert torch.equal(kept, expected)


def test_transformer_technique_errors_name_the_layer() -> None:
    space = _text_space(_model(), **{"transformer-prune": {}, "layer-drop": {}})
    with pytest.raises(PlanError, match="'layers.7' is not an encoder layer"):
        space.validate(
            CompressionPlan(techniques={"transformer-prune": {"layers.7": {"heads": 0.5}}})
        )
    with pytest.raises(PlanError, match="at least one encoder layer must stay"):
        space.validate(CompressionPlan(techniques={"layer-drop": ["layers.0", "layers.1"]}))
    with pytest.raises(
        PlanError, match=r"transformer-prune\['layers.0'\].heads: ratio must be in \[0, 1\)"
    ):
        CompressionPlan.from_dict(
            {"techniques": {"transformer-prune": {"layers.0": {"heads": 1.0}}}}
        )
    with pytest.raises(SpaceError, match="head_ratios: ratio must be in"):
        SpaceOptions(techniques={"transformer-prune": {"head_ratios": [0.0, 1.0]}})


def test_seeded_plans_of_a_text_space_apply_and_run() -> None:
    model = _model()
    space = _text_space(model, **{"transformer-prune": {}, "layer-drop": {"max_share": 0.5}})
    for seed in range(6):
        plan = space.sample(seed)
        assert len(plan.techniques.get("layer-drop", [])) <= 1
        with torch.no_grad():
            assert torch.isfinite(apply_plan(model, plan, _ids())(_ids())).all()
