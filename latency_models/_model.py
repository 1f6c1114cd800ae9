"""Predicting a compressed model's latency (and energy) on a device from its table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from frontier.spaces import CompressionPlan, SearchSpace

from ._ops import OpSpec, plan_ops
from ._table import DeviceTable, Row

#: Feature groups of the whole-model calibration: the per-op sums of each are scaled.
CALIBRATION_GROUPS = ("conv", "dwconv", "linear", "other")
DEFAULT_TRANSFER_GBPS = 1.0


@dataclass(frozen=True)
class OpCost:
    """One op of a prediction."""

    key: str
    kind: str
    latency_ms: float
    source: str  # "table", "fallback" (predicted from same-type rows), "offload" (unsupported)
    transfer_ms: float = 0.0
    energy_mj: float | None = None


@dataclass(frozen=True)
class LatencyEstimate:
    """A predicted latency with its breakdown.

    Attributes:
        latency_ms: the prediction (calibrated sum plus overhead).
        sum_ms: the uncalibrated sum of per-op latencies plus one overhead.
        ops: the per-op breakdown.
        coverage: how many ops came from the table, the fallback and offloading.
        energy_mj: energy per inference, when the table can price it.
    """

    latency_ms: float
    sum_ms: float
    ops: tuple[OpCost, ...]
    coverage: dict[str, int]
    energy_mj: float | None


@dataclass
class FallbackFit:
    """A predictor for ops missing from the table, fitted on rows of one kind."""

    kind: str
    method: str
    cv_mape: float
    rows: int
    coef: Any = None
    model: Any = None

    def predict(self, spec: OpSpec) -> float:
        x = _features(spec)
        if self.method == "linear":
            return max(float(np.dot(self.coef, x)), 1e-6)
        return float(np.exp(self.model.predict(np.log1p(np.asarray([x[:2]])))[0]))


def _features(spec: OpSpec) -> np.ndarray:
    return np.array([float(spec.macs), float(spec.bytes_moved), 1.0])


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    scale = np.maximum(np.abs(x).max(axis=0), 1e-12)
    coef, _ = nnls(x / scale, y)
    return np.asarray(coef / scale)


def _fit_fallback(kind: str, specs: list[OpSpec], ms: np.ndarray) -> FallbackFit:
    """Compare a non-negative linear fit on (MACs, bytes) with gradient boosting on their
    logs, by 5-fold cross-validated MAPE, and keep the better one."""
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.model_selection import KFold

    x = np.array([_features(s) for s in specs])
    n = len(specs)
    folds = KFold(n_splits=min(5, n), shuffle=True, random_state=0) if n >= 4 else None
    errors: dict[str, list[float]] = {"linear": [], "gbr": []}
    if folds is not None:
        for train, test in folds.split(x):
            coef = _nnls(x[train], ms[train])
            pred = np.maximum(x[test] @ coef, 1e-6)
            errors["linear"] += list(np.abs(pred - ms[test]) / ms[test])
            if n >= 12:
                gbr = GradientBoostingRegressor(random_state=0, n_estimators=100, max_depth=2)
                gbr.fit(np.log1p(x[train, :2]), np.log(ms[train]))
                pred = np.exp(gbr.predict(np.log1p(x[test, :2])))
                errors["gbr"] += list(np.abs(pred - ms[test]) / ms[test])
    mape = {k: float(np.mean(v)) if v else math.inf for k, v in errors.items()}
    if mape["gbr"] < mape["linear"]:
        gbr = GradientBoostingRegressor(random_state=0, n_estimators=100, max_depth=2)
        gbr.fit(np.log1p(x[:, :2]), np.log(ms))
        return FallbackFit(kind, "gbr", mape["gbr"], n, model=gbr)
    return FallbackFit(kind, "linear", mape["linear"], n, coef=_nnls(x, ms))


@dataclass
class LatencyModel:
    """Latency of compressed models on one device, from its measured table.

    The prediction sums the table's per-op latencies (each corrected for the per-run
    session overhead the table measured), adds one overhead, and scales each op group's
    sum by factors fitted on whole compressed models measured on the same device (the
    bundle's calibration models), which absorbs what isolated kernels pay that a whole
    graph pays once (layout conversions, quantize/dequantize at the edges).

    Args:
        table: the device's table.
        offload: the table of the device that runs ops ``table`` marks unsupported.
        calibrate: fit the whole-model calibration when the table has calibration models.
    """

    table: DeviceTable
    offload: DeviceTable | None = None
    calibrate: bool = True
    fallbacks: dict[str, FallbackFit] = field(default_factory=dict)
    coef: dict[str, float] | None = None
    _bound: dict[int, Any] = field(default_factory=dict, repr=False)
    _specs: dict[str, OpSpec] = field(default_factory=dict, repr=False)

    # -- binding models ---------------------------------------------------------------
    def bind(self, model: Any, example_inputs: Any, space: SearchSpace) -> None:
        """Prepare predictions for plans of ``space`` on ``model`` (exports it once)."""
        from ._bundle import space_templates

        self._bound[id(model)] = space_templates(model, example_inputs, space)

    def predict(self, model: Any, plan: CompressionPlan) -> LatencyEstimate:
        """Predicted latency of ``model`` compressed by ``plan`` (``bind`` it first)."""
        from ._bundle import TEACHER

        templates = self._bound.get(id(model))
        if templates is None:
            raise ValueError(
                "predict(model, plan): bind(model, example_inputs, space) this model first"
            )
        arch = plan.student.key if plan.student is not None else TEACHER
        return self.predict_ops(plan_ops(templates[arch], plan))

    # -- the arithmetic ---------------------------------------------------------------
    def _op_ms(self, row: Row) -> float:
        return max(row.median_ms - self.table.overhead_ms, 0.0)

    def _fallback(self, spec: OpSpec) -> float:
        kind = f"{spec.kind}/{spec.precision}"
        fit = self.fallbacks.get(kind)
        if fit is None:
            fit = self._fit_kind(spec)
            self.fallbacks[kind] = fit
        return fit.predict(spec)

    def spec_of(self, key: str) -> OpSpec | None:
        """The op spec behind a table key (from the bundle manifest stored with the table)."""
        spec = self._specs.get(key)
        if spec is None:
            entry = self.table.models.get(key)
            if entry is not None and "spec" in entry:
                spec = OpSpec.from_dict(entry["spec"])
                self._specs[key] = spec
        return spec

    def _fit_kind(self, spec: OpSpec) -> FallbackFit:
        rows = [r for r in self.table.ops() if r.status == "ok"]
        same = [r for r in rows if r.op_type == spec.kind and r.precision == spec.precision]
        if len(same) < 3:
            same = [r for r in rows if r.op_type == spec.kind] or rows
        specs, ms = [], []
        for r in same:
            s = self.spec_of(r.key)
            if s is not None:
                specs.append(s)
                ms.append(self._op_ms(r))
        if not specs:
            raise ValueError(
                f"table {self.table.name!r} has no measured op to predict {spec.key!r} from"
            )
        return _fit_fallback(f"{spec.kind}/{spec.precision}", specs, np.array(ms))

    def register_specs(self, specs: list[OpSpec]) -> None:
        """Tell the model the specs behind table keys (the fallback fits on their features)."""
        for s in specs:
            self._specs[s.key] = s

    def op_cost(self, spec: OpSpec) -> OpCost:
        if spec.kind in self.table.unsupported_types and self.offload is not None:
            row = self.offload.get(spec.key)
            base = (
                max(row.median_ms - self.offload.overhead_ms, 0.0)
                if row is not None and row.status == "ok"
                else LatencyModel(self.offload, calibrate=False)._fallback_with(self, spec)
            )
            gbps = float(self.table.meta.get("transfer_gbps", DEFAULT_TRANSFER_GBPS))
            fp32_bytes = 4 * (
                sum(math.prod(s) for s in spec.input_shapes) + math.prod(spec.output_shape)
            )
            transfer_ms = fp32_bytes / (gbps * 1e9) * 1e3
            return OpCost(spec.key, spec.kind, base + transfer_ms, "offload", transfer_ms)
        row = self.table.get(spec.key)
        if row is not None and row.status == "ok":
            return OpCost(spec.key, spec.kind, self._op_ms(row), "table", energy_mj=row.energy_mj)
        return OpCost(spec.key, spec.kind, self._fallback(spec), "fallback")

    def _fallback_with(self, other: LatencyModel, spec: OpSpec) -> float:
        self._specs.update(other._specs)
        return self._fallback(spec)

    def _group_sums(self, costs: list[OpCost]) -> np.ndarray:
        sums = dict.fromkeys(CALIBRATION_GROUPS, 0.0)
        for c in costs:
            group = c.kind if c.kind in sums else "other"
            sums[group] += c.latency_ms
        return np.array([sums[g] for g in CALIBRATION_GROUPS])

    def fit_calibration(self) -> dict[str, float] | None:
        """Fit whole-model latency ~ overhead + sum_g coef_g * (group g's op sum)."""
        xs, ys = [], []
        for row in self.table.whole_models("calibration"):
            entry = self.table.models.get(row.key)
            if entry is None:
                continue
            costs = [self._cost_of_key(k) for k in entry["op_keys"]]
            if any(c is None for c in costs):
                continue
            xs.append(self._group_sums([c for c in costs if c is not None]))
            ys.append(row.median_ms - self.table.overhead_ms)
        if len(xs) < len(CALIBRATION_GROUPS) + 2:
            return None
        x, y = np.array(xs), np.array(ys)
        used = x.sum(axis=0) > 0
        coef = np.zeros(len(CALIBRATION_GROUPS))
        coef[used] = _nnls(x[:, used], y)
        coef[~used] = 1.0
        return dict(zip(CALIBRATION_GROUPS, map(float, coef), strict=True))

    def _cost_of_key(self, key: str) -> OpCost | None:
        spec = self.spec_of(key)
        if spec is not None:
            return self.op_cost(spec)
        row = self.table.get(key)
        if row is None or row.status != "ok":
            return None
        return OpCost(key, row.op_type, self._op_ms(row), "table")

    def predict_ops(self, specs: list[OpSpec]) -> LatencyEstimate:
        """Predict the latency of a model that runs ``specs``."""
        if self.calibrate and self.coef is None:
            self.coef = self.fit_calibration() or dict.fromkeys(CALIBRATION_GROUPS, 1.0)
        costs = [self.op_cost(s) for s in specs]
        overhead = self.table.overhead_ms
        sums = self._group_sums(costs)
        coef = np.array([(self.coef or {}).get(g, 1.0) for g in CALIBRATION_GROUPS])
        latency = float(sums @ coef) + overhead
        coverage = {"table": 0, "fallback": 0, "offload": 0}
        for c in costs:
            coverage[c.source] += 1
        return LatencyEstimate(
            latency_ms=latency,
            sum_ms=float(sums.sum()) + overhead,
            ops=tuple(costs),
            coverage=coverage,
            energy_mj=self._energy(costs, latency),
        )

    def _energy(self, costs: list[OpCost], latency_ms: float) -> float | None:
        if costs and all(c.energy_mj is not None for c in costs):
            return float(sum(c.energy_mj or 0.0 for c in costs))
        power = self.table.active_power_w
        return latency_ms * power if power is not None else None
