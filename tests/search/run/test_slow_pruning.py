"""The search warns where a device's table prices pruning slower than no pruning."""

from types import SimpleNamespace

import torch
from torch import nn

from frontier.search.run._setup import slow_pruning
from frontier.spaces import SpaceOptions, discover


def _space(round_to: int):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()
    ).eval()
    options = SpaceOptions(prune_ratios=(0.0, 0.25, 0.5), weight_bits=(32,), round_to=round_to)
    return model, discover(model, torch.randn(1, 1, 8, 8), options)


class _Table:
    """Prices a plan by its mean prune ratio: ``per_ratio_ms`` more for each whole ratio."""

    def __init__(self, per_ratio_ms: float) -> None:
        self.per_ratio_ms = per_ratio_ms

    def predict(self, model, plan):
        ratios = list(plan.prune.values()) or [0.0]
        return SimpleNamespace(latency_ms=1.0 + self.per_ratio_ms * sum(ratios) / len(ratios))


def test_a_table_that_prices_pruning_slower_is_named_with_round_to() -> None:
    model, space = _space(round_to=1)
    lines = slow_pruning(space, {"pi4": _Table(4.0), "cpu": _Table(-1.0)}, model)
    assert len(lines) == 1
    assert lines[0].startswith("latency_ms@pi4: 2 of 2 uniform prune ratios")
    assert "every layer at 0.5: 3 ms against 1 ms" in lines[0]
    assert "space.round_to=1" in lines[0]


def test_pruning_that_pays_off_or_no_pruning_says_nothing() -> None:
    model, space = _space(round_to=8)
    assert slow_pruning(space, {"cpu": _Table(-1.0)}, model) == []
    assert slow_pruning(space, {"cpu": _Table(0.1)}, model) == []  # within 10%
    only = discover(model, torch.randn(1, 1, 8, 8), SpaceOptions(prune_ratios=(0.0,)))
    assert slow_pruning(only, {"cpu": _Table(4.0)}, model) == []
