"""Multi-fidelity promotion: which trials are measured again at a higher rung."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

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

    Args:
        share: the fraction of each rung's front to promote, in (0, 1].
    """

    def __init__(self, *, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share=}")
        self.share = share

    def select(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        out = []
        first = front.objectives[0].name
        for rung in range(rungs - 1):
            members = front.numbers(rung)
            quota = math.ceil(self.share * len(members))
            quota -= sum(1 for n in members if front.records[n].rung > rung)
            waiting = [n for n in members if front.records[n].rung == rung]
            if quota <= 0 or not waiting:
                continue
            waiting.sort(key=lambda n: front.records[n].values(rung)[first])
            picks = np.unique(np.linspace(0, len(waiting) - 1, min(quota, len(waiting))).round())
            out += [(waiting[int(i)], rung + 1) for i in picks]
        return out
