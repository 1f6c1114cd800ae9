"""Predicting a compressed model's latency (and energy) on a device from its table.

A pipeline: the op pricer here (table rows, fallback fits for missing ops, offloading),
then the calibration ``_choose`` picked by cross-validation (``calibrated``: a fitted
calibration, a blend, or either wrapped in a per-op correction); a few-shot table
predicts through its sibling, the ``_transfer`` from its base device.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from frontier.spaces import CompressionPlan, SearchSpace

from ._arch import arch_key, space_templates
from ._calibration import Sample, SumCalibration, nnls
from ._choose import Choice, FittedCalibration, Predictor, choose
from ._correction import Correction
from ._estimate import LatencyEstimate, OpCost
from ._ops import OpSpec, plan_ops
from ._table import MIN_CALIBRATION_MODELS, DeviceTable, Row
from ._transfer import Transfer, fit_transfer
from ._transfer import summary as transfer_summary

DEFAULT_TRANSFER_GBPS = 1.0


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


def _fit_fallback(kind: str, specs: list[OpSpec], ms: np.ndarray) -> FallbackFit:
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


def error_summary(predicted: list[float], measured: list[float]) -> dict[str, Any]:
    """How ``predicted`` latencies agree with ``measured`` ones: their count, the share
    within +/-10%, the mean absolute percentage error and Kendall's tau."""
    from scipy.stats import kendalltau

    pred, meas = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    err = pred / meas - 1
    tau = float(kendalltau(pred, meas)[0]) if len(pred) > 1 else math.nan
    return {
        "samples": len(pred),
        "within_10pct": round(float((np.abs(err) <= 0.10).mean()), 4),
        "mape": round(float(np.abs(err).mean()), 4),
        "kendall_tau": round(tau, 4) if math.isfinite(tau) else None,
    }


#: the whole-model prediction of a table with no calibration: the sum of its ops
PLAIN_SUM: Predictor = FittedCalibration(SumCalibration(), "sum")


@dataclass
class LatencyModel:
    """Latency of compressed models on one device, from its measured table.

    The prediction sums the table's per-op latencies (each corrected for the per-run
    session overhead the table measured) and adds one overhead. With calibration models
    measured on the same device, that sum is corrected for what isolated kernels pay and
    a whole graph pays once (layout conversions, quantize/dequantize at the edges): by
    per-group scale factors, by in-context op times from the runner's profiles, or by a
    blend of the two best of those, whichever predicts held-out calibration models best
    (``method``, ``method_cv``, ``weights``); then, where it predicts them better still,
    by a per-op correction learnt from the calibration models' residuals
    (``correction``, ``_correction``).

    Args:
        table: the device's table.
        offload: the table of the device that runs ops ``table`` marks unsupported.
        calibrate: fit the whole-model calibration when the table has calibration models.
        correct: try the per-op correction of the calibration (kept only where
            cross-validation says it helps).
        gap_glue: let the ``context`` calibration learn the glue of each gap between
            ops from the profiles (off only to compare).
    """

    table: DeviceTable
    offload: DeviceTable | None = None
    calibrate: bool = True
    correct: bool = True
    gap_glue: bool = True
    fallbacks: dict[str, FallbackFit] = field(default_factory=dict)
    #: the calibration ``choose_calibration`` picked (``_choose.Choice``); None before
    choice: Choice | None = field(default=None, repr=False)
    _offload_model: LatencyModel | None = field(default=None, repr=False)
    _transfer: Transfer | None = field(default=None, repr=False)
    _bound: dict[int, Any] = field(default_factory=dict, repr=False)
    #: op specs by table key, as read from the tables' bundle manifests; a key names one
    #: op whatever table holds it, so the models one prices through (its offload
    #: device's, a few-shot table's base) are given the same cache
    spec_cache: dict[str, OpSpec] = field(default_factory=dict, repr=False)
    #: ``op_cost`` by (key, native) (a key names the sparsity too): a search prices the
    #: same few ops over and over, and a model's table does not change under it
    _costs: dict[tuple[str, bool], OpCost] = field(default_factory=dict, repr=False)
    #: the table's measured uncompressed models by their ops' keys (``_measured``)
    _baselines: dict[tuple[str, ...], Row] | None = field(default=None, repr=False)

    # -- binding models ---------------------------------------------------------------
    def bind(self, model: Any, example_inputs: Any, space: SearchSpace) -> None:
        """Prepare predictions for plans of ``space`` on ``model`` (exports it once), at
        the batch the table's ops were measured at (``op_batch_size``: a GPU device at
        batch 32 prices ops of batch 32)."""
        batch = int(self.table.meta.get("op_batch_size", 1) or 1)
        half = bool(self.table.meta.get("half", False))  # its 16-bit layers run FP16
        self._bound[id(model)] = space_templates(
            model, example_inputs, space, batch_size=batch, half=half
        )

    def predict(
        self, model: Any, plan: CompressionPlan, *, as_measured: bool = True
    ) -> LatencyEstimate:
        """Predicted latency of ``model`` compressed by ``plan`` (``bind`` it first); the
        uncompressed model is its measurement where the table has one, unless
        ``as_measured`` is False (``predict_ops``)."""
        templates = self._bound.get(id(model))
        if templates is None:
            raise ValueError(
                "predict(model, plan): bind(model, example_inputs, space) this model first"
            )
        arch = arch_key(plan)
        return self.predict_ops(plan_ops(templates[arch], plan), as_measured=as_measured)

    def _measured(self, specs: list[OpSpec]) -> Row | None:
        """The table's measured uncompressed model that runs exactly ``specs``, if any:
        every row is stated against it (``_table.against_baseline``), so it is priced
        as measured, not predicted."""
        if self._baselines is None:  # built once: predict runs for every plan priced
            self._baselines = {
                tuple(self.table.models.get(r.key, {}).get("op_keys", ())): r
                for r in self.table.rows
                if r.kind == "baseline" and r.status == "ok"
            }
        return self._baselines.get(tuple(s.key for s in specs))

    # -- the arithmetic ---------------------------------------------------------------
    def _op_ms(self, row: Row) -> float:
        return max(row.median_ms - self.table.overhead_ms, 0.0)

    def _fallback(self, spec: OpSpec) -> float:
        return self._fallback_fit(spec).predict(spec)

    def _fallback_fit(self, spec: OpSpec) -> FallbackFit:
        """The fallback of ``spec``'s kind and precision, fitted the first time it is asked."""
        kind = f"{spec.kind}/{spec.precision}"
        fit = self.fallbacks.get(kind)
        if fit is None:
            fit = self.fallbacks[kind] = self._fit_kind(spec)
        return fit

    def spec_of(self, key: str) -> OpSpec | None:
        """The op spec behind a table key (from the bundle manifest stored with the table)."""
        spec = self.spec_cache.get(key)
        if spec is None:
            entry = self.table.models.get(key)
            if (entry is None or "spec" not in entry) and self.table.base is not None:
                entry = self.table.base.models.get(key)
            if entry is not None and "spec" in entry:
                spec = OpSpec.from_dict(entry["spec"])
                self.spec_cache[key] = spec
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
            fit = self._fallback_fit(spec)
            cv = round(fit.cv_wape, 4) if math.isfinite(fit.cv_wape) else None
            out[kind] = {"method": fit.method, "cv_wape": cv, "rows": fit.rows}
        return dict(sorted(out.items()))

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

    def _op_cost(self, spec: OpSpec, native: bool) -> OpCost:
        if not native and spec.kind in self.table.unsupported_types and self.offload is not None:
            row = self.offload.get(spec.key)
            if row is not None and row.status == "ok":
                base = max(row.median_ms - self.offload.overhead_ms, 0.0)
            else:
                if self._offload_model is None:
                    self._offload_model = LatencyModel(
                        self.offload, calibrate=False, spec_cache=self.spec_cache
                    )
                base = self._offload_model._fallback(spec)
            gbps = float(self.table.meta.get("transfer_gbps", DEFAULT_TRANSFER_GBPS))
            fp32_bytes = 4 * (
                sum(math.prod(s) for s in spec.input_shapes) + math.prod(spec.output_shape)
            )
            transfer_ms = fp32_bytes / (gbps * 1e9) * 1e3
            return OpCost(spec.key, spec.kind, base + transfer_ms, "offload", transfer_ms)
        row = self.table.get(spec.key)
        if row is None and spec.sparsity > 0:
            # No sparse-kernel row measured: zeros in a dense kernel cost what weights do.
            dense = self.op_cost(spec.dense, native=native)
            return dataclasses.replace(dense, key=spec.key, source=f"{dense.source}-dense")
        if row is not None and row.status == "ok":
            return OpCost(spec.key, spec.kind, self._op_ms(row), "table", energy_mj=row.energy_mj)
        return OpCost(spec.key, spec.kind, self._fallback(spec), "fallback")

    # -- calibration against whole models -------------------------------------------
    def calibration_samples(self) -> list[Sample]:
        """The table's measured calibration models, with their ops (and profiles)."""
        samples = []
        for row in self.table.whole_models("calibration"):
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

    @property
    def overhead_ms(self) -> float:
        """The table's per-run session overhead (``Pricer``)."""
        return self.table.overhead_ms

    def isolated_ms(self, spec: OpSpec) -> float:
        """``spec``'s table price as if this device ran it (``Pricer``)."""
        return self.op_cost(spec, native=True).latency_ms

    def choose_calibration(self) -> None:
        """Pick how the per-op sum becomes a whole-model prediction (``_choose.choose``:
        the plain sum, the per-group scaled sum, in-context op times or a blend of the
        two best of them, by 5-fold cross-validated MAPE on the calibration models, then
        whether a per-op correction predicts held-out models better still) and refit
        the winner on all of them.

        Blends earn their place on tiny models (tens of microseconds), where the
        profiler's per-node cost is the size of a kernel and neither the profiled nor the
        scaled-sum calibration is clearly better; cross-validation keeps a single
        method wherever it predicts better alone."""
        choice = choose(
            self,
            self.calibration_samples(),
            min_models=MIN_CALIBRATION_MODELS,
            correct=self.correct,
        )
        self.choice = choice

    @property
    def method(self) -> str | None:
        """The calibration in use ("sum", "groups", "context", or a blend of two such as
        "groups+context"); None before ``choose_calibration``."""
        return self.choice.name if self.choice is not None else None

    @property
    def method_cv(self) -> dict[str, float]:
        """Each candidate calibration's cross-validated MAPE."""
        return self.choice.cv_mape if self.choice is not None else {}

    @property
    def weights(self) -> dict[str, float]:
        """The blend's weights of the calibration in use."""
        return self.choice.weights if self.choice is not None else {}

    @property
    def correction(self) -> Correction | None:
        """The per-op correction of the calibration, where cross-validation keeps one."""
        return self.choice.correction if self.choice is not None else None

    @property
    def calibrated(self) -> Predictor:
        """What turns op prices into whole-model latency: the plain sum until
        ``choose_calibration`` runs."""
        return self.choice.predictor if self.choice is not None else PLAIN_SUM

    def quality(self) -> dict[str, Any]:
        """How this table predicts, for ``lut show``, ``lut import`` and MLflow: the
        calibration in use and its cross-validated MAPE, how many calibration models it
        was fitted on, what lowers it (``warnings``: the table's import warnings, and
        too few calibration models), and, where the device measured validation models,
        the predictions' error on them (``stored_validation``). The last ``lut
        validate`` result is in the table's metadata (``validation``)."""
        warnings = list(self.table.meta.get("import_warnings", []))
        if self.table.base is not None:
            transfer = self.transfer()
            calibration = {
                **transfer_summary(transfer),
                "models": len(self.calibration_samples()),
                "cv_mape": {f"loo {k}": v for k, v in transfer.loo_mape.items()},
            }
        else:
            if self.method is None:
                self.choose_calibration()
            samples = len(self.calibration_samples())
            rows = len(self.table.whole_models("calibration"))
            if rows and samples < MIN_CALIBRATION_MODELS:
                warnings.append(
                    f"{samples} of {rows} calibration models usable (at least "
                    f"{MIN_CALIBRATION_MODELS} needed): predictions are the plain sum of ops"
                )
            calibration = {
                "method": self.method,
                "models": samples,
                "cv_mape": {k: round(v, 4) for k, v in self.method_cv.items()},
            }
        return {
            "calibration": calibration,
            "warnings": list(dict.fromkeys(warnings)),
            "stored_validation": self.stored_validation(),
            "validation": self.table.meta.get("validation"),
        }

    @property
    def calibration_method(self) -> str:
        """The calibration in use (``method``), or a few-shot table's transfer; "none"
        before the first prediction."""
        if self.table.base is not None:
            return str(transfer_summary(self.transfer())["method"])
        return self.method or "none"

    def stored_validation(self) -> dict[str, Any] | None:
        """Predictions against the validation models the device measured (from the
        bundle's manifest: the ops of each), or None when the table holds none."""
        pairs = []
        for row in self.table.whole_models("validation"):
            entry = self.table.models.get(row.key)
            specs = [self.spec_of(k) for k in (entry or {}).get("op_keys", [None])]
            if entry is not None and all(s is not None for s in specs):
                pred = self.predict_ops([s for s in specs if s is not None]).latency_ms
                pairs.append((pred, row.median_ms))
        if not pairs:
            return None
        return error_summary([p for p, _ in pairs], [m for _, m in pairs])

    def transfer(self) -> Transfer:
        """A few-shot table's transfer from its base device (``_transfer``), fitted the
        first time it is asked: the sibling predictor such a table predicts with."""
        if self.table.base is None:
            raise ValueError(f"table {self.table.name!r} is not a few-shot table")
        if self._transfer is None:
            base = LatencyModel(
                self.table.base,
                calibrate=self.calibrate,
                correct=self.correct,
                spec_cache=self.spec_cache,
            )
            ops = [
                (spec, self._op_ms(row))
                for row in self.table.ops()
                if row.status == "ok" and (spec := self.spec_of(row.key)) is not None
            ]
            whole = [(s.specs, s.measured_ms) for s in self.calibration_samples()]
            self._transfer = fit_transfer(base, ops, self.table.overhead_ms, whole)
        return self._transfer

    def baseline_check(self, model: Any) -> str:
        """A line when the table's prediction of the uncompressed ``model`` (``bind`` it
        first) is further from its measurement than the calibration's cross-validated
        error, "" otherwise (or where it was not measured): the table prices the models
        it was fitted on worse than it says, and the measured baseline is used."""
        templates = self._bound.get(id(model))
        plan = CompressionPlan()
        specs = plan_ops(templates[arch_key(plan)], plan) if templates is not None else []
        measured = self._measured(specs) if specs else None
        if measured is None:
            return ""
        predicted = self.predict_ops(specs, as_measured=False).latency_ms
        error = predicted / measured.median_ms - 1
        stated = (self.method_cv or {}).get(self.method or "", 0.0)
        if abs(error) <= max(stated if math.isfinite(stated) else 0.0, 0.05):
            return ""
        return (
            f"table {self.table.name!r} predicts the uncompressed model {error:+.1%} off its "
            f"measurement ({predicted:.4g} against {measured.median_ms:.4g} ms; the "
            f"calibration's stated error is {stated:.1%}): speed-ups are taken against the "
            "measurement; `frontier lut validate` checks the rest"
        )

    def predict_ops(self, specs: list[OpSpec], *, as_measured: bool = True) -> LatencyEstimate:
        """Predict the latency of a model that runs ``specs`` (the uncompressed model
        its table measured: that measurement, unless ``as_measured`` is False)."""
        if self.table.base is not None:
            estimate = self.transfer().predict_ops(specs)
            return dataclasses.replace(estimate, energy_mj=self._energy([], estimate.latency_ms))
        if self.calibrate and self.method is None:
            self.choose_calibration()
        costs = [self.op_cost(s) for s in specs]
        overhead = self.table.overhead_ms
        raw = sum(c.latency_ms for c in costs) + overhead
        if self.calibrate and self.method is not None:
            # Calibration learnt whole dense models that ran every op here; an offloaded
            # op adds what it costs elsewhere (plus transfers) over its price here, a
            # sparse op what its sparse-kernel row costs over its dense twin.
            native = [s.dense if s.sparsity else s for s in specs]
            latency = self.calibrated.predict(self, native)
            latency += sum(
                c.latency_ms - self.op_cost(n, native=True).latency_ms
                for s, n, c in zip(specs, native, costs, strict=True)
                if c.source == "offload" or s.sparsity > 0
            )
        else:
            latency = raw
        coverage = {"table": 0, "fallback": 0, "offload": 0, "sparse_as_dense": 0}
        for c in costs:
            source, _, dense = c.source.partition("-")
            coverage[source] += 1
            coverage["sparse_as_dense"] += bool(dense)
        # the uncompressed model as measured, where the device ran it as priced here (a
        # derived device offloads some of its ops: those it prices, not measures)
        priced_here = all(c.source == "table" for c in costs)
        measured = self._measured(specs) if as_measured and priced_here else None
        if measured is not None:
            return LatencyEstimate(
                latency_ms=measured.median_ms,
                sum_ms=raw,
                ops=tuple(costs),
                coverage=coverage,
                energy_mj=(  # a GPU's counter measured it; else latency x power
                    measured.energy_mj
                    if measured.energy_mj is not None
                    else self._energy([], measured.median_ms)
                ),
                measured_at=str(self.table.meta.get("date", "")) or "measured",
            )
        return LatencyEstimate(
            latency_ms=latency,
            sum_ms=raw,
            ops=tuple(costs),
            coverage=coverage,
            energy_mj=self._energy(costs, latency),
        )

    def _energy(self, costs: list[OpCost], latency_ms: float) -> float | None:
        if costs and all(c.energy_mj is not None for c in costs):
            return float(sum(c.energy_mj or 0.0 for c in costs))
        power = self.table.active_power_w
        return latency_ms * power if power is not None else None
