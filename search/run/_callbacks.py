"""What a search tells the outside world as it goes: a base class with do-nothing hooks,
and the built-in listeners (progress output, the search's own energy and carbon).
MLflow is one more callback (``MlflowCallback``). Pass your own with
``frontier.search.run(config, callbacks=[...])``."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from .._log import logger, requiet
from ..trials._view import SearchView

if TYPE_CHECKING:
    from ..front._front import TrialRecord


class Callback:
    """Hooks a search calls on the driver's thread, in this order: ``on_start`` once the
    study, baseline and records are ready; ``on_trial`` per finished trial (complete or
    failed); ``on_promotion`` per re-measurement at a higher rung; ``on_generation`` every
    ``search.population`` trials (``final`` at the end); ``on_finish`` with the status
    (``FINISHED``, ``KILLED`` or ``FAILED``), also when the search is interrupted.

    Each hook does nothing by default. A hook that raises stops the search: catch what
    must not."""

    def on_start(self, search: SearchView) -> None:
        """The search is about to ask for its first trial."""

    def on_trial(self, search: SearchView, record: TrialRecord) -> None:
        """A trial finished; ``record.state`` says how."""

    def on_promotion(self, search: SearchView, record: TrialRecord, rung: int) -> None:
        """``record`` was measured at ``rung`` (``record.rungs[rung]`` is {} if that
        failed)."""

    def on_generation(self, search: SearchView, final: bool) -> None:
        """A generation ended; ``search.front`` is current."""

    def on_finish(self, search: SearchView, status: str) -> None:
        """The loop ended (also by an exception)."""


def _status(search: SearchView) -> str:
    front = search.front.numbers()
    return f"front {len(front)}  HV {search.hypervolume:.4f}"


class ProgressBar(Callback):
    """A rich progress bar on stderr: trials, front size and hypervolume."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._shown = 0.0

    def on_start(self, search: SearchView) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("search"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._task = self._bar.add_task(
            "search", total=search.config.search.trials, completed=search.done, info=""
        )
        self._bar.start()

    def on_trial(self, search: SearchView, record: TrialRecord) -> None:
        if self._bar is not None and time.monotonic() - self._shown > 0.5:
            self._shown = time.monotonic()
            self._bar.update(self._task, completed=search.done, info=_status(search))

    def on_finish(self, search: SearchView, status: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=search.done, info=_status(search))
            self._bar.stop()


class ProgressLines(Callback):
    """One line on stderr per generation, for logs and pipes (no terminal to redraw)."""

    def __init__(self) -> None:
        self._started = time.monotonic()

    def on_start(self, search: SearchView) -> None:
        self._started = time.monotonic()

    def on_generation(self, search: SearchView, final: bool) -> None:
        failed = sum(1 for r in search.records.values() if r.state == "failed")
        step = "after the last trial" if final else f"generation {search.generation}"
        logger.info(
            "%s: %d/%d trials (%d failed), %s, %.0f s",
            step, search.done, search.config.search.trials, failed,
            _status(search), time.monotonic() - self._started,
        )  # fmt: skip


def progress_callbacks(progress: bool | str) -> list[Callback]:
    """``True``: a bar on a terminal, a line per generation otherwise; ``"lines"``: lines
    always; ``False``: nothing."""
    if progress == "lines" or (progress and not sys.stderr.isatty()):
        return [ProgressLines()]
    return [ProgressBar()] if progress else []


class Emissions(Callback):
    """The search's own energy and carbon, measured by CodeCarbon offline; on finish
    they join ``search.summary`` (``search_co2e_g``, ``search_energy_kwh``). Carbon
    accounting never stops a search: without CodeCarbon it says so and does nothing."""

    def __init__(self, country_iso: str) -> None:
        self.country_iso = country_iso
        self._tracker: Any = None

    def on_start(self, search: SearchView) -> None:
        import logging

        try:
            from codecarbon import OfflineEmissionsTracker

            # CodeCarbon logs at INFO every 15 s and resets its level on creation
            logging.getLogger("codecarbon").setLevel(logging.ERROR)
            self._tracker = OfflineEmissionsTracker(
                country_iso_code=self.country_iso, save_to_file=False, log_level="error"
            )
            logging.getLogger("codecarbon").setLevel(logging.ERROR)
            requiet()
            self._tracker.start()
        except Exception as err:
            logger.warning("CodeCarbon unavailable (%s); no search energy logged", err)

    def on_finish(self, search: SearchView, status: str) -> None:
        if self._tracker is None:
            return
        kg = self._tracker.stop() or 0.0
        data = self._tracker.final_emissions_data
        search.summary["search_co2e_g"] = float(kg) * 1000.0
        search.summary["search_energy_kwh"] = float(getattr(data, "energy_consumed", 0) or 0)
