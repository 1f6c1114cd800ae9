"""Techniques: a technique defined in this file only (no edit under spaces/) is searched,
lands in plans, round-trips through JSON, validates and applies; the built-ins apply
through the same registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from frontier.spaces import (
    CompressionPlan,
    Dimension,
    PlanError,
    SpaceError,
    SpaceOptions,
    Technique,
    apply_plan,
    discover,
    register_technique,
    technique_names,
)


@register_technique("zero-bias")
@dataclass(frozen=True)
class ZeroBias(Technique):
    """A toy technique: per Linear layer, keep its bias or zero it (``zero_bias.LAYER``)."""

    choices: tuple[bool, ...] = (False, True)

    def dimensions(self, space):
        return [
            Dimension(f"zero_bias.{q.name}", "zero bias", self.choices, q.kind)
            for q in space.layers
            if q.kind == "Linear"
        ]

    def draw(self, space, choose, prefix=""):
        picked = [d.name.removeprefix("zero_bias.") for d in self.dimensions(space)]
        zeroed = [n for n in picked if choose(f"{prefix}zero_bias.{n}", self.choices)]
        return self.entry_field(sorted(zeroed) or None)

    def read(self, entry: Any) -> Any:
        if not isinstance(entry, list) or not all(isinstance(n, str) for n in entry):
            raise PlanError(f"techniques.zero-bias: a list of layer names, got {entry!r}")
        return entry

    def validate(self, space, plan) -> None:
        linear = {q.name for q in space.layers if q.kind == "Linear"}
        for name in self.entry(plan) or []:
            if name not in linear:
                raise PlanError(f"techniques.zero-bias: {name!r} is not a Linear layer")

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs) -> None:
        modules: Mapping[str, nn.Module] = dict(model.named_modules())
        with torch.no_grad():
            for name in self.entry(plan) or []:
                modules[name].bias.zero_()  # type: ignore[union-attr]


def test_a_registered_technique_is_searched_applied_and_round_trips(mlp) -> None:
    assert "zero-bias" in technique_names()
    example = torch.randn(4, 64)
    space = discover(mlp, example, SpaceOptions(techniques={"zero-bias": {}}))
    names = [d.name for d in space.dimensions()]
    assert {"zero_bias.1", "zero_bias.3", "zero_bias.5"} <= set(names)
    plan = next(
        p for p in (space.sample(seed) for seed in range(20)) if p.techniques.get("zero-bias")
    )
    again = CompressionPlan.from_json(plan.to_json(), space=space)
    assert again == plan
    out = apply_plan(mlp, plan, example)
    zeroed = plan.techniques["zero-bias"]
    for name, module in out.named_modules():
        if isinstance(module, nn.Linear):
            assert bool((module.bias == 0).all()) == (name in zeroed)
    # the built-ins still apply: a prune from the same plan shrinks the model
    pruned = apply_plan(mlp, CompressionPlan(prune={"1": 0.5}, techniques=plan.techniques), example)
    assert pruned[1].out_features == 24


def test_technique_errors_name_it(mlp) -> None:
    example = torch.randn(4, 64)
    with pytest.raises(SpaceError, match="techniques.zero-bias: technique 'zero-bias'"):
        SpaceOptions(techniques={"zero-bias": {"choicez": [True]}})
    space = discover(mlp, example, SpaceOptions(techniques={"zero-bias": {}}))
    bad = CompressionPlan(techniques={"zero-bias": ["0"]})
    with pytest.raises(PlanError, match="'0' is not a Linear layer"):
        space.validate(bad)
    plain = discover(mlp, example)
    with pytest.raises(PlanError, match="'zero-bias' is not searched in this space"):
        plain.validate(CompressionPlan(techniques={"zero-bias": ["1"]}))
    with pytest.raises(PlanError, match="a list of layer names"):
        CompressionPlan.from_dict({"techniques": {"zero-bias": "1"}})


def test_a_search_explores_a_registered_technique(tmp_path, monkeypatch) -> None:
    from frontier.search import parse_config, run

    monkeypatch.chdir(tmp_path)
    config = parse_config(
        {
            "name": "toy-technique",
            "task": {"name": "digits", "options": {"model": "mlp"}},
            "space": {
                "prune_ratios": [0.0, 0.5],
                "weight_bits": [8, 32],
                "act_bits": [32],
                "techniques": {"zero-bias": {}},
            },
            "objectives": [{"name": "accuracy", "options": {"steps": 10}}, "size_bytes"],
            "search": {"trials": 8, "population": 4, "fidelity": {"rungs": ["proxy"]}},
        }
    )
    result = run(config, progress=False)
    trials = [t for t in result.study.trials if t.state.name == "COMPLETE"]
    assert len(trials) == 8
    assert all(any(k.startswith("zero_bias.") for k in t.params) for t in trials)
    used = [t.user_attrs["plan"]["techniques"].get("zero-bias") for t in trials]
    assert any(used)  # some plans zeroed a bias, and the plan says which
