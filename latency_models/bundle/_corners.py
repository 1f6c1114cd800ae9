"""The plans a table is calibrated and checked on: the corners of a space, where a
search's picks often sit (every layer INT8, every layer pruned alike), and plans with
long INT8 chains, besides the seeded random plans that mix FP32 and INT8 about evenly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from frontier.spaces import CompressionPlan, SearchSpace, uniform_params

BITS = ("wbits.", "abits.")
#: Of an INT8-heavy plan's layers, the share that takes 8 bits where it can.
INT8_HEAVY = 0.9


class _Chooser:
    """Answers ``SearchSpace.suggest``'s questions by a rule per dimension."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        value = self.rule(name, list(choices))
        return value.item() if isinstance(value, np.generic) else value


def _narrow(choices: Sequence[int]) -> int:
    """The bit width of the INT8 corner: 8 where the space offers it (what runs INT8 in
    ONNX Runtime), else its narrowest."""
    return 8 if 8 in choices else min(choices)


def corner_plans(space: SearchSpace) -> list[tuple[str, CompressionPlan]]:
    """(label, plan) of each uniform plan of ``space`` (``uniform_params``): every prune
    ratio of the space on every prunable layer, once with every layer at the widest bits
    and once at 8 bits where it can take them. No distillation, no student."""
    opts = space.options
    ratios = sorted(set(opts.prune_ratios)) or [0.0]
    wide = (max(opts.weight_bits), max(opts.act_bits))
    narrow = (_narrow(opts.weight_bits), _narrow(opts.act_bits))
    out = []
    for label, (wbits, abits) in (("fp32", wide), ("int8", narrow)):
        for ratio in ratios:
            params = uniform_params(space, prune=ratio, weight_bits=wbits, act_bits=abits)
            chooser = _Chooser(lambda name, choices, p=params: p.get(name, choices[0]))
            out.append((f"prune {ratio:g}, {label}", space.suggest(chooser)))
    return out


def int8_heavy_plan(space: SearchSpace, seed: int) -> CompressionPlan:
    """A seeded plan whose layers take 8 bits with probability ``INT8_HEAVY`` (long INT8
    chains), prune ratios and every other choice drawn uniformly."""
    rng = np.random.default_rng(seed)
    int8: dict[str, bool] = {}  # per layer: its weights and activations decide together

    def rule(name: str, choices: list[Any]) -> Any:
        if name.startswith(BITS) and "/" not in name and 8 in choices:
            layer = name.split(".", 1)[1]
            if layer not in int8:
                int8[layer] = bool(rng.random() < INT8_HEAVY)
            return 8 if int8[layer] else max(choices)
        return choices[int(rng.integers(len(choices)))]

    return space.suggest(_Chooser(rule))


def calibration_plans(
    space: SearchSpace, count: int, seed0: int
) -> list[tuple[int, CompressionPlan]]:
    """(seed, plan) of the ``count`` whole models that calibrate a table: the corners
    (``corner_plans``) first, then a quarter INT8-heavy plans (``int8_heavy_plan``), then
    plans drawn uniformly (``space.sample``), seeds from ``seed0``. A table fitted on
    random plans alone predicted the corners 70-170% off (all-INT8 plans most).

    Plans that first draw their own INT8 share and prune mix (reaching the space's fast
    ends, which uniform draws rarely do) were tried in place of half the uniform ones
    (2026-12-01, ``bench_residuals``): beside a table of uniform plans built the same
    hour they predicted no better (MNASNet 0.5: 95-100% of plans within 10% either way;
    ResNet-18: 80% against 95%), so they were left out."""
    corners = [plan for _, plan in corner_plans(space)][: count // 4]
    heavy = (count - len(corners)) // 4
    out: list[tuple[int, CompressionPlan]] = [(seed0 - 1 - i, p) for i, p in enumerate(corners)]
    for i in range(count - len(corners)):
        seed = seed0 + i
        out.append((seed, int8_heavy_plan(space, seed) if i < heavy else space.sample(seed)))
    return out
