"""Counting a pruning plan's cost from shapes alone, without building the model.

A sampler that screens hundreds of plans needs their size and MACs; building each
pruned model (a copy, a dependency graph, a forward pass) costs a tenth of a second or
more on a real model. Removing channels is linear in shapes: each channel a group drops
removes one slice of every tensor the group is coupled to, so every parameter's shape
under a plan is its shape in the model minus, per group, the slices that group removes.
``ShapeCounter`` probes each group once (pruned alone), then counts any plan that only
prunes and sets bit widths with a matrix product; a convolution's or linear layer's MACs
scale with its weight's element count (its output positions do not change). A registered
technique that says how it changes parameter shapes (``Technique.reshape``: heads and FFN
channels removed, encoder layers dropped, INT8 embedding tables) is counted the same way,
its size without MACs. It checks itself against built models on the plans it is given and
declines when they disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import nn

from ._apply import apply_plan
from ._cost import Cost, count_macs, layer_cost, model_cost, total_cost
from ._dims import LayerGroup
from ._param_shapes import ParamShapes
from ._plan import CompressionPlan
from ._quant import channel_axis
from ._surgery import kept_channels
from ._techniques import plan_techniques

#: fields a shape count must reproduce exactly (``nonzero_weights`` is every kept
#: weight: zeros quantization rounds to or a model stores are not counted)
CHECKED = ("params", "size_bytes", "macs", "bops", "other_params", "other_bytes", "other_macs")


class ShapeCounter:
    """Size, MACs and BOPs (``model_cost``) of plans that prune channels and set bit
    widths, from shapes: one pruned build per group (the first time a plan prunes it),
    microseconds a plan after. Plans whose registered techniques all say how they change
    shapes (``Technique.reshape``) are counted too, their size only (MACs and BOPs 0, as
    ``model_cost(macs=False)`` leaves them).

    Args:
        model: the uncompressed model.
        example_inputs: the batch MACs are counted for (batch size 1).
        groups: the space's prunable groups.
        checks: plans to verify the counts on (built and counted the usual way); if any
            disagrees, ``cost`` declines every plan (returns None).
        probe_ratio: the ratio each group is pruned at alone.
    """

    def __init__(
        self,
        model: nn.Module,
        example_inputs: Any,
        groups: Sequence[LayerGroup],
        *,
        checks: Sequence[CompressionPlan] = (),
        probe_ratio: float = 0.5,
    ) -> None:
        self.model, self.example_inputs, self.probe_ratio = model, example_inputs, probe_ratio
        self.groups = {g.name: g for g in groups}
        self._params = [(n, tuple(p.shape), p.element_size()) for n, p in model.named_parameters()]
        self._index = {n: i for i, (n, _, _) in enumerate(self._params)}
        macs = count_macs(model, example_inputs)
        layers = [(n, m) for n, m in model.named_modules() if n and channel_axis(m) is not None]
        self._layers = [
            (name, type(m).__name__, channel_axis(m) or 0, getattr(m, "bias", None) is not None)
            for name, m in layers
        ]
        self._layer_macs = [macs.get(n, 0) for n, _ in layers]
        self._other_macs = max(0, macs.get("", 0) - sum(self._layer_macs))
        # a scalar parameter gets one dimension of 1, so every parameter has a slice
        self._dims0 = np.array([d for _, s, _ in self._params for d in s or (1,)], dtype=float)
        starts = np.cumsum([0] + [len(s) or 1 for _, s, _ in self._params]).tolist()
        #: each parameter's name, its slice of the dimensions, its bytes an element
        self._slices = [
            (n, starts[i], starts[i] + len(s), e) for i, (n, s, e) in enumerate(self._params)
        ]
        self._rates = np.zeros((len(self._dims0), len(self.groups)))
        self._probed: set[str] = set()
        self.ok = all(
            f"{n}.weight" in self._index and (not b or f"{n}.bias" in self._index)
            for n, _, _, b in self._layers
        )
        self.mismatch = "" if self.ok else "a layer's weight is shared with another"
        for plan in checks if self.ok else ():
            counted = self.cost(plan, macs=self.counts_macs(plan))
            if counted is None:
                continue
            built = apply_plan(model, plan, example_inputs)
            built_cost = model_cost(built, plan, example_inputs, macs=self.counts_macs(plan))
            wrong = [f for f in CHECKED if getattr(counted, f) != getattr(built_cost, f)]
            if wrong:
                self.ok, self.mismatch = False, f"{', '.join(wrong)} differ on {plan.to_dict()}"
                break

    def _probe(self, j: int, group: LayerGroup) -> None:
        """Column ``j`` of the rates: the slices one removed channel of ``group`` takes
        out of each parameter (from one build with the group pruned alone)."""
        self._probed.add(group.name)
        removed = group.channels - self._kept(group, self.probe_ratio, 1)
        if removed <= 0:
            return
        plan = CompressionPlan(prune={group.name: self.probe_ratio})
        shapes = dict(apply_plan(self.model, plan, self.example_inputs).named_parameters())
        dims = []
        for name, shape, _ in self._params:
            now = tuple(shapes[name].shape) if name in shapes else (0,) * len(shape)
            dims += [a - b for a, b in zip(shape, now, strict=True)] or [0]
        self._rates[:, j] = np.array(dims, dtype=float) / removed

    def _kept(self, group: LayerGroup, ratio: float, round_to: int) -> int:
        return kept_channels(group.channels, ratio, math.lcm(round_to, group.channel_groups))

    @staticmethod
    def handles(plan: CompressionPlan) -> bool:
        """Whether ``plan`` only prunes, sets bit widths and uses registered techniques
        (what shapes may count: ``cost`` still declines a technique that cannot say)."""
        return not (plan.student or plan.activation or plan.sparsity) and plan.importance in (
            "l1",
            "taylor",
            "bn_scale",
        )

    @staticmethod
    def counts_macs(plan: CompressionPlan) -> bool:
        """Whether ``cost`` counts ``plan``'s MACs (not where a registered technique
        reshapes the model: attention's MACs do not scale with a weight's size)."""
        return not plan.techniques

    def cost(self, plan: CompressionPlan, *, macs: bool = True) -> Cost | None:
        """``model_cost`` of the model ``plan`` builds, or None where this counter does
        not count it (``handles``, a failed self-check, a group it does not know, a
        technique without ``reshape``, MACs asked where ``counts_macs`` is False)."""
        if not (self.ok and self.handles(plan)) or any(g not in self.groups for g in plan.prune):
            return None
        if macs and not self.counts_macs(plan):
            return None
        if plan.techniques and any(r > 0 for r in plan.prune.values()):
            return None  # a technique reads the unpruned model's modules
        removed = np.array(
            [
                g.channels - self._kept(g, plan.prune.get(name, 0.0), plan.round_to)
                for name, g in self.groups.items()
            ],
            dtype=float,
        )
        for j, (name, g) in enumerate(self.groups.items()):
            if removed[j] > 0 and name not in self._probed:
                try:
                    self._probe(j, g)
                except Exception as err:  # a group that cannot be pruned alone: build
                    self.ok, self.mismatch = False, f"group {name!r} alone: {err}"
                    return None
        dims = np.rint(self._dims0 - self._rates @ removed).astype(np.int64).tolist()
        shapes = ParamShapes(self.model, {n: (tuple(dims[a:b]), e) for n, a, b, e in self._slices})
        for technique in plan_techniques(plan):
            if technique.name in plan.techniques and not technique.reshape(plan, shapes):
                return None
        return self._cost(plan, shapes, macs=self.counts_macs(plan))

    def _cost(self, plan: CompressionPlan, shapes: ParamShapes, *, macs: bool) -> Cost:
        """The cost of the model whose parameters have ``shapes``: a layer whose weight
        is gone (a dropped encoder layer) is not counted; MACs scale with each layer's
        weight (``macs``; else left at 0)."""
        numel = {n: math.prod(s) for n, (s, _) in shapes.params.items()}
        layers, in_layers = [], set()
        for k, (name, kind, axis, has_bias) in enumerate(self._layers):
            weight, bias = f"{name}.weight", f"{name}.bias"
            if weight not in shapes:
                continue
            in_layers |= {weight, bias}
            w0 = math.prod(self._params[self._index[weight]][1])
            layers.append(
                layer_cost(
                    name,
                    kind,
                    plan,
                    weight_numel=numel[weight],
                    bias_numel=numel.get(bias, 0) if has_bias else 0,
                    channels=shapes.shape(weight)[axis],
                    macs=round(self._layer_macs[k] * numel[weight] / w0) if macs and w0 else 0,
                    nonzero_weights=numel[weight],
                )
            )
        other = [n for n in shapes.params if n not in in_layers]
        return total_cost(
            layers,
            params=sum(numel.values()),
            other_params=sum(numel[n] for n in other),
            other_bytes=sum(numel[n] * shapes.params[n][1] for n in other),
            macs=sum(layer.macs for layer in layers) + self._other_macs if macs else 0,
        )
