"""What a search watches in its outcomes beside the loop: the first failures at each rung
(a search that cannot succeed stops instead of failing trial after trial) and an
uncompressed plan that beats the baseline (an under-trained baseline is named once)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from .._log import logger
from ..study._storage import SearchError
from ..trials._trials import ACCURACY
from . import _setup as setup

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
        #: where the weights of the uncompressed plan that beat the baseline were saved
        #: (``task.teacher`` of the next search), once the hint fired
        self.teacher_file: Path | None = None

    def seen(self, number: int, plan: dict[str, Any], rung: int, outcome: Any) -> None:
        """Trial ``number`` (``plan``) evaluated at ``rung``: ``outcome`` is its values
        (a ``TrialResult``) or the exception it failed with."""
        if isinstance(outcome, BaseException):
            self._failed(rung, f"{type(outcome).__name__}: {outcome}")
            return
        self._succeeded.add(rung)
        self._under_trained(number, plan, rung, outcome)

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

    def _under_trained(self, number: int, plan: dict[str, Any], rung: int, outcome: Any) -> None:
        """Say once (and in the summary's notes) that the baseline is under-trained when
        the uncompressed plan, fine-tuned at a rung, beats it beyond noise; save that
        model's weights as the next search's teacher."""
        value = outcome.values.get(ACCURACY)
        if self._hinted or value is None or ACCURACY not in self.evaluation.metrics:
            return
        hint = setup.under_trained(self.evaluation, plan, rung, value)
        if hint:
            self._hinted = True
            self.teacher_file = self._save_teacher(number, getattr(outcome, "weights", None))
            if self.teacher_file is not None:
                hint += f" (its weights: {self.teacher_file}; see task.teacher)"
            logger.warning("trial %d: %s", number, hint)
            self.evaluation.notes.append(f"trial {number}: {hint}")

    def _save_teacher(self, number: int, weights: bytes | None) -> Path | None:
        """Write trial ``number``'s fine-tuned weights to the working directory, where
        they load into the baseline model (else None: nothing is offered)."""
        from frontier.experiments import load_weights

        if not weights:
            return None
        path = Path.cwd() / f"teacher-{self.evaluation.config.name}-trial-{number}.pt"
        try:
            path.write_bytes(weights)
            load_weights(copy.deepcopy(self.evaluation.teacher), path)
        except Exception as err:  # the hint stands without the offer
            logger.info("trial %d's weights are not offered as a teacher: %s", number, err)
            path.unlink(missing_ok=True)
            return None
        return path
