"""Two instant objectives for ``bench_driver.py``: numbers drawn from a hash of the plan,
so a trial costs the driver's bookkeeping and nothing else. A plugin (``plugins:``), so
worker processes and Ray workers register them too."""

from __future__ import annotations

import hashlib
import json

from frontier.evaluators import (
    MINIMIZE,
    Candidate,
    EvalSetup,
    Evaluator,
    Measurement,
    register_evaluator,
)


def _draw(candidate: Candidate, salt: str) -> float:
    text = json.dumps(candidate.plan.to_dict(), sort_keys=True) + salt
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


@register_evaluator("instant_a")
class InstantA(Evaluator):
    name, unit, direction = "instant_a", "units", MINIMIZE

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        return Measurement(_draw(candidate, "a"), self.unit, "exact", 0.0, {})


@register_evaluator("instant_b")
class InstantB(Evaluator):
    name, unit, direction = "instant_b", "units", MINIMIZE

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        # the two objectives trade off: a front of several members, as a real search has
        return Measurement(
            1.0 - _draw(candidate, "a") ** 0.5 + 0.1 * _draw(candidate, "b"),
            self.unit,
            "exact",
            0.0,
            {},
        )
