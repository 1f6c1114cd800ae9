"""The search loop: ask the sampler, submit to a backend, tell the study, notify the
callbacks. Storage (``_storage``), the front (``_front``), promotion (``_promotion``),
MLflow (``_mlflow``), progress (``_callbacks``) and timing (``_timing``) live in their
own modules; ``_setup`` assembles the default callbacks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .._interrupt import StopRequest
from .._log import logger, show_messages
from ..config._config import Config
from ..front._front import Front, SearchResult, TrialRecord, plan_key
from ..front._pareto import Objective
from ..study._storage import (
    FINISHED_ATTR,
    GENERATION_ATTR,
    PROMOTION_ATTR,
    RUN_ATTR,
    DiskFull,
    StudyStore,
    disk_full,
    restore,
)
from ..tracking._tracking import no_telemetry
from ..trials._backends import Backend, Job, Pending, build_backend
from ..trials._promotion import Promotion, finishing
from ..trials._samplers import ask_unique
from ..trials._trials import ACCURACY, TrialResult, TrialRunner
from . import _setup as setup
from ._callbacks import Callback
from ._report import SearchReport, search_report
from ._timing import Timing
from ._watch import Watch


class Search:
    """One search: build it from a config (cheap: the config is read and checked), then
    ``run()``, which calls ``prepare()`` (the task, its trained baseline, the space, the
    evaluators and the device tables, with progress lines), opens the study and runs its
    trials. ``report()`` tells what it found beside its front.

    Args:
        config: a ``Config``, a path or a built-in name.
        trials, backend, address, workers: override the config's values.
        resume: continue the latest study of this config instead of starting a new one.
        new: start a new study even where the config's latest one stopped short of its
            budget (without it, that is refused: resume it or say ``new``).
        progress: True: a bar on a terminal, else a line per generation; ``"lines"``;
            False: none. store: the DeviceStore for device tables.
        initial: parameter sets tried first, in order (a new study only).
        sampler: an Optuna sampler object instead of ``search.sampler`` (one that is
            ``SearchAware`` is bound to the search before the first trial).
        callbacks: more ``Callback`` objects, after ``default_callbacks`` (unless
            ``defaults`` is False). promotion: the multi-fidelity strategy (default
            ``SpreadPromotion`` with the config's ``search.fidelity``).
    """

    def __init__(
        self,
        config: Config | str | Path,
        *,
        trials: int | None = None,
        backend: str | None = None,
        address: str | None = None,
        workers: int | None = None,
        resume: bool = False,
        new: bool = False,
        progress: bool | str = True,
        store: Any = None,
        initial: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        callbacks: Sequence[Callback] = (),
        defaults: bool = True,
        promotion: Promotion | None = None,
    ) -> None:
        no_telemetry()
        self.config = setup.search_config(config, trials, backend, address, workers)
        self.resume, self.new, self.initial = resume, new, list(initial or [])
        self.sampler = sampler
        self.sampler_name = (
            self.config.search.sampler if sampler is None else type(sampler).__name__
        )
        self.promotion = promotion or setup.default_promotion(self.config)
        own = setup.default_callbacks(self.config, progress) if defaults else []
        self.callbacks: list[Callback] = [*own, *callbacks]
        show_messages()
        self.records: dict[int, TrialRecord] = {}
        self.constraints = self.config.parsed_constraints()
        #: numbers that describe the whole search, logged at its end
        self.summary: dict[str, float] = {}
        #: per-layer sensitivity rows (``search.sensitivity``) and their fidelity
        self.sensitivity: list[dict[str, Any]] = []
        self.sensitivity_fidelity = ""
        self.timing = Timing()
        self.generation = 0
        self._exhausted = False
        self._stop = StopRequest()  # Ctrl-C in the loop: see _interrupt
        self._store = store
        self._evaluation: TrialRunner | None = None
        self._watch: Watch | None = None
        #: the objectives, known once ``prepare`` built the evaluators
        self.objectives: list[Objective] = []
        #: the study and the baseline's values in it, which ``run`` opens
        self.study: Any = None
        self.study_name = ""
        self.baseline: dict[str, float] = {}
        self.front = Front(self.records, self.objectives, self.constraints)
        self._held: StudyStore | None = None  # the storage whose lock this search holds

    def prepare(self) -> Search:
        """The long step before the first trial, said as it goes: check the folders and
        the devices, build the task, train (or read back) its baseline, build the space
        and the evaluators, measure (or read) the device tables. ``run`` calls it; a
        second call does nothing."""
        if self._evaluation is None:
            self._evaluation = setup.prepare(self.config, self._store, self.resume)
            self._watch = Watch(self._evaluation)
            self.objectives = self._evaluation.objectives()
            self.front = Front(self.records, self.objectives, self.constraints)
        return self

    @property
    def evaluation(self) -> TrialRunner:
        """Runs the trials: the task, its trained baseline, the space, the evaluators and
        the tables (``prepare`` builds it)."""
        if self._evaluation is None:
            raise RuntimeError("the search is not prepared yet: call prepare() (run() does)")
        return self._evaluation

    @property
    def watch(self) -> Watch:
        """What the trials showed of the baseline (a better teacher), from ``prepare`` on."""
        if self._watch is None:
            raise RuntimeError("the search is not prepared yet: call prepare() (run() does)")
        return self._watch

    def report(self) -> SearchReport:
        """What the search found beside its front, as data (``SearchReport``): where
        trials ran, what promotion saved, what constraints ruled out, the tables' noise,
        the nearest miss, notes and a better teacher."""
        return search_report(self)

    # -- state callbacks read ---------------------------------------------------------------
    @property
    def done(self) -> int:
        """Finished trials (complete or failed); refused repeats do not count."""
        return len(self.records)

    @property
    def hypervolume(self) -> float:
        """The front's normalised hypervolume; NaN before ``run`` has a front."""
        if not self.baseline:
            return float("nan")
        return self.front.hypervolume(self.baseline)

    @property
    def study_store(self) -> StudyStore:
        """The study's storage, which ``run`` opens and locks for this driver."""
        if self._held is None:
            raise RuntimeError("the study's storage is opened by run()")
        return self._held

    def _notify(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def _finish_callbacks(self, status: str) -> None:
        """``on_finish`` for each callback. A search that stopped short (Ctrl-C, a full
        disk) tells why it stopped; a callback that cannot finish then (MLflow on the full
        disk) is warned about, not raised over that reason."""
        view: Any = self  # what callbacks read of it (SearchView)
        full: str | None = None
        for cb in self.callbacks:
            try:
                cb.on_finish(view, status)
            except Exception as err:
                if disk_full(err):
                    full = type(cb).__name__
                elif status == "FINISHED":
                    raise
                logger.warning(
                    "%s could not finish: %s", type(cb).__name__, str(err).strip().splitlines()[0]
                )
        if full is not None:
            raise DiskFull(Path.cwd(), f"what {full} writes at the end")

    # -- set-up -----------------------------------------------------------------------------
    def _open(self) -> None:
        self._held, self.study = setup.open_study(
            self.config, self.evaluation, self.sampler, self.resume, self.initial, self.new
        )
        self.study_name = self.study.study_name
        self.records = restore(self.study)
        self.baseline, self.constraints = setup.baseline(
            self.study, self.evaluation, self.constraints
        )
        self.front = Front(self.records, self.objectives, self.constraints)
        self.promotion.start(self.baseline)
        self.promotion.restore(self.study.user_attrs.get(PROMOTION_ATTR, {}))
        self.front.allow(self.promotion.allowance(len(self.evaluation.rungs)))
        self.generation = int(self.study.user_attrs.get(GENERATION_ATTR, 0))

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> SearchResult:
        """Run the search to its trial budget; returns its result."""
        cfg = self.config
        self.prepare()
        try:
            self._open()
            setup.warm_up(self.evaluation)
            backend = build_backend(cfg, self.evaluation)
            setup.log_start(self, backend)
            found = setup.sensitivity_for(cfg, self.evaluation, self.study.sampler, backend)
            if found is not None:
                self.sensitivity, self.sensitivity_fidelity, self.summary["sensitivity_s"] = found
            setup.bind_sampler(self.study.sampler, self)
            self._notify("on_start")
            self.study_store.flush()
            status, started = "FAILED", time.perf_counter()
            try:
                with self._stop:
                    self._loop(backend)
                status = "FINISHED"
                self.study.set_user_attr(FINISHED_ATTR, True)
            except KeyboardInterrupt:
                status = "KILLED"
                logger.info("interrupted; continue with --resume")
                raise
            except DiskFull:  # an interruption: what was written stays whole
                status = "KILLED"
                raise
            finally:
                self.timing.loop_s = time.perf_counter() - started
                try:
                    self.study_store.flush()
                finally:  # the workers stop and the callbacks hear, whatever the disk says
                    backend.close()
                    self.summary.update(setup.run_summary(self))
                    self._finish_callbacks(status)
        finally:
            if self._held is not None:
                self._held.close()
        return self.result()

    def _loop(self, backend: Backend) -> None:
        pending: dict[Any, Pending] = {}  # by the backend's handle
        promotions = self.promotion.owed(self.front)  # what a stopped search left undone
        if promotions:
            logger.info(
                "promotion: measuring first what the stopped search sent up and never got back: %s",
                ", ".join(f"trial {n} at rung {r}" for n, r in promotions),
            )
        since_generation = 0
        total = self.config.search.trials
        while True:
            if self._stop.requested:  # Ctrl-C: the running jobs finish, no new one starts
                if not pending:
                    raise KeyboardInterrupt
            else:
                self._submit(backend, pending, promotions, total)
                if not pending:
                    if promotions:
                        continue
                    promotions = self._generation(final=True)
                    if promotions:
                        continue
                    break
            for handle, outcome in backend.wait(list(pending)):
                done = pending.pop(handle)
                if isinstance(outcome, KeyboardInterrupt):
                    # a worker the same Ctrl-C reached: not a failure; --resume reruns it
                    self._stop.requested = True
                elif done.promotion:
                    self._finish_promotion(done.number, int(done.job.rung), outcome)
                else:
                    self._finish_trial(done.trial, done.job, outcome)
                    since_generation += 1
            if self._stop.requested:
                continue  # no promotion is decided that would not run
            # a promotion still queued or running is not asked for twice
            queued = set(promotions) | {
                (p.number, int(p.job.rung)) for p in pending.values() if p.promotion
            }
            if since_generation >= self.config.search.population:
                since_generation = 0
                promotions += [p for p in self._generation() if p not in queued]
            else:
                promotions += [p for p in self._between() if p not in queued]

    def _submit(
        self,
        backend: Backend,
        pending: dict[Any, Pending],
        promotions: list[tuple[int, int]],
        total: int,
    ) -> None:
        """Fill the backend's free slots: queued promotions first, then new trials."""
        while promotions and len(pending) < backend.slots:
            number, rung = promotions.pop(0)
            job = Job(self.records[number].plan, rung)
            pending[backend.submit(job)] = Pending(job, number=number)
        running = {plan_key(p.job.plan) for p in pending.values() if not p.promotion}
        while len(pending) < backend.slots and self.done + len(running) < total:
            asked = self._ask(running)
            if asked is None:
                break
            trial, job = asked
            running.add(plan_key(job.plan))
            pending[backend.submit(job)] = Pending(job, trial=trial)

    def _ask(self, running: set[str]) -> tuple[Any, Job] | None:
        """A trial whose plan has not completed and is not running (see ``ask_unique``),
        or None when the space seems exhausted."""
        seen = running | {r.key for r in self.records.values() if r.state == "complete"}
        asked = None
        if not self._exhausted:
            asked = ask_unique(self.study, self.evaluation.space, seen, self.config.search.seed)
        self._exhausted = asked is None
        return None if asked is None else (asked[0], Job(asked[1], 0))

    def _finish_trial(self, trial: Any, job: Job, outcome: TrialResult | BaseException) -> None:
        rec = self.study_store.tell(self.study, trial, job.plan, outcome, self.front)
        if rec.state == "failed":
            logger.info("trial %d failed: %s", rec.number, rec.error.splitlines()[0])
        elif isinstance(outcome, TrialResult):
            self._measured(rec, 0, outcome)
        self.records[rec.number] = rec
        self.front.changed()
        self._notify("on_trial", rec)
        self.watch.seen(rec.number, rec.plan, 0, outcome)

    def _finish_promotion(
        self, number: int, rung: int, outcome: TrialResult | BaseException
    ) -> None:
        rec = self.records[number]
        if isinstance(outcome, BaseException):
            logger.info("promoting trial %d to rung %d failed: %s", number, rung, outcome)
            rec.rungs[rung] = {}  # counts as tried; keeps the lower rung's values
        else:
            rec.rungs[rung] = dict(outcome.values)
            self._measured(rec, rung, outcome)
        self.front.changed()
        self.study_store.save_rungs(self.study, rec)
        self._notify("on_promotion", rec, rung)
        self.watch.seen(number, rec.plan, rung, outcome)

    def _measured(self, rec: TrialRecord, rung: int, outcome: TrialResult) -> None:
        """Time ``outcome``; keep the model its job exported on ``rec`` (``keep_export``)."""
        exported = rec.keep_export(rung, outcome.onnx, outcome.onnx_precision, outcome.export_error)
        self.timing.add(rung, outcome.wall_s, outcome.export_s if exported else 0.0)

    def _promoting(self) -> bool:
        return ACCURACY in self.evaluation.metrics and len(self.evaluation.rungs) > 1

    def _between(self) -> list[tuple[int, int]]:
        """Promotions the strategy wants before the generation's end (``between``)."""
        if not self._promoting():
            return []
        promotions = self.promotion.between(self.front, len(self.evaluation.rungs))
        self._promotion_said(keep=bool(promotions))
        return promotions

    def _promotion_said(self, keep: bool) -> None:
        """Log what the strategy decided; keep its state in the study where it decided
        something (``keep``) or said so."""
        notes = self.promotion.take_notes()
        for note in notes:
            logger.info("promotion: %s", note)
        if keep or notes:
            self.study.set_user_attr(PROMOTION_ATTR, self.promotion.state())

    def _generation(self, final: bool = False) -> list[tuple[int, int]]:
        promotions: list[tuple[int, int]] = []
        if self._promoting():
            promotions = self.promotion.select(self.front, len(self.evaluation.rungs))
            self._promotion_said(keep=True)
        if final and not promotions and ACCURACY in self.evaluation.metrics:
            promotions, note = finishing(
                self.front, self.evaluation.rungs, self.config.search.fidelity.finish
            )
            if note:
                logger.info(note)
        if promotions and final:
            return promotions
        self.generation += 1
        self.study.set_user_attr(GENERATION_ATTR, self.generation)
        self.study_store.flush()
        self._notify("on_generation", final)
        return promotions

    # -- results ------------------------------------------------------------------------------
    def pareto_frame(self) -> pd.DataFrame:
        return self.front.frame(self.evaluation.rungs, self.evaluation.metrics)

    def result(self) -> SearchResult:
        return SearchResult(
            pareto=self.pareto_frame(),
            study=self.study,
            mlflow_run_id=str(self.study.user_attrs.get(RUN_ATTR, "")),
            study_name=self.study_name,
            hypervolume=self.hypervolume,
            trials=self.front.trials_frame(self.evaluation.rungs),
        )


def run(
    config: Config | str | Path,
    *,
    sampler: Any = None,
    callbacks: Sequence[Callback] = (),
    **options: Any,
) -> SearchResult:
    """Run a search (the Python API for notebooks); ``options`` as for ``Search``, e.g.
    ``run("digits-mcu", sampler=optuna.samplers.GPSampler(seed=0), callbacks=[...])``.
    Returns a ``SearchResult`` (``.pareto`` DataFrame, ``.study``, ``.mlflow_run_id``)."""
    return Search(config, sampler=sampler, callbacks=callbacks, **options).run()
