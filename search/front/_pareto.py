"""Pareto fronts and hypervolume over named objectives with directions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MINIMIZE, MAXIMIZE = "minimize", "maximize"
#: every objective, normalised by the baseline so that 1.0 is the uncompressed model's
#: cost (or zero accuracy), is bounded by this reference point
REFERENCE = 1.1


@dataclass(frozen=True)
class Objective:
    """An objective's name (``latency_ms@local-cpu``) and direction."""

    name: str
    direction: str

    def __post_init__(self) -> None:
        if self.direction not in (MINIMIZE, MAXIMIZE):
            raise ValueError(f"direction must be minimize or maximize, got {self.direction!r}")


def _as_losses(values: np.ndarray, objectives: Sequence[Objective]) -> np.ndarray:
    signs = np.array([1.0 if o.direction == MINIMIZE else -1.0 for o in objectives])
    return np.asarray(values, dtype=float) * signs


def pareto_mask(values: np.ndarray, objectives: Sequence[Objective]) -> np.ndarray:
    """Which rows of ``values`` (candidates x objectives) no other row dominates
    (moocore's non-dominated filter).

    Rows with a NaN are never on the front; duplicates are all kept.
    """
    import moocore

    losses = _as_losses(values, objectives).reshape(-1, len(objectives))
    mask = np.zeros(len(losses), dtype=bool)
    ok = ~np.isnan(losses).any(axis=1)
    if ok.any():
        mask[ok] = moocore.is_nondominated(losses[ok], keep_weakly=True)
    return mask


def normalise(
    values: np.ndarray, objectives: Sequence[Objective], baseline: Sequence[float]
) -> np.ndarray:
    """Objectives as losses relative to the uncompressed baseline: ``value / baseline``
    for costs, ``1 - value / baseline`` for what is maximised (accuracy)."""
    values = np.asarray(values, dtype=float).reshape(-1, len(objectives))
    out = np.empty_like(values)
    for j, (o, base) in enumerate(zip(objectives, baseline, strict=True)):
        scale = abs(base) if base else 1.0
        out[:, j] = values[:, j] / scale if o.direction == MINIMIZE else 1.0 - values[:, j] / scale
    return out


def hypervolume(
    values: np.ndarray,
    objectives: Sequence[Objective],
    baseline: Sequence[float],
    reference: float = REFERENCE,
) -> float:
    """Hypervolume of ``values`` normalised by ``baseline`` (see ``normalise``) against
    the point ``reference`` on every axis (moocore); points beyond it add nothing."""
    losses = normalise(values, objectives, baseline)
    return loss_hypervolume(losses[~np.isnan(losses).any(axis=1)], reference)


def loss_hypervolume(losses: np.ndarray, reference: float = REFERENCE) -> float:
    """Hypervolume of normalised ``losses`` (rows) against ``reference`` on every axis
    (moocore); rows beyond it add nothing."""
    import moocore

    losses = losses[np.all(losses < reference, axis=1)]
    if len(losses) == 0:
        return 0.0
    return float(moocore.hypervolume(losses, ref=np.full(losses.shape[1], reference)))
