"""Anchor plans: the uniform plans a search starts from."""

import torch
from torch import nn

from frontier.search.config._anchors import anchor_params, uniform_grid
from frontier.spaces import CompressionPlan, SpaceOptions, SwapActivations, discover


class _Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def _space(**options):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), _Swish(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)
    ).eval()
    opts = SpaceOptions(prune_ratios=(0.0, 0.5, 0.75), weight_bits=(8, 32), **options)
    return discover(model, torch.randn(1, 1, 8, 8), opts)


class _Fixed:
    """An Optuna-like trial that answers from fixed parameters."""

    def __init__(self, params):
        self.params = params

    def suggest_categorical(self, name, choices):
        assert self.params[name] in choices, (name, self.params[name], choices)
        return self.params[name]


def test_anchors_are_uniform_plans_at_each_bit_width() -> None:
    space = _space(sparsity=(0.0, 0.5))
    plans = [space.suggest(_Fixed(p)) for p in anchor_params(space)]
    assert len(plans) == 6  # 3 prune ratios x 2 weight bit widths
    for plan in plans:
        assert len(set(plan.prune.values())) <= 1 and not plan.sparsity
        assert len(set(plan.weight_bits.values())) <= 1
    assert CompressionPlan(round_to=8) in plans  # the uncompressed model (round_to: the default)
    assert len(uniform_grid(space)) == 3 * 2 * 2


def test_anchors_try_every_activation_choice() -> None:
    space = _space(activation_swap=SwapActivations("_Swish"))
    plans = [space.suggest(_Fixed(p)) for p in anchor_params(space)]
    swaps = [p.activation.to if p.activation else "keep" for p in plans]
    assert {s: swaps.count(s) for s in set(swaps)} == {"keep": 6, "relu": 6, "hardswish": 6}
