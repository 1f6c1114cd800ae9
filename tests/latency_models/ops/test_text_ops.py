"""Latency tables for text models: the ops a plan of heads, FFN widths, dropped layers
and INT8 is priced with are exactly the ops of the compressed model's own ONNX graph."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
import torch

from frontier.latency_models import build_onnx, plan_ops
from frontier.latency_models.ops._ops import enumerate_ops, plan_op_nodes
from frontier.latency_models.ops._templates import build_templates
from frontier.spaces import (
    CompressionPlan,
    SpaceOptions,
    TextTransformer,
    TransformerShape,
    apply_plan,
    discover,
)

SHAPE = TransformerShape(
    vocab_size=50,
    max_positions=12,
    hidden=96,  # above 64: LayerNorm scales and biases are large constants
    heads=(4, 4, 4),
    ffn=(64, 64, 64),
    head_dim=24,
    num_classes=3,
)
OPTIONS = {"prune_ratios": (0.0,), "weight_bits": (8, 32), "act_bits": (8, 32)}


@pytest.fixture(scope="module")
def text() -> tuple:
    torch.manual_seed(0)
    model = TextTransformer(SHAPE).eval()
    ids = torch.randint(1, 50, (1, 12))
    techniques = {"transformer-prune": {}, "layer-drop": {}}
    space = discover(model, ids, SpaceOptions(**OPTIONS, techniques=techniques))
    return model, ids, space, build_templates(model, ids, space)


def test_a_plan_is_priced_with_the_ops_its_model_runs(text) -> None:
    model, ids, space, templates = text
    assert len(templates.variants) == 6  # 3 head ratios and 3 FFN ratios
    for seed in range(8):
        plan = space.sample(seed)
        predicted = Counter(o.key for o in plan_ops(templates, plan))
        compressed = apply_plan(model, plan, ids)
        own = build_templates(compressed, ids, discover(compressed, ids, SpaceOptions(**OPTIONS)))
        bits = CompressionPlan(weight_bits=plan.weight_bits, act_bits=plan.act_bits)
        assert predicted == Counter(o.key for o in plan_ops(own, bits)), plan.techniques


def test_every_op_a_plan_can_run_is_enumerated_and_builds(text) -> None:
    _, _, space, templates = text
    enumerated = {o.key: o for o in enumerate_ops(templates, space)}
    for seed in range(8):
        assert {o.key for o in plan_ops(templates, space.sample(seed))} <= set(enumerated)
    kinds = {o.op_type for o in enumerated.values()}
    assert {"MatMul", "Softmax", "LayerNormalization", "Erf", "Transpose", "Reshape"} <= kinds
    attention = [o for o in enumerated.values() if o.op_type == "MatMul" and not o.weighted]
    assert attention and all(o.kind == "matmul" for o in attention)
    assert {"ReduceSum", "Div"} <= kinds  # the masked mean pooling
    for spec in enumerated.values():  # every one loads and runs: none left to a fallback
        session = ort.InferenceSession(build_onnx(spec).SerializeToString())
        assert [i.shape for i in session.get_inputs()] == [list(s) for s in spec.input_shapes]
        feeds = {
            i.name: np.ones(i.shape, np.uint8 if i.type == "tensor(uint8)" else np.float32)
            for i in session.get_inputs()
        }
        assert list(session.run(None, feeds)[0].shape) == list(spec.output_shape), spec.key


def test_a_plans_op_names_line_up_with_its_ops(text) -> None:
    """A profile of a compressed model is split by these names: one list per priced op,
    none from a dropped layer."""
    _, _, space, templates = text
    for seed in range(8):
        plan = space.sample(seed)
        names = plan_op_nodes(templates, plan)
        assert len(names) == len(plan_ops(templates, plan))
        for layer in plan.techniques.get("layer-drop", []):
            assert not any(f"/{layer}/" in n for op in names for n in op)
    dropped = next(
        space.sample(s) for s in range(50) if space.sample(s).techniques.get("layer-drop")
    )
    assert len(plan_op_nodes(templates, dropped)) < len(templates.ops)
