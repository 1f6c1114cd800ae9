import dataclasses
import warnings

import pytest
import torch
import torchvision

from frontier.spaces import (
    CompressionPlan,
    ShapeCounter,
    SpaceOptions,
    StudentSpec,
    TextTransformer,
    TransformerShape,
    apply_plan,
    discover,
    model_cost,
)
from frontier.spaces._shapes import CHECKED


def _space(name: str):
    model = torchvision.models.get_model(name, weights=None, num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = SpaceOptions(round_to=8, prune_ratios=(0.0, 0.25, 0.5), weight_bits=(4, 8, 32))
        return model, x, discover(model, x, options)


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_shape_counts_equal_built_models(name: str) -> None:
    """A plan's size, MACs and BOPs counted from shapes equal those of the pruned model
    it builds (depthwise convolutions, residual couplings, quantized layers)."""
    model, x, space = _space(name)
    counter = ShapeCounter(model, x, space.groups, checks=[space.sample(0)])
    assert counter.ok, counter.mismatch
    for seed in range(1, 7):
        plan = space.sample(seed)
        assert plan.prune and plan.weight_bits
        built = model_cost(apply_plan(model, plan, x), plan, x)
        counted = counter.cost(plan)
        assert counted is not None
        assert {f: getattr(counted, f) for f in CHECKED} == {f: getattr(built, f) for f in CHECKED}
        assert [(c.name, c.size_bytes, c.macs) for c in counted.layers] == [
            (c.name, c.size_bytes, c.macs) for c in built.layers
        ]
    assert counter.cost(CompressionPlan()) is not None
    assert counter.cost(CompressionPlan()).macs == model_cost(model, CompressionPlan(), x).macs


def test_shape_counter_declines_what_it_cannot_count() -> None:
    """Students, sparsity and registered techniques change more than channel counts; a
    counter whose self-check fails declines every plan."""
    model, x, space = _space("mobilenet_v2")
    counter = ShapeCounter(model, x, space.groups)
    plan = space.sample(0)
    assert counter.cost(plan) is not None
    for other in (
        dataclasses.replace(plan, sparsity={space.layers[0].name: 0.5}),
        dataclasses.replace(plan, student=StudentSpec(family="mlp")),
        dataclasses.replace(plan, techniques={"layer-drop": {}}),
    ):
        assert counter.cost(other) is None
    # a group whose channel count is wrong breaks linearity: the check catches it
    wrong = [dataclasses.replace(g, channels=g.channels * 2) for g in space.groups]
    bad = ShapeCounter(model, x, wrong, checks=[plan])
    assert not bad.ok and "differ" in bad.mismatch and bad.cost(plan) is None


def test_text_plans_are_counted_from_shapes() -> None:
    """A text plan (heads and FFN channels removed, layers dropped, INT8 embeddings,
    INT8 Linears) is sized from shapes exactly as its built model is; its MACs are not
    counted from shapes (attention's do not scale with a weight), so asking for them
    declines and the caller builds."""
    torch.manual_seed(0)
    shape = TransformerShape(
        vocab_size=50,
        max_positions=12,
        hidden=32,
        heads=(4, 4, 4),
        ffn=(64, 64, 64),
        head_dim=8,
        num_classes=3,
    )
    model = TextTransformer(shape).eval()
    ids = torch.randint(1, 50, (1, 12))
    techniques = {"transformer-prune": {}, "layer-drop": {}, "embedding-quant": {}}
    options = SpaceOptions(
        prune_ratios=(0.0,), weight_bits=(8, 32), act_bits=(8, 32), techniques=techniques
    )
    space = discover(model, ids, options)
    counter = ShapeCounter(model, ids, space.groups, checks=[space.sample(0)])
    assert counter.ok, counter.mismatch
    sizes = set()
    for seed in range(1, 13):
        plan = space.sample(seed)
        assert plan.techniques
        built = model_cost(apply_plan(model, plan, ids), plan, ids, macs=False)
        counted = counter.cost(plan, macs=False)
        assert counted is not None
        assert {f: getattr(counted, f) for f in CHECKED} == {f: getattr(built, f) for f in CHECKED}
        assert [(c.name, c.size_bytes) for c in counted.layers] == [
            (c.name, c.size_bytes) for c in built.layers
        ]
        sizes.add(counted.size_bytes)
    assert len(sizes) > 6  # the plans differ in size, so equality is not by chance
    assert counter.cost(space.sample(1)) is None  # MACs asked: build
