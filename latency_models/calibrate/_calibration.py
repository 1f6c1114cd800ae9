"""How a table's per-op sum becomes a whole-model prediction: calibrations fitted on
the whole models a device measured, each a class behind one small protocol, so
``_choose`` cross-validates them (and blends of them) by one function and a new
calibration is one class added to ``CALIBRATIONS``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..ops._ops import OpSpec
from ._context import boundary_features, fit_context

#: Feature groups of the ``groups`` calibration: the per-op sums of each are scaled.
CALIBRATION_GROUPS = ("conv", "dwconv", "linear", "other")


@dataclass
class Sample:
    """One measured calibration model."""

    specs: list[OpSpec]
    op_nodes: list[list[str]] | None
    profile: dict[str, Any] | None
    measured_ms: float


class Pricer(Protocol):
    """What a calibration asks of the op pricer (``_pricer.OpPricer``)."""

    gap_glue: bool

    @property
    def overhead_ms(self) -> float: ...

    def isolated_ms(self, spec: OpSpec) -> float: ...

    def chain_ms(self, specs: list[OpSpec]) -> list[float]: ...

    @property
    def chains(self) -> bool:
        """Whether any row records a layout, so chain prices differ from isolated ones."""
        ...


class Calibration(Protocol):
    """A way to turn op prices into whole-model latency, fitted on ``Sample``s.

    ``flexible``: it fits more freedom than the rest (an intercept of its own), so
    ``_choose`` takes it only where it beats the best of the others by more than one
    standard error: on fresh ResNet-18 tables the affine line won cross-validation by
    a little and then predicted plain-loop speed-ups worse (85% and 75% within 10%,
    against 95% and 95%).
    """

    name: str
    flexible: bool

    def fit(self, pricer: Pricer, samples: list[Sample]) -> Any:
        """The fitted state, or None where these samples cannot fit it."""

    def predict(self, pricer: Pricer, fitted: Any, specs: list[OpSpec]) -> float:
        """Whole-model latency (ms) of a model running ``specs``."""


def op_prices(pricer: Pricer, specs: list[OpSpec], *, chain: bool = True) -> list[float]:
    """Each op's price: in the chain (``chain_ms``), or as its row ran alone."""
    return pricer.chain_ms(specs) if chain else [pricer.isolated_ms(s) for s in specs]


def group_sums(pricer: Pricer, specs: list[OpSpec], *, chain: bool = True) -> np.ndarray:
    """The summed op prices (``op_prices``) of each of ``CALIBRATION_GROUPS``."""
    sums = dict.fromkeys(CALIBRATION_GROUPS, 0.0)
    for spec, ms in zip(specs, op_prices(pricer, specs, chain=chain), strict=True):
        group = spec.kind if spec.kind in sums else "other"
        sums[group] += ms
    return np.array([sums[g] for g in CALIBRATION_GROUPS])


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares with columns scaled to 1 (``x`` may mix ms and counts)."""
    from scipy.optimize import nnls as _nnls

    scale = np.maximum(np.abs(x).max(axis=0), 1e-12)
    coef, _ = _nnls(x / scale, y)
    return np.asarray(coef / scale)


class SumCalibration:
    """The plain sum of the op prices in the chain (``chain_ms``; ``chain=False``: as
    each row ran alone, ``isolated-sum``) plus one per-run overhead."""

    flexible = False

    def __init__(self, chain: bool = True) -> None:
        self.chain = chain
        self.name = "sum" if chain else "isolated-sum"

    def fit(self, pricer: Pricer, samples: list[Sample]) -> Any:
        return self.name

    def predict(self, pricer: Pricer, fitted: Any, specs: list[OpSpec]) -> float:
        return sum(op_prices(pricer, specs, chain=self.chain)) + pricer.overhead_ms


class GroupsCalibration:
    """Each op group's sum (conv, depthwise conv, linear, other; of prices in the chain,
    or with ``chain=False`` as each row ran alone, ``isolated-groups``) scaled by a
    factor fitted by non-negative least squares: latency ~ overhead + sum_g coef_g *
    sum_g."""

    flexible = False

    def __init__(self, chain: bool = True) -> None:
        self.chain = chain
        self.name = "groups" if chain else "isolated-groups"

    def fit(self, pricer: Pricer, samples: list[Sample]) -> dict[str, float] | None:
        if len(samples) < len(CALIBRATION_GROUPS) + 2:
            return None
        x = np.array([group_sums(pricer, s.specs, chain=self.chain) for s in samples])
        y = np.array([s.measured_ms - pricer.overhead_ms for s in samples])
        used = x.sum(axis=0) > 0
        coef = np.ones(len(CALIBRATION_GROUPS))
        coef[used] = nnls(x[:, used], y)
        return dict(zip(CALIBRATION_GROUPS, map(float, coef), strict=True))

    def predict(self, pricer: Pricer, fitted: Any, specs: list[OpSpec]) -> float:
        coef = np.array([fitted.get(g, 1.0) for g in CALIBRATION_GROUPS])
        return float(group_sums(pricer, specs, chain=self.chain) @ coef) + pricer.overhead_ms


class AffineCalibration:
    """A line with its own intercept through each op group's sum (``GroupsCalibration``'s
    sums, in the chain or, ``chain=False``, as each row ran alone) and the plan's number
    of precision boundaries: latency ~ intercept + sum_g coef_g * sum_g + boundary_ms *
    boundaries, fitted to the calibration models' relative errors.

    Its intercept may come out below the per-run overhead: an op timed alone carries a
    fixed cost a whole graph does not pay once per op, and a line held through the
    overhead then tilts to meet it, pricing fast plans slow and slow plans fast (fresh
    tables of MNASNet and RegNet priced the fastest plans 15-45% slow). The group and
    boundary coefficients stay non-negative: no op and no boundary makes a model faster.
    """

    flexible = True

    def __init__(self, chain: bool = True) -> None:
        self.chain = chain
        self.name = "affine" if chain else "isolated-affine"

    def _x(self, pricer: Pricer, specs: list[OpSpec]) -> np.ndarray:
        boundaries = boundary_features(specs)[2]
        return np.array([*group_sums(pricer, specs, chain=self.chain), boundaries, 1.0])

    def fit(self, pricer: Pricer, samples: list[Sample]) -> dict[str, Any] | None:
        from scipy.optimize import lsq_linear

        n_cols = len(CALIBRATION_GROUPS) + 2
        if len(samples) < n_cols + 2:
            return None
        x = np.array([self._x(pricer, s.specs) for s in samples])
        y = np.array([s.measured_ms for s in samples])
        used = np.abs(x).sum(axis=0) > 0
        # relative errors: each model's row divided by its latency
        xw, yw = x[:, used] / y[:, None], np.ones(len(y))
        scale = np.maximum(np.abs(xw).max(axis=0), 1e-12)
        lower = np.where(np.arange(n_cols)[used] == n_cols - 1, -np.inf, 0.0)
        fit = lsq_linear(xw / scale, yw, bounds=(lower, np.full(len(lower), np.inf)))
        coef = np.zeros(n_cols)
        coef[used] = fit.x / scale
        return {
            "coef": dict(zip(CALIBRATION_GROUPS, map(float, coef[:-2]), strict=True)),
            "boundary_ms": float(coef[-2]),
            "intercept_ms": float(coef[-1]),
        }

    def predict(self, pricer: Pricer, fitted: Any, specs: list[OpSpec]) -> float:
        coef = np.array(
            [
                *(fitted["coef"].get(g, 1.0) for g in CALIBRATION_GROUPS),
                fitted["boundary_ms"],
                fitted["intercept_ms"],
            ]
        )
        # a whole model never runs in less than one run's overhead
        return max(float(self._x(pricer, specs) @ coef), pricer.overhead_ms)


class ContextCalibration:
    """In-context op times and gap glue from the profiled calibration models
    (``_context``); prices by the table only the ops no calibration model ran."""

    name = "context"
    flexible = False

    def fit(self, pricer: Pricer, samples: list[Sample]) -> Any:
        profiled = [
            (s.specs, s.op_nodes, s.profile, s.measured_ms)
            for s in samples
            if s.profile is not None and s.op_nodes is not None
        ]
        return fit_context(profiled, pricer.isolated_ms, gaps=pricer.gap_glue)

    def predict(self, pricer: Pricer, fitted: Any, specs: list[OpSpec]) -> float:
        return float(fitted.predict(specs, pricer.isolated_ms))


#: The calibrations ``LatencyModel.choose_calibration`` cross-validates, by name. The
#: sums of isolated prices stay candidates: where other costs of a whole graph (cache
#: misses, precision boundaries) outweigh the layout conversions a chain shares, the
#: isolated sum can predict whole models better, and cross-validation says which.
CALIBRATIONS: dict[str, Calibration] = {
    c.name: c
    for c in (
        SumCalibration(),
        SumCalibration(chain=False),
        GroupsCalibration(),
        GroupsCalibration(chain=False),
        AffineCalibration(),
        AffineCalibration(chain=False),
        ContextCalibration(),
    )
}


def candidates(pricer: Pricer) -> dict[str, Calibration]:
    """The ``CALIBRATIONS`` worth cross-validating on ``pricer``'s table: without layout
    rows the isolated sums are the chain sums, and a tie would crowd a blend out."""
    return {
        name: c for name, c in CALIBRATIONS.items() if pricer.chains or getattr(c, "chain", True)
    }
