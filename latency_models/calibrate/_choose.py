"""Which calibration a table predicts with: one cross-validation over every way of turning
op prices into whole-model latency.

The candidates are the ``CALIBRATIONS`` (plain sum, per-group scaled sum, in-context op
times), the convex blends of the two best, and, around the winner, an optional per-op
correction (``_correction``). Each is scored by its 5-fold cross-validated MAPE on the
table's measured calibration models, and the winner is refitted on all of them. What
comes out is a ``Predictor``: whole-model latency from a model's ops, a
``FittedCalibration``, a ``Blend`` of them, or a ``Corrected`` one of either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..ops._ops import OpSpec
from ._calibration import CALIBRATIONS, Calibration, Pricer, Sample, candidates
from ._correction import ALPHAS as CORRECTION_ALPHAS
from ._correction import Correction, fit_correction

#: Fewest calibration models a per-op correction is tried with.
MIN_CORRECTION_MODELS = 20
#: Blend weights of the two best calibrations tried (the better one's share).
BLEND_WEIGHTS = ((0.5, ""), (0.75, " (3:1)"))


class Predictor(Protocol):
    """Whole-model latency (ms) of a model running ``specs``, priced by ``pricer``."""

    def predict(self, pricer: Pricer, specs: Sequence[OpSpec]) -> float: ...


@dataclass(frozen=True)
class FittedCalibration:
    """One calibration and the state it fitted."""

    calibration: Calibration
    state: Any

    def predict(self, pricer: Pricer, specs: Sequence[OpSpec]) -> float:
        return self.calibration.predict(pricer, self.state, list(specs))


@dataclass(frozen=True)
class Blend:
    """A convex blend of fitted calibrations: ``sum_i w_i * prediction_i``."""

    parts: tuple[tuple[float, FittedCalibration], ...]

    def predict(self, pricer: Pricer, specs: Sequence[OpSpec]) -> float:
        return sum(w * part.predict(pricer, specs) for w, part in self.parts)


@dataclass(frozen=True)
class Corrected:
    """A predictor plus a per-op correction of what it leaves (``_correction``)."""

    inner: Predictor
    correction: Correction

    def predict(self, pricer: Pricer, specs: Sequence[OpSpec]) -> float:
        return self.inner.predict(pricer, specs) + self.correction.delta_ms(specs)


@dataclass
class Choice:
    """The outcome of ``choose``.

    Attributes:
        name: the winner ("sum", "groups", "context", a blend such as "groups+context",
            with ", per-op corrected" where the correction was kept).
        predictor: the winner refitted on every calibration model.
        cv_mape: each candidate's cross-validated MAPE, by name.
        weights: the winning calibrations by name, with their blend weights.
        fitted: the winning calibrations' fitted states, by name.
        correction: the per-op correction, where kept.
    """

    name: str
    predictor: Predictor
    cv_mape: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    fitted: dict[str, Any] = field(default_factory=dict)
    correction: Correction | None = None


def _predictor(weights: dict[str, float], states: dict[str, Any]) -> Predictor:
    parts = tuple((w, FittedCalibration(CALIBRATIONS[m], states[m])) for m, w in weights.items())
    return parts[0][1] if len(parts) == 1 else Blend(parts)


def choose(
    pricer: Pricer, samples: list[Sample], *, min_models: int, correct: bool = True
) -> Choice:
    """The calibration that predicts held-out ``samples`` best (module docstring). With
    fewer than ``min_models`` samples: the plain sum. ``correct`` tries the per-op
    correction from ``MIN_CORRECTION_MODELS`` samples."""
    from sklearn.model_selection import KFold

    measured = np.array([s.measured_ms for s in samples])
    cv: dict[str, float] = {}
    oof: dict[str, np.ndarray] = {}
    fold_states: dict[str, list[Any]] = {}
    folds: list[Any] = []
    if len(samples) >= min_models:
        folds = list(KFold(n_splits=5, shuffle=True, random_state=0).split(samples))
        for name, calibration in candidates(pricer).items():
            states = [calibration.fit(pricer, [samples[i] for i in train]) for train, _ in folds]
            if any(s is None for s in states):
                continue
            pred = np.empty(len(samples))
            for (_, test), state in zip(folds, states, strict=True):
                for i in test:
                    pred[i] = calibration.predict(pricer, state, samples[i].specs)
            oof[name], fold_states[name] = pred, states
            cv[name] = _mape(pred, measured)
    best, weights = "sum", {"sum": 1.0}
    if oof:
        best, weights = _best(oof, measured, cv, lambda name: True)
        if any(CALIBRATIONS[m].flexible for m in weights):
            plain = _best(oof, measured, cv, lambda name: not CALIBRATIONS[name].flexible)
            if not _beats(oof, weights, plain[1], measured):
                best, weights = plain
    fitted = {m: CALIBRATIONS[m].fit(pricer, samples) for m in weights}
    choice = Choice(best, _predictor(weights, fitted), cv, weights, fitted)
    if correct and len(samples) >= MIN_CORRECTION_MODELS and oof:
        per_fold = [
            _predictor(weights, {m: fold_states[m][k] for m in weights}) for k in range(len(folds))
        ]
        _try_correction(pricer, samples, folds, per_fold, measured, choice)
    return choice


def _blend(oof: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    return np.asarray(sum(w * oof[m] for m, w in weights.items()))


def _best(
    oof: dict[str, np.ndarray],
    measured: np.ndarray,
    cv: dict[str, float],
    allowed: Callable[[str], bool],
) -> tuple[str, dict[str, float]]:
    """The ``allowed`` calibration, or convex blend of the two best of them, with the
    lowest cross-validated MAPE (each blend's is added to ``cv``)."""
    ranked = sorted((n for n in oof if allowed(n)), key=cv.__getitem__)
    if not ranked:
        return "sum", {"sum": 1.0}
    best, weights = ranked[0], {ranked[0]: 1.0}
    if len(ranked) >= 2:
        # convex blends of the two best, judged on the same out-of-fold predictions
        a, b = ranked[:2]
        for w, suffix in BLEND_WEIGHTS:
            name = f"{a}+{b}{suffix}"
            cv[name] = _mape(_blend(oof, {a: w, b: 1 - w}), measured)
            if cv[name] < cv[best]:
                best, weights = name, {a: w, b: 1 - w}
    return best, weights


def _beats(
    oof: dict[str, np.ndarray],
    weights: dict[str, float],
    other: dict[str, float],
    measured: np.ndarray,
) -> bool:
    """Whether the calibration ``weights`` predicts held-out models better than ``other``
    by more than one standard error of the paired gain in relative error."""
    gain = np.abs(_blend(oof, other) / measured - 1) - np.abs(_blend(oof, weights) / measured - 1)
    return _real_gain(gain)


def _real_gain(gain: np.ndarray) -> bool:
    """Whether a paired gain per held-out model is more than one standard error above
    nothing: with many candidates and tens of models, a small CV gain is often luck."""
    return bool(gain.mean() > gain.std(ddof=1) / np.sqrt(len(gain)))


def _mape(pred: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / measured - 1)))


def _try_correction(
    pricer: Pricer,
    samples: list[Sample],
    folds: list[Any],
    per_fold: list[Predictor],
    measured: np.ndarray,
    choice: Choice,
) -> None:
    """Wrap ``choice`` in a per-op correction where, with the ridge strength
    cross-validation picks, it predicts held-out models better. Each fold corrects the
    calibration fitted on its training models, as the final fit corrects the one fitted
    on all of them."""
    specs = [s.specs for s in samples]
    base = [np.array([p.predict(pricer, s) for s in specs]) for p in per_fold]
    uncorrected = np.empty(len(samples))
    for (_, test), calibrated in zip(folds, base, strict=True):
        uncorrected[test] = calibrated[test]
    before = np.abs(uncorrected / measured - 1)
    best: tuple[float, float, np.ndarray] | None = None
    for alpha in CORRECTION_ALPHAS:
        pred = np.empty(len(samples))
        for (train, test), calibrated in zip(folds, base, strict=True):
            train_specs = [specs[i] for i in train]
            fit = fit_correction(train_specs, calibrated[train], measured[train], alpha)
            for i in test:
                pred[i] = calibrated[i] + fit.delta_ms(specs[i])
        after = np.abs(pred / measured - 1)
        if best is None or after.mean() < best[0]:
            best = (float(after.mean()), alpha, after)
    if best is None:
        return
    # kept only where it helps by more than one standard error of the paired gain:
    # with hundreds of op keys and tens of models, a small CV gain is often luck
    if not _real_gain(before - best[2]):
        return
    calibrated = np.array([choice.predictor.predict(pricer, s) for s in specs])
    choice.correction = fit_correction(specs, calibrated, measured, best[1])
    choice.predictor = Corrected(choice.predictor, choice.correction)
    choice.name = f"{choice.name}, per-op corrected"
    choice.cv_mape[choice.name] = best[0]
