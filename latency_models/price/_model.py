"""Predicting a compressed model's latency (and energy) on a device from its table.

A ``LatencyModel`` is built once as the pipeline's two stages: the op pricer
(``_pricer.OpPricer``: table rows, fallback fits, offloading) and a whole-model predictor
over it, one of two, picked by the table when the model is built:

- ``OwnCalibration``: the table's own calibration models, through the calibration
  ``_choose`` picks by cross-validation (a fitted calibration, a blend, or either wrapped
  in a per-op correction);
- ``FewShot``: a few-shot table's ``_transfer`` from its base device's latency model.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from frontier.spaces import CompressionPlan, SearchSpace

from ..calibrate._calibration import Sample, SumCalibration
from ..calibrate._choose import Choice, FittedCalibration, Predictor, choose
from ..calibrate._correction import Correction
from ..device._table import MIN_CALIBRATION_MODELS, DeviceMeta, DeviceTable, bundle_of
from ..ops._arch import arch_key, space_templates
from ..ops._ops import OpSpec, plan_ops
from ._estimate import LatencyEstimate, OpCost
from ._pricer import FallbackFit, OpPricer
from ._transfer import Transfer, fit_transfer
from ._transfer import summary as transfer_summary


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


def _coverage(costs: list[OpCost]) -> dict[str, int]:
    coverage = {"table": 0, "fallback": 0, "offload": 0, "sparse_as_dense": 0}
    for c in costs:
        source, _, dense = c.source.partition("-")
        coverage[source] += 1
        coverage["sparse_as_dense"] += bool(dense)
    return coverage


@dataclass
class OwnCalibration:
    """Whole-model predictions from the table's own calibration models.

    The op prices' sum plus one overhead, corrected for what isolated kernels pay and a
    whole graph pays once (layout conversions, quantize/dequantize at the edges): by
    per-group scale factors, by in-context op times from the runner's profiles, or by a
    blend of the two best of those, whichever predicts held-out calibration models best;
    then, where it predicts them better still, by a per-op correction learnt from the
    calibration models' residuals. The uncompressed model the table measured is priced
    as measured.
    """

    pricer: OpPricer
    calibrate: bool = True
    correct: bool = True
    #: carry the calibration's miss on the measured uncompressed model to each plan in
    #: the share of its time its ops share with it (``anchor_factor``)
    anchor: bool = False
    #: the calibration ``choose`` picked; None before
    choice: Choice | None = None
    #: by space: the uncompressed model's op keys and log(measured / calibrated)
    _anchors: dict[str, tuple[Counter[str], float] | None] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.choice.name if self.choice is not None else "none"

    def choose(self) -> None:
        """Pick how the per-op sum becomes a whole-model prediction (``_choose.choose``)."""
        samples = self.pricer.calibration_samples()
        self.choice = choose(
            self.pricer, samples, min_models=MIN_CALIBRATION_MODELS, correct=self.correct
        )
        self._anchors.clear()

    def anchor_factor(self, specs: list[OpSpec]) -> float:
        """How much the anchor scales the calibrated prediction of a model that runs
        ``specs``: (measured / calibrated uncompressed model) ** share, ``share`` being
        the part of the model's op time (isolated prices) in ops the uncompressed model
        runs too. 1 for the uncompressed model's exact miss at its own plan, nothing for
        a plan that changed every op. The uncompressed model is timed in every chunk of
        its table (the median of tens of visits), each calibration model once."""
        state = self._anchor_state()
        if state is None:
            return 1.0
        keys, log_miss = state
        left = Counter(keys)
        prices = [self.pricer.isolated_ms(s) for s in specs]
        shared = 0.0
        for spec, ms in zip(specs, prices, strict=True):
            if left[spec.key] > 0:
                left[spec.key] -= 1
                shared += ms
        total = sum(prices)
        return math.exp(log_miss * shared / total) if total > 0 else 1.0

    def _anchor_state(self) -> tuple[Counter[str], float] | None:
        space = self.pricer.space
        if space in self._anchors:
            return self._anchors[space]
        found = self.pricer.space_baseline()
        state = None
        if found is not None and found[0] and self.choice is not None:
            keys, row = found
            specs = [self.pricer.spec_of(k) for k in keys]
            known = [s for s in specs if s is not None]
            if len(known) == len(specs):
                calibrated = self.choice.predictor.predict(self.pricer, known)
                if calibrated > 0 and row.median_ms > 0:
                    state = (Counter(keys), math.log(row.median_ms / calibrated))
        self._anchors[space] = state
        return state

    def summary(self, warnings: list[str]) -> dict[str, Any]:
        """The calibration in use, for ``quality``; too few usable models is a warning."""
        if self.choice is None:
            self.choose()
        samples = len(self.pricer.calibration_samples())
        rows = len(self.pricer.table.whole_models("calibration"))
        if rows and samples < MIN_CALIBRATION_MODELS:
            warnings.append(
                f"{samples} of {rows} calibration models usable (at least "
                f"{MIN_CALIBRATION_MODELS} needed): predictions are the plain sum of ops"
            )
        cv = self.choice.cv_mape if self.choice is not None else {}
        return {
            "method": self.choice.name if self.choice is not None else None,
            "models": samples,
            "cv_mape": {k: round(v, 4) for k, v in cv.items()},
        }

    def predict_ops(self, specs: list[OpSpec], *, as_measured: bool) -> LatencyEstimate:
        if self.calibrate and self.choice is None:
            self.choose()
        pricer = self.pricer
        costs = [pricer.op_cost(s) for s in specs]
        native = [s.dense if s.sparsity else s for s in specs]
        # the layout conversions a chain pays once, not around every op (``chain_ms``)
        shared_ms = sum(map(pricer.isolated_ms, native)) - sum(pricer.chain_ms(native))
        raw = sum(c.latency_ms for c in costs) - shared_ms + pricer.overhead_ms
        if self.calibrate and self.choice is not None:
            # Calibration learnt whole dense models that ran every op here; an offloaded
            # op adds what it costs elsewhere (plus transfers) over its price here, a
            # sparse op what its sparse-kernel row costs over its dense twin.
            latency = self.choice.predictor.predict(pricer, native)
            if self.anchor:
                latency *= self.anchor_factor(native)
            latency += sum(
                c.latency_ms - pricer.isolated_ms(n)
                for s, n, c in zip(specs, native, costs, strict=True)
                if c.source == "offload" or s.sparsity > 0
            )
        else:
            latency = raw
        # the uncompressed model as measured, where the device ran it as priced here (a
        # derived device offloads some of its ops: those it prices, not measures)
        priced_here = all(c.source == "table" for c in costs)
        measured = pricer.measured_model(specs) if as_measured and priced_here else None
        if measured is not None:
            bundle = bundle_of(measured.key)
            return LatencyEstimate(
                latency_ms=measured.median_ms,
                sum_ms=raw,
                ops=tuple(costs),
                coverage=_coverage(costs),
                energy_mj=(  # a GPU's counter measured it; else latency x power
                    measured.energy_mj
                    if measured.energy_mj is not None
                    else pricer.energy([], measured.median_ms)
                ),
                measured_at=pricer.table.bundle_meta(bundle).date or "measured",
                bundle_id=bundle,
            )
        return LatencyEstimate(
            latency_ms=latency,
            sum_ms=raw,
            ops=tuple(costs),
            coverage=_coverage(costs),
            energy_mj=pricer.energy(costs, latency),
        )


@dataclass
class FewShot:
    """Whole-model predictions of a few-shot table: its ``_transfer`` from the latency
    model of its base device, fitted the first time it is asked."""

    pricer: OpPricer
    calibrate: bool = True
    correct: bool = True
    #: a transfer has no calibration of its own (its base's is inside it)
    choice: Choice | None = None
    _transfer: Transfer | None = field(default=None, repr=False)

    def transfer(self) -> Transfer:
        if self._transfer is None:
            table = self.pricer.table
            assert table.base is not None  # LatencyModel builds a FewShot only then
            base = LatencyModel(
                table.base,
                calibrate=self.calibrate,
                correct=self.correct,
                spec_cache=self.pricer.spec_cache,
            )
            ops = [
                (spec, self.pricer.op_ms(row))
                for row in table.ops()
                if row.status == "ok" and (spec := self.pricer.spec_of(row.key)) is not None
            ]
            whole = [(s.specs, s.measured_ms) for s in self.pricer.calibration_samples()]
            self._transfer = fit_transfer(base, ops, table.overhead_ms, whole)
        return self._transfer

    @property
    def name(self) -> str:
        return str(transfer_summary(self.transfer())["method"])

    def summary(self, warnings: list[str]) -> dict[str, Any]:
        transfer = self.transfer()
        return {
            **transfer_summary(transfer),
            "models": len(self.pricer.calibration_samples()),
            "cv_mape": {f"loo {k}": v for k, v in transfer.loo_mape.items()},
        }

    def predict_ops(self, specs: list[OpSpec], *, as_measured: bool) -> LatencyEstimate:
        estimate = self.transfer().predict_ops(specs)
        return dataclasses.replace(estimate, energy_mj=self.pricer.energy([], estimate.latency_ms))


@dataclass
class LatencyModel:
    """Latency of compressed models on one device, from its measured table: the op
    pricer (``pricer``) and the whole-model predictor over it (``whole``: the table's
    own calibration, or a few-shot table's transfer), both built here, once.

    Args:
        table: the device's table.
        offload: the table of the device that runs ops ``table`` marks unsupported.
        calibrate: fit the whole-model calibration when the table has calibration models.
        correct: try the per-op correction of the calibration (kept only where
            cross-validation says it helps).
        gap_glue: let the ``context`` calibration learn the glue of each gap between
            ops from the profiles (off only to compare).
        anchor: scale each calibrated prediction toward the measured uncompressed model
            by the share of ops the plan keeps from it (``OwnCalibration.anchor_factor``).
        spec_cache: op specs by table key, shared with the models one prices through
            (``OpPricer``).
    """

    table: DeviceTable
    offload: DeviceTable | None = None
    calibrate: bool = True
    correct: bool = True
    gap_glue: bool = True
    anchor: bool = False
    spec_cache: dict[str, OpSpec] = field(default_factory=dict, repr=False)
    pricer: OpPricer = field(init=False, repr=False)
    whole: OwnCalibration | FewShot = field(init=False, repr=False)
    _bound: dict[int, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.pricer = OpPricer(self.table, self.offload, self.spec_cache, self.gap_glue)
        if self.table.base is not None:
            self.whole = FewShot(self.pricer, self.calibrate, self.correct)
        else:
            self.whole = OwnCalibration(self.pricer, self.calibrate, self.correct, self.anchor)

    # -- binding models ---------------------------------------------------------------
    def bind(self, model: Any, example_inputs: Any, space: SearchSpace) -> None:
        """Prepare predictions for plans of ``space`` on ``model`` (exports it once), at
        the batch the table's ops were measured at (``op_batch_size``: a GPU device at
        batch 32 prices ops of batch 32). Where the table measured ``model``'s space
        beside others, its calibration keeps to that space's models
        (``OpPricer.space_rows``; the space of the model bound last)."""
        batch = self.table.device_meta.op_batch_size or 1
        half = self.table.device_meta.half  # its 16-bit layers run FP16
        templates = space_templates(model, example_inputs, space, batch_size=batch, half=half)
        self._bound[id(model)] = templates
        plain = CompressionPlan()
        measured = self.pricer.measured_model(plan_ops(templates[arch_key(plain)], plain))
        own = bundle_of(measured.key) if measured is not None else ""
        if own != self.pricer.space and own:
            self.pricer.space = own
            if isinstance(self.whole, OwnCalibration):
                self.whole.choice = None  # chosen again, on this space's models

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

    def device_meta(self, model: Any) -> DeviceMeta:
        """The device as its table measured ``model``'s space (``bind`` it first): that
        space's own date and noise band, where the table holds several spaces' rows."""
        return self.table.bundle_meta(self.predict(model, CompressionPlan()).bundle_id)

    def predict_ops(self, specs: list[OpSpec], *, as_measured: bool = True) -> LatencyEstimate:
        """Predict the latency of a model that runs ``specs`` (the uncompressed model
        its table measured: that measurement, unless ``as_measured`` is False)."""
        return self.whole.predict_ops(specs, as_measured=as_measured)

    # -- the op pricer's ------------------------------------------------------------------
    def op_cost(self, spec: OpSpec, *, native: bool = False) -> OpCost:
        """What ``spec`` costs alone on this device (``OpPricer.op_cost``)."""
        return self.pricer.op_cost(spec, native=native)

    def spec_of(self, key: str) -> OpSpec | None:
        """The op spec behind a table key (``OpPricer.spec_of``)."""
        return self.pricer.spec_of(key)

    @property
    def fallbacks(self) -> dict[str, FallbackFit]:
        """The fallback fits of the op kinds priced so far (``OpPricer.fallbacks``)."""
        return self.pricer.fallbacks

    def fallback_summary(self) -> dict[str, dict[str, Any]]:
        """Each op kind's fallback fit (``OpPricer.fallback_summary``)."""
        return self.pricer.fallback_summary()

    def calibration_samples(self) -> list[Sample]:
        """The table's measured calibration models, with their ops (and profiles)."""
        return self.pricer.calibration_samples()

    # -- the calibration in use -----------------------------------------------------------
    def choose_calibration(self) -> None:
        """Pick how the per-op sum becomes a whole-model prediction (``_choose.choose``:
        the plain sum, the per-group scaled sum, in-context op times or a blend of the
        two best of them, by 5-fold cross-validated MAPE on the calibration models, then
        whether a per-op correction predicts held-out models better still) and refit
        the winner on all of them. A few-shot table has none: its base's is in its
        transfer.

        Blends earn their place on tiny models (tens of microseconds), where the
        profiler's per-node cost is the size of a kernel and neither the profiled nor the
        scaled-sum calibration is clearly better; cross-validation keeps a single
        method wherever it predicts better alone."""
        if isinstance(self.whole, OwnCalibration):
            self.whole.choose()

    @property
    def choice(self) -> Choice | None:
        """The calibration ``choose_calibration`` picked; None before, and for a few-shot
        table."""
        return self.whole.choice

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

    @property
    def calibration_method(self) -> str:
        """The calibration in use (``method``), or a few-shot table's transfer; "none"
        before the first prediction."""
        return self.whole.name

    # -- how well it predicts -------------------------------------------------------------
    def quality(self) -> dict[str, Any]:
        """How this table predicts, for ``lut show``, ``lut import`` and MLflow: the
        calibration in use and its cross-validated MAPE, how many calibration models it
        was fitted on, what lowers it (``warnings``: the table's import warnings, and
        too few calibration models), and, where the device measured validation models,
        the predictions' error on them (``stored_validation``). The last ``lut
        validate`` result is in the table's metadata (``validation``)."""
        warnings = list(self.table.device_meta.import_warnings)
        calibration = self.whole.summary(warnings)
        return {
            "calibration": calibration,
            "warnings": list(dict.fromkeys(warnings)),
            "stored_validation": self.stored_validation(),
            "validation": self.table.device_meta.validation,
        }

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

    def baseline_check(self, model: Any) -> str:
        """A line when the table's prediction of the uncompressed ``model`` (``bind`` it
        first) is further from its measurement than the calibration's cross-validated
        error, "" otherwise (or where it was not measured): the table prices the models
        it was fitted on worse than it says, and the measured baseline is used."""
        templates = self._bound.get(id(model))
        plan = CompressionPlan()
        specs = plan_ops(templates[arch_key(plan)], plan) if templates is not None else []
        measured = self.pricer.measured_model(specs) if specs else None
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
