"""What a search watches in its outcomes beside the loop: the first failures at each rung
(a search that cannot succeed stops instead of failing trial after trial) and an
uncompressed plan that beats the baseline (an under-trained baseline is named once)."""

from __future__ import annotations

import re
from typing import Any

from . import _setup as setup
from ._log import logger
from ._storage import SearchError
from ._trials import ACCURACY

#: a run whose first this many trials (or promotions to one rung) fail with one error
#: stops (exit 2; ``--resume`` after the fix)
STOP_AFTER = 3


class Watch:
    """Reads each finished evaluation (``seen``) for one run of a search."""

    def __init__(self, evaluation: Any) -> None:
        self.evaluation = evaluation
        #: per rung, this run's failures there before its first success
        self._first_failures: dict[int, list[str]] = {}
        self._succeeded: set[int] = set()
        self._hinted = False  # the under-trained baseline is named once

    def seen(self, number: int, plan: dict[str, Any], rung: int, outcome: Any) -> None:
        """Trial ``number`` (``plan``) evaluated at ``rung``: ``outcome`` is its values
        (a ``TrialResult``) or the exception it failed with."""
        if isinstance(outcome, BaseException):
            self._failed(rung, f"{type(outcome).__name__}: {outcome}")
            return
        self._succeeded.add(rung)
        self._under_trained(number, plan, rung, outcome.values.get(ACCURACY))

    def _failed(self, rung: int, error: str) -> None:
        """Stop with a ``SearchError`` when this run's first ``STOP_AFTER`` evaluations at
        ``rung`` all failed with the same error (numbers aside: shapes differ from plan
        to plan). Failed trials stay in the study."""
        if rung in self._succeeded:
            return
        first = error.splitlines()[0] if error else "no message"
        failures = self._first_failures.setdefault(rung, [])
        failures.append(first)
        if len(failures) >= STOP_AFTER and len({re.sub(r"\d+", "N", e) for e in failures}) == 1:
            name = self.evaluation.rungs[rung]
            what = "trials" if rung == 0 else f"promotions to the {name} rung"
            raise SearchError(
                f"the first {STOP_AFTER} {what} all failed with the same error, so the "
                f"search stopped: {first}. Fix the cause, then continue with --resume"
            )

    def _under_trained(
        self, number: int, plan: dict[str, Any], rung: int, value: float | None
    ) -> None:
        """Say once (and in the summary's notes) that the baseline is under-trained when
        the uncompressed plan, fine-tuned at a rung, beats it beyond noise."""
        if self._hinted or value is None or ACCURACY not in self.evaluation.metrics:
            return
        hint = setup.under_trained(self.evaluation, plan, rung, value)
        if hint:
            self._hinted = True
            logger.warning("trial %d: %s", number, hint)
            self.evaluation.notes.append(f"trial {number}: {hint}")
