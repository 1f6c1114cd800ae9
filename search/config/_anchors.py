"""Uniform plans: every layer at one prune ratio and one bit width.

They are the baselines practitioners try first, so a search starts with a few of them
(``search.anchors``): its front then never loses to the simple answers, and the sampler
learns the shape of the trade-off from the corners of the space.
"""

from __future__ import annotations

import itertools
from typing import Any

from frontier.spaces import SearchSpace, uniform_params


def _act_for(weight_bits: int, act_bits: list[int]) -> int:
    return 8 if weight_bits <= 8 and 8 in act_bits else max(act_bits)


def anchor_params(space: SearchSpace) -> list[dict[str, Any]]:
    """A few uniform plans: the smallest, middle and largest prune ratio at each weight
    bit width (activations at 8 bits where the weights are at 8 or fewer), for each
    activation choice where the space swaps activations."""
    opts = space.options
    ratios = sorted(set(opts.prune_ratios))
    picks = sorted({ratios[0], ratios[len(ratios) // 2], ratios[-1]})
    swap = opts.activation_swap
    activations = ["keep", *(swap.to if swap is not None else ())]
    out = []
    for activation, wbits, ratio in itertools.product(activations, sorted(opts.weight_bits), picks):
        act = _act_for(wbits, list(opts.act_bits))
        out.append(
            uniform_params(
                space, prune=ratio, weight_bits=wbits, act_bits=act, activation=activation
            )
        )
    return _unique(out)


def uniform_grid(space: SearchSpace) -> list[dict[str, Any]]:
    """Every uniform plan of the space's grids (the uniform-sweep baseline)."""
    opts = space.options
    out = [
        uniform_params(space, prune=r, weight_bits=w, act_bits=a)
        for r, w, a in itertools.product(opts.prune_ratios, opts.weight_bits, opts.act_bits)
    ]
    return _unique(out)


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for p in items:
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
