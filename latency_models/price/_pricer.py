"""The op pricer: what each op of a plan costs alone on one device.

The first stage of prediction (measure -> bundle -> price -> calibrate, docs/design.md).
An op's price is its table row less the per-run session overhead; an op the table lacks
is priced by a fallback fitted on the rows of its kind; an op of a kind the device cannot
run goes to the ``offload`` device, plus the transfer of its tensors; a sparse op with no
sparse-kernel row costs its dense twin. Whole-model calibration (``_choose``) and few-shot
transfer (``_transfer``) both price through this.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..calibrate._calibration import Sample, nnls
from ..device._table import MIN_CALIBRATION_MODELS, DeviceTable, Row, baseline_key, bundle_of
from ..ops._ops import OpSpec
from ._estimate import OpCost

DEFAULT_TRANSFER_GBPS = 1.0
#: Ops a runtime runs in whatever layout their input comes in (ONNX Runtime carries an
#: NCHWc or NHWC chain through them rather than convert around them): a chain of
#: kernels in one layout runs through them unbroken. One of them that converts when
#: alone (ONNX Runtime's FP32 pooling) shows it in its row, and is a layout op.
PASS_THROUGH = frozenset({
    "Add", "Mul", "Sub", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Tanh", "BatchNormalization", "Concat", "MaxPool", "AveragePool",
    "GlobalAveragePool",
})  # fmt: skip


@dataclass
class FallbackFit:
    """A predictor for ops missing from the table, fitted on rows of one kind."""

    kind: str
    method: str
    #: 5-fold cross-validated weighted absolute percentage error (inf: too few rows)
    cv_wape: float
    rows: int
    coef: Any = None
    model: Any = None

    def predict(self, spec: OpSpec) -> float:
        x = _features(spec)
        if self.method == "linear":
            return max(float(np.dot(self.coef, x)), 1e-6)
        if self.method == "power":
            return float(np.exp(np.dot(self.coef, _log_features(spec))))
        return float(np.exp(self.model.predict(np.log1p(np.asarray([x[:2]])))[0]))


def _features(spec: OpSpec) -> np.ndarray:
    return np.array([float(spec.macs), float(spec.bytes_moved), 1.0])


def _log_features(spec: OpSpec) -> np.ndarray:
    """Logs of MACs, bytes moved, and the input and output elements, and a constant."""
    inputs, outputs = math.prod(spec.input_shapes[0]), math.prod(spec.output_shape)
    sizes = np.array([spec.macs, spec.bytes_moved, inputs, outputs], dtype=float)
    return np.array([*np.log1p(sizes), 1.0])


def fit_fallback(kind: str, specs: list[OpSpec], ms: np.ndarray) -> FallbackFit:
    """Compare, by 5-fold cross-validated weighted absolute percentage error (the summed
    absolute error over the summed measured time: what a whole model's sum is off by;
    defined where an op's time is within the per-run overhead, so zero), and keep the
    best: a non-negative linear fit on MACs and bytes moved (``linear``), a power law,
    least squares in logs of MACs, bytes moved and input and output elements
    (``power``, from 8 rows), and gradient boosting on the logs of MACs and bytes
    (``gbr``, from 12 rows)."""
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.model_selection import KFold

    x = np.array([_features(s) for s in specs])
    logs = np.array([_log_features(s) for s in specs])
    log_ms = np.log(np.maximum(ms, 1e-6))  # ops faster than the overhead measure 0

    def fit(method: str, rows: np.ndarray) -> FallbackFit:
        if method == "linear":
            return FallbackFit(kind, method, math.inf, len(rows), coef=nnls(x[rows], ms[rows]))
        if method == "power":
            coef = np.linalg.lstsq(logs[rows], log_ms[rows], rcond=None)[0]
            return FallbackFit(kind, method, math.inf, len(rows), coef=coef)
        gbr = GradientBoostingRegressor(random_state=0, n_estimators=100, max_depth=2)
        gbr.fit(np.log1p(x[rows, :2]), log_ms[rows])
        return FallbackFit(kind, method, math.inf, len(rows), model=gbr)

    n = len(specs)
    methods = [m for m, least in (("linear", 4), ("power", 8), ("gbr", 12)) if n >= least]
    wape = {"linear": math.inf}
    total = float(ms.sum())
    if methods and total > 0:
        folds = list(KFold(n_splits=min(5, n), shuffle=True, random_state=0).split(x))
        for method in methods:
            err = 0.0
            for train, test in folds:
                fitted = fit(method, train)
                err += sum(abs(fitted.predict(specs[i]) - ms[i]) for i in test)
            wape[method] = err / total
    best = min(wape, key=wape.__getitem__)  # ties (too few rows): the linear fit
    chosen = fit(best, np.arange(n))
    chosen.cv_wape = wape[best]
    return chosen


@dataclass
class OpPricer:
    """What each op costs alone on the device of ``table`` (module docstring).

    Args:
        table: the device's table.
        offload: the table of the device that runs the ops ``table`` marks unsupported.
        spec_cache: op specs by table key, as read from the tables' bundle manifests; a
            key names one op whatever table holds it, so the pricers one prices through
            (the offload device's, a few-shot table's base) share one cache.
        gap_glue: let the ``context`` calibration learn the glue of each gap between
            ops from the profiles (a calibration option it reads here; off only to
            compare).
    """

    table: DeviceTable
    offload: DeviceTable | None = None
    spec_cache: dict[str, OpSpec] = field(default_factory=dict, repr=False)
    gap_glue: bool = True
    #: the fallback fit of each op kind and precision (``conv/int8``), fitted when asked
    fallbacks: dict[str, FallbackFit] = field(default_factory=dict)
    #: ``op_cost`` by (key, native) (a key names the sparsity too): a search prices the
    #: same few ops over and over, and a table does not change under it
    _costs: dict[tuple[str, bool], OpCost] = field(default_factory=dict, repr=False)
    _offload_pricer: OpPricer | None = field(default=None, repr=False)
    #: the bundle whose space is priced (``LatencyModel.bind``): the calibration keeps to
    #: that space's models (``calibration_samples``); "" for every model of the table
    space: str = ""
    #: the table's measured uncompressed models by their ops' keys (``measured_model``)
    _baselines: dict[tuple[str, ...], Row] | None = field(default=None, repr=False)
    #: where op specs are read: the table's bundle manifest, then (a few-shot table's
    #: ops are its base's) its base table's
    _manifests: tuple[dict[str, Any], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        base = self.table.base
        self._manifests = (self.table.models, *((base.models,) if base is not None else ()))

    @property
    def overhead_ms(self) -> float:
        """The table's per-run session overhead."""
        return self.table.overhead_ms

    def spec_of(self, key: str) -> OpSpec | None:
        """The op spec behind a table key (from the bundle manifests stored with the table)."""
        spec = self.spec_cache.get(key)
        if spec is None:
            entry = next((m[key] for m in self._manifests if "spec" in m.get(key, {})), None)
            if entry is not None:
                spec = self.spec_cache[key] = OpSpec.from_dict(entry["spec"])
        return spec

    def op_ms(self, row: Row) -> float:
        """A measured op row's price: its median less the per-run session overhead."""
        return max(row.median_ms - self.table.overhead_ms, 0.0)

    def op_cost(self, spec: OpSpec, *, native: bool = False) -> OpCost:
        """What ``spec`` costs on this device: its table row, a fallback fitted on rows of
        its kind, or, for a kind the device cannot run (and an ``offload`` device is
        given), the offload device's cost plus the transfer of its tensors. ``native``
        prices it as if the device ran it (what whole-model calibration sees)."""
        memo = (spec.key, native)
        found = self._costs.get(memo)
        if found is None:
            found = self._costs[memo] = self._op_cost(spec, native)
        return found

    def isolated_ms(self, spec: OpSpec) -> float:
        """``spec``'s price as if this device ran it (what a calibration prices with)."""
        return self.op_cost(spec, native=True).latency_ms

    def chain_ms(self, specs: list[OpSpec]) -> list[float]:
        """Each op's price inside the whole model that runs ``specs`` (a plan's ops in
        graph order), as this device runs it: its ``isolated_ms`` less the layout
        conversions its row paid alone and the whole model does not. Where an op's
        output goes, in the same layout, into the next op that converts its input
        (directly, or through ``PASS_THROUGH`` ops), neither converts: the runtime keeps
        the chain in that layout and converts once where it starts and once where it
        ends (``runner.glue_split`` measures each op's share)."""
        alone = [self.isolated_ms(s) for s in specs]
        if not self.chains:  # a table that records no layouts: every op as it ran alone
            return alone
        prices = list(alone)
        pending: tuple[str, int, float] | None = None  # layout, op, its output's share
        for i, spec in enumerate(specs):
            row = self._glue_row(spec)
            if row is not None:
                if pending is not None and pending[0] == row.layout and row.glue_in_share:
                    prices[pending[1]] -= alone[pending[1]] * pending[2]
                    prices[i] -= alone[i] * row.glue_in_share
                pending = (row.layout, i, row.glue_out_share) if row.glue_out_share else None
            elif spec.op_type not in PASS_THROUGH:
                pending = None
        return prices

    @functools.cached_property
    def chains(self) -> bool:
        """Whether any row records a layout (``chain_ms`` differs from isolated prices)."""
        return any(r.layout for r in self.table.rows)

    def _glue_row(self, spec: OpSpec) -> Row | None:
        """``spec``'s table row where it records a layout the op converts into."""
        row = self.table.get((spec.dense if spec.sparsity else spec).key)
        return row if row is not None and row.status == "ok" and row.layout else None

    def _op_cost(self, spec: OpSpec, native: bool) -> OpCost:
        if not native and spec.kind in self.table.unsupported_types and self.offload is not None:
            return self._offloaded(spec, self.offload)
        row = self.table.get(spec.key)
        if row is None and spec.sparsity > 0:
            # No sparse-kernel row measured: zeros in a dense kernel cost what weights do.
            dense = self.op_cost(spec.dense, native=native)
            return dataclasses.replace(dense, key=spec.key, source=f"{dense.source}-dense")
        if row is not None and row.status == "ok":
            return OpCost(spec.key, spec.kind, self.op_ms(row), "table", energy_mj=row.energy_mj)
        return OpCost(spec.key, spec.kind, self.fallback(spec), "fallback")

    def _offloaded(self, spec: OpSpec, offload: DeviceTable) -> OpCost:
        row = offload.get(spec.key)
        if row is not None and row.status == "ok":
            base = max(row.median_ms - offload.overhead_ms, 0.0)
        else:
            if self._offload_pricer is None:
                self._offload_pricer = OpPricer(offload, spec_cache=self.spec_cache)
            base = self._offload_pricer.fallback(spec)
        gbps = self.table.device_meta.transfer_gbps or DEFAULT_TRANSFER_GBPS
        elements = sum(math.prod(s) for s in spec.input_shapes) + math.prod(spec.output_shape)
        fp32_bytes = 4 * elements
        transfer_ms = fp32_bytes / (gbps * 1e9) * 1e3
        return OpCost(spec.key, spec.kind, base + transfer_ms, "offload", transfer_ms)

    # -- ops the table lacks ------------------------------------------------------------
    def fallback(self, spec: OpSpec) -> float:
        """``spec``'s price from the fallback fit of its kind and precision."""
        return self.fallback_fit(spec).predict(spec)

    def fallback_fit(self, spec: OpSpec) -> FallbackFit:
        """The fallback of ``spec``'s kind and precision, fitted the first time it is asked."""
        kind = f"{spec.kind}/{spec.precision}"
        fit = self.fallbacks.get(kind)
        if fit is None:
            fit = self.fallbacks[kind] = self._fit_kind(spec)
        return fit

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
                ms.append(self.op_ms(r))
        if not specs:
            raise ValueError(
                f"table {self.table.name!r} has no measured op to predict {spec.key!r} from"
            )
        return fit_fallback(f"{spec.kind}/{spec.precision}", specs, np.array(ms))

    def fallback_summary(self) -> dict[str, dict[str, Any]]:
        """Per op kind and precision the table measured (``conv/int8``): the predictor that
        prices that kind's ops missing from the table (``linear`` on MACs and bytes,
        ``power``, a power law in sizes, or ``gbr``, gradient boosting), its 5-fold
        cross-validated weighted absolute percentage error on the table's rows (None:
        too few rows to tell), and how many rows it was fitted on. Empty for a table
        stored without its bundle's op specs."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.table.ops():
            kind = f"{row.op_type}/{row.precision}"
            if kind in out or row.status != "ok" or (spec := self.spec_of(row.key)) is None:
                continue
            fit = self.fallback_fit(spec)
            cv = round(fit.cv_wape, 4) if math.isfinite(fit.cv_wape) else None
            out[kind] = {"method": fit.method, "cv_wape": cv, "rows": fit.rows}
        return dict(sorted(out.items()))

    # -- the table's whole models -----------------------------------------------------
    def calibration_samples(self) -> list[Sample]:
        """The table's measured calibration models, with their ops (and profiles): those
        of the space priced (``space_rows``), where there are enough of them."""
        samples = []
        for row in self.space_rows(self.table.whole_models("calibration")):
            entry = self.table.models.get(row.key)
            if entry is None:
                continue
            specs = [self.spec_of(k) for k in entry["op_keys"]]
            if any(s is None for s in specs):
                continue
            samples.append(
                Sample(
                    specs=[s for s in specs if s is not None],
                    op_nodes=entry.get("op_nodes"),
                    profile=self.table.profiles.get(row.key),
                    measured_ms=row.median_ms,
                )
            )
        return samples

    def space_rows(self, rows: list[Row]) -> list[Row]:
        """The rows of ``space``'s models: those timed beside its uncompressed model, and
        learned ones (measured fronts, stated against none) that run only ops its models
        run; all of ``rows`` where no space is set or fewer than
        ``MIN_CALIBRATION_MODELS`` are its own.

        A device's table holds every space measured on it, and how a space's whole models
        relate to their ops' sum is its own: calibrated on every space's models, the
        MobileNetV2 scenario's plans were priced 10% slow and ResNet-50's 60% fast
        (5-fold cross-validation on 2026-12-03, ``docs/latency-tables.md``)."""
        if not self.space:
            return rows
        tag = baseline_key(self.space)
        ops = {
            k
            for r in self.table.rows
            if r.baseline_key == tag and r.kind != "op"
            for k in self.table.models.get(r.key, {}).get("op_keys", ())
        }
        own = [
            r
            for r in rows
            if r.baseline_key == tag
            or (
                not r.baseline_key
                and r.key in self.table.models
                and set(self.table.models[r.key].get("op_keys", ())) <= ops
            )
        ]
        return own if len(own) >= MIN_CALIBRATION_MODELS else rows

    def measured_model(self, specs: list[OpSpec]) -> Row | None:
        """The table's measured uncompressed model that runs exactly ``specs``, if any:
        every row is stated against it (``_table.against_baseline``), so it is priced
        as measured, not predicted."""
        return self._baseline_rows().get(tuple(s.key for s in specs))

    def space_baseline(self) -> tuple[tuple[str, ...], Row] | None:
        """The op keys and row of the measured uncompressed model of the space priced
        (``space``; the table's only one where none is set), or None."""
        found = [
            (keys, r)
            for keys, r in self._baseline_rows().items()
            if not self.space or bundle_of(r.key) == self.space
        ]
        return found[0] if len(found) == 1 else None

    def _baseline_rows(self) -> dict[tuple[str, ...], Row]:
        """The table's measured uncompressed models by their op keys."""
        if self._baselines is None:  # built once: a search prices every plan through it
            self._baselines = {
                tuple(self.table.models.get(r.key, {}).get("op_keys", ())): r
                for r in self.table.rows
                if r.kind == "baseline" and r.status == "ok"
            }
        return self._baselines

    def energy(self, costs: list[OpCost], latency_ms: float) -> float | None:
        """Energy per inference: the ops' measured energy where every op has one, else
        ``latency_ms`` times the device's active power (None where the table has none)."""
        if costs and all(c.energy_mj is not None for c in costs):
            return float(sum(c.energy_mj or 0.0 for c in costs))
        power = self.table.active_power_w
        return latency_ms * power if power is not None else None
