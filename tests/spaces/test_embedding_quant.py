"""``embedding-quant``: a text model's tables stored as INT8 rows make the model and its
ONNX file smaller, keep its predictions, and freeze the rows under fine-tuning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from frontier.spaces import (
    CompressionPlan,
    PlanError,
    QuantEmbedding,
    SpaceOptions,
    TextTransformer,
    TransformerShape,
    apply_plan,
    build_technique,
    discover,
    export_onnx,
    model_cost,
)

# a vocabulary large enough that the tables dominate the size, as in MiniLM
SHAPE = TransformerShape(
    vocab_size=2000, max_positions=16, hidden=32, heads=(4,), ffn=(64,), head_dim=8, num_classes=3
)


def _setup() -> tuple[TextTransformer, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(1, 2000, (4, 16), generator=torch.Generator().manual_seed(1))
    return TextTransformer(SHAPE).eval(), ids


def test_int8_tables_shrink_the_model_and_keep_its_outputs(tmp_path: Path) -> None:
    import onnxruntime as ort

    model, ids = _setup()
    plan = CompressionPlan(techniques={"embedding-quant": 8})
    small = apply_plan(model, plan, ids[:1])
    assert isinstance(small.word, QuantEmbedding) and small.word.rows.dtype == torch.int8
    before = model_cost(model, CompressionPlan(), ids[:1]).size_bytes
    after = model_cost(small, plan, ids[:1]).size_bytes
    table = 2016 * 32  # word and position rows
    assert before - after == pytest.approx(3 * table - 4 * 2016, abs=8)
    with torch.no_grad():
        ref, out = model(ids), small(ids)
    assert (out - ref).abs().max() < 0.02 * ref.abs().max()
    fp32 = export_onnx(model, CompressionPlan(), ids[:1], tmp_path / "fp32.onnx").path
    int8 = export_onnx(small, plan, ids[:1], tmp_path / "int8.onnx").path
    # the file stores the rows as INT8 too
    assert int8.stat().st_size < fp32.stat().st_size - 2.5 * table
    got = ort.InferenceSession(str(int8)).run(None, {"input": ids[:1].numpy()})[0]
    np.testing.assert_allclose(got, out[:1].numpy(), atol=1e-4)


def test_rows_stay_frozen_while_the_rest_trains() -> None:
    model, ids = _setup()
    small = apply_plan(model, CompressionPlan(techniques={"embedding-quant": 8}), ids[:1])
    rows = small.word.rows.clone()
    trainable = [p for p in small.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    small.train()
    torch.nn.functional.cross_entropy(small(ids), torch.tensor([0, 1, 2, 0])).backward()
    opt.step()
    assert torch.equal(small.word.rows, rows)


def test_the_space_offers_the_choice_and_plans_are_checked() -> None:
    model, ids = _setup()
    options = SpaceOptions(prune_ratios=(0.0,), techniques={"embedding-quant": {}})
    space = discover(model, ids[:1], options)
    assert "embed_bits" in {d.name for d in space.dimensions()}
    drawn = {space.sample(seed).techniques.get("embedding-quant") for seed in range(20)}
    assert drawn == {None, 8}
    with pytest.raises(PlanError, match="embedding-quant"):
        CompressionPlan.from_dict({"techniques": {"embedding-quant": 4}})
    with pytest.raises(PlanError, match="embedding-quant.bits"):
        build_technique("embedding-quant", {"bits": [16]})
