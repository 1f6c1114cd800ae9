"""Multi-fidelity promotion: which trials are measured again at a higher rung."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from ._config import Constraint
from ._front import Front


class Promotion(ABC):
    """Decides, after each generation, which trials go up a rung."""

    @abstractmethod
    def select(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        """``(trial number, rung to reach)`` pairs; ``rungs`` is how many rungs exist.
        Trials already at or past that rung must not be returned."""


class SpreadPromotion(Promotion):
    """At each rung, a ``share`` of that rung's front goes up, spread evenly along the
    first objective (so the cheap and the accurate ends both get re-measured).

    A cheap rung underestimates accuracy (a small student distilled for a few steps has
    not recovered yet), so a plan that misses an accuracy constraint there by at most
    ``slack`` of the bound still counts for promotion; the front itself keeps the
    constraint, measured at the plan's highest rung.

    A question that asks for one end of the front (the fastest student keeping 95%)
    needs only that end re-measured: ``toward`` names the objective whose best members
    take the quota, and the rest stay at the cheap rung.

    Args:
        share: the fraction of each rung's front to promote, in (0, 1].
        slack: how far below (or above, for ``<=``) an accuracy bound a plan may be at a
            rung below the top and still be promoted, as a share of the bound, in [0, 1).
        toward: an objective's name: promote its best members first; None spreads the
            quota evenly along the first objective.
    """

    def __init__(self, *, share: float, slack: float = 0.0, toward: str | None = None) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share=}")
        if not 0 <= slack < 1:
            raise ValueError(f"slack must be in [0, 1), got {slack=}")
        self.share = share
        self.slack = slack
        self.toward = toward

    def _candidates(self, front: Front) -> Front:
        """The front with its accuracy constraints loosened by ``slack``."""
        if not self.slack:
            return front
        loose = [
            _loosen(c, self.slack) if c.objective == "accuracy" else c for c in front.constraints
        ]
        return Front(front.records, front.objectives, loose)

    def select(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        out = []
        first = front.objectives[0].name
        by = {o.name: o for o in front.objectives}
        if self.toward is not None and self.toward not in by:
            raise ValueError(f"toward: {self.toward!r} is not an objective; one of {list(by)}")
        candidates = self._candidates(front)
        for rung in range(rungs - 1):
            members = candidates.numbers(rung)
            quota = math.ceil(self.share * len(members))
            quota -= sum(1 for n in members if front.records[n].rung > rung)
            waiting = [n for n in members if front.records[n].rung == rung]
            if quota <= 0 or not waiting:
                continue
            if self.toward is not None:  # the quota from the objective's best end
                name = self.toward
                sign = -1.0 if by[name].direction == "maximize" else 1.0
                waiting.sort(key=lambda n: sign * front.records[n].values(rung)[name])
                chosen = waiting[:quota]
            else:  # spread evenly along the first objective
                waiting.sort(key=lambda n: front.records[n].values(rung)[first])
                spread = np.linspace(0, len(waiting) - 1, min(quota, len(waiting))).round()
                chosen = [waiting[int(i)] for i in np.unique(spread)]
            out += [(n, rung + 1) for n in chosen]
        return out


def _loosen(constraint: Constraint, slack: float) -> Constraint:
    """``constraint`` (absolute) with its bound moved ``slack`` of itself towards looser."""
    factor = 1 - slack if constraint.op == ">=" else 1 + slack
    bound = constraint.bound * factor if constraint.bound >= 0 else constraint.bound / factor
    return Constraint(constraint.objective, constraint.op, bound)
