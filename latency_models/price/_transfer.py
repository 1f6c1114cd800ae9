"""Few-shot device tables: a new device predicted from a small measured subset of ops and
a few whole models, through the full table of another device.

Latency on two devices is strongly related op by op (HELP and LitePred transfer
predictors on that). Here, per op kind, the new device's op time is a power law of the
base device's, ``log t_new = a_k + b_k log t_base``, fitted on the subset both measured
(shrunk towards one law for all kinds where a kind has few ops). A whole model is then
predicted in one of three ways, whichever predicts the few measured whole models best
(leave-one-out):

- ``scale``: the base device's calibrated prediction (which knows how ops interact in
  a graph) times one scale;
- ``ratio``: that prediction times the ratio of the model's op sums on the two devices
  (so a plan heavy in the ops the new device runs relatively slower costs more), times
  one scale;
- ``sum``: the new device's op sum plus its overhead, times one scale.

The scale is the median of measured over predicted on the few whole models. Where op
timings on the new device are noisy (two threads on a busy 2-core machine here), the
per-op laws add their noise to ``ratio`` and ``sum``, and ``scale`` wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..device._table import MIN_FEW_SHOT_WHOLE_MODELS as MIN_WHOLE_MODELS
from ..device._table import MIN_SHARED_OPS
from ..ops._ops import OpSpec
from ._estimate import LatencyEstimate, OpCost


class BasePredictor(Protocol):
    """What a transfer asks of its base device's predictor (a ``LatencyModel``)."""

    table: Any

    def op_cost(self, spec: OpSpec, *, native: bool = False) -> Any: ...

    def predict_ops(self, specs: list[OpSpec]) -> Any: ...


#: How many ops of a kind weigh as much as the all-kinds law in its fit (shrinkage).
PRIOR_OPS = 3.0
#: Ops faster than this (ms, above the overhead) are fitted as this: below it a kernel's
#: time is mostly timer noise.
FLOOR_MS = 1e-4
#: How a whole model is predicted (module docstring); ties go to the first.
METHODS = ("scale", "ratio", "sum")


class TransferError(ValueError):
    """A few-shot table cannot be predicted from its base."""


def _law(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least squares ``y = a + b x``; a slope of 1 where ``x`` does not vary."""
    if len(x) < 2 or np.ptp(x) < 1e-9:
        return float(np.mean(y - x)), 1.0
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


@dataclass
class Transfer:
    """A fitted transfer from a base device's latency model to a new device.

    Attributes:
        base: the base device's latency model (its own calibration included).
        laws: per op kind (``conv/int8``), ``(a, b)`` of ``log t_new = a + b log t_base``.
        overall: the law fitted on every kind together.
        measured: the new device's measured op times (ms above its overhead), by key.
        overhead_ms: the new device's per-run overhead.
        method: ``scale``, ``ratio`` or ``sum`` (module docstring), and its ``scale``.
        loo_mape: each method's leave-one-out MAPE on the whole models.
    """

    base: BasePredictor
    laws: dict[str, tuple[float, float]]
    overall: tuple[float, float]
    measured: dict[str, float]
    overhead_ms: float
    method: str = "ratio"
    scale: float = 1.0
    loo_mape: dict[str, float] = field(default_factory=dict)

    def op_ms(self, spec: OpSpec) -> tuple[float, str]:
        """The new device's time for ``spec`` (ms above the overhead): measured, or
        transferred from the base device's; and which."""
        if spec.key in self.measured:
            return self.measured[spec.key], "table"
        base_ms = max(self.base.op_cost(spec, native=True).latency_ms, FLOOR_MS)
        a, b = self.laws.get(f"{spec.kind}/{spec.precision}", self.overall)
        return math.exp(a + b * math.log(base_ms)), "transfer"

    def unscaled(self, specs: Sequence[OpSpec], method: str) -> float:
        if method == "scale":
            return self.base.predict_ops(list(specs)).latency_ms
        new_sum = sum(self.op_ms(s)[0] for s in specs) + self.overhead_ms
        if method == "sum":
            return new_sum
        base_costs = [self.base.op_cost(s, native=True).latency_ms for s in specs]
        base_sum = sum(base_costs) + self.base.table.overhead_ms
        return self.base.predict_ops(list(specs)).latency_ms * new_sum / base_sum

    def predict_ms(self, specs: Sequence[OpSpec]) -> float:
        return self.scale * self.unscaled(specs, self.method)

    def predict_ops(self, specs: Sequence[OpSpec]) -> LatencyEstimate:
        """Predict the latency of a model that runs ``specs`` on the new device, as
        ``LatencyModel.predict_ops`` does on a device with a full table (no energy: the
        new device's table prices that). Sparse ops are priced as their dense twins."""
        native = [s.dense if s.sparsity else s for s in specs]
        costs = []
        for spec in native:
            ms, source = self.op_ms(spec)
            costs.append(OpCost(spec.key, spec.kind, ms, source))
        coverage = {"table": 0, "fallback": 0, "offload": 0, "sparse_as_dense": 0, "transfer": 0}
        for c in costs:
            coverage[c.source] += 1
        coverage["sparse_as_dense"] = sum(s.sparsity > 0 for s in specs)
        return LatencyEstimate(
            latency_ms=self.predict_ms(native),
            sum_ms=sum(c.latency_ms for c in costs) + self.overhead_ms,
            ops=tuple(costs),
            coverage=coverage,
            energy_mj=None,
        )


def fit_transfer(
    base: BasePredictor,
    ops: Sequence[tuple[OpSpec, float]],
    overhead_ms: float,
    whole: Sequence[tuple[Sequence[OpSpec], float]],
) -> Transfer:
    """Fit a ``Transfer`` from ``base`` with the new device's measurements.

    Args:
        base: the base device's latency model.
        ops: the subset of ops the new device measured, each with its time in ms above
            the new device's overhead.
        overhead_ms: the new device's per-run overhead.
        whole: the whole models the new device measured: their ops and latency in ms.
    """
    shared = [(s, ms) for s, ms in ops if base.table.get(s.key) is not None]
    if len(shared) < MIN_SHARED_OPS:
        raise TransferError(
            f"the few-shot table shares {len(shared)} measured ops with its base table "
            f"{base.table.name!r}; at least {MIN_SHARED_OPS} are needed (write its bundle "
            "from the same config with `frontier lut ops --few-shot N`)"
        )
    if len(whole) < MIN_WHOLE_MODELS:
        raise TransferError(
            f"the few-shot table holds {len(whole)} measured whole models with their ops; "
            f"at least {MIN_WHOLE_MODELS} are needed"
        )
    kinds = [f"{s.kind}/{s.precision}" for s, _ in shared]
    x = np.log([max(base.op_cost(s, native=True).latency_ms, FLOOR_MS) for s, _ in shared])
    y = np.log([max(ms, FLOOR_MS) for _, ms in shared])
    overall = _law(x, y)
    laws = {}
    for kind in set(kinds):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        a, b = _law(x[idx], y[idx]) if len(idx) >= 2 else overall
        # a kind with few ops leans on the all-kinds law
        w = len(idx) / (len(idx) + PRIOR_OPS)
        laws[kind] = (w * a + (1 - w) * overall[0], w * b + (1 - w) * overall[1])
    transfer = Transfer(
        base=base,
        laws=laws,
        overall=overall,
        measured={s.key: ms for s, ms in ops},
        overhead_ms=overhead_ms,
    )
    measured = np.array([ms for _, ms in whole])
    best: tuple[float, str, float] | None = None
    for method in METHODS:
        raw = np.array([transfer.unscaled(specs, method) for specs, _ in whole])
        ratios = measured / raw
        loo = [np.median(np.delete(ratios, i)) * raw[i] / measured[i] - 1 for i in range(len(raw))]
        transfer.loo_mape[method] = float(np.mean(np.abs(loo)))
        if best is None or transfer.loo_mape[method] < best[0]:
            best = (transfer.loo_mape[method], method, float(np.median(ratios)))
    assert best is not None
    _, transfer.method, transfer.scale = best
    return transfer


def few_shot_ops(ops: Sequence[OpSpec], count: int, *, keep: Sequence[OpSpec] = ()) -> list[OpSpec]:
    """``count`` ops of ``ops`` to measure on a new device: every op kind and precision
    gets a share of the slots in proportion to its ops (at least one, largest kinds
    first when slots are short), spread evenly over its ops sorted by size (MACs, then
    bytes moved), so that each kind's law is fitted from its small to its large ops.
    ``keep`` is always in."""
    if count < 1:
        raise ValueError(f"few-shot op count must be at least 1, got {count=}")
    groups: dict[str, list[OpSpec]] = {}
    for spec in ops:
        groups.setdefault(f"{spec.kind}/{spec.precision}", []).append(spec)
    chosen = {s.key: s for s in keep}
    slots = count - len(chosen)
    order = sorted(groups, key=lambda k: (-len(groups[k]), k))
    share = {k: 0 for k in order}
    for k in order[: max(slots, 0)]:
        share[k] = 1
    left = slots - sum(share.values())
    while left > 0:
        room = [g for g in order if share[g] < len(groups[g])]
        if not room:
            break
        # the kind with the most ops per slot gets the next one
        k = max(room, key=lambda g: (len(groups[g]) / (share[g] + 1), -order.index(g)))
        share[k] += 1
        left -= 1
    for k in order:
        members = sorted(groups[k], key=lambda s: (s.macs, s.bytes_moved, s.key))
        n = min(share[k], len(members))
        for i in range(n):
            j = round(i * (len(members) - 1) / max(n - 1, 1)) if n > 1 else len(members) // 2
            chosen.setdefault(members[j].key, members[j])
    return list(chosen.values())


def summary(transfer: Transfer) -> dict[str, Any]:
    """The transfer's state for ``quality``."""
    return {
        "method": f"few-shot from {transfer.base.table.name} ({transfer.method})",
        "scale": round(transfer.scale, 4),
        "loo_mape": {k: round(v, 4) for k, v in transfer.loo_mape.items()},
        "measured_ops": len(transfer.measured),
        "kinds": len(transfer.laws),
    }
