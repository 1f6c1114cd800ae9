"""The search loop: ask the sampler, submit to a backend, tell the study, notify the
callbacks. Storage (``_storage``), the front (``_front``), promotion (``_promotion``),
MLflow (``_mlflow``) and progress (``_callbacks``) live in their own modules."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ._anchors import anchor_params
from ._backends import Backend, Job, build_backend
from ._callbacks import Callback, Emissions, ProgressBar, ProgressLines
from ._config import Config, load_config
from ._evaluation import ACCURACY, Evaluation, TrialResult
from ._front import Front, TrialRecord, plan_key
from ._mlflow import MlflowCallback
from ._pareto import Objective
from ._promotion import Promotion, SpreadPromotion
from ._samplers import build_sampler
from ._storage import (
    BASELINE_ATTR,
    DUPLICATE_ATTR,
    GENERATION_ATTR,
    RUNG_ATTR,
    SearchError,
    StudyStore,
    default_storage,
    restore,
)

#: a sampler that proposes this many plans in a row that were already run gets one
#: seeded random plan instead; this many random draws that are all repeats mean the
#: space is exhausted
MAX_REPEATS = 3
MAX_RANDOM_DRAWS = 100


def no_telemetry() -> None:
    """Frontier sends nothing anywhere: MLflow's telemetry and Ray's usage stats are off
    unless the user turned them on explicitly."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@dataclass
class SearchResult:
    """What a search leaves: the front, the study and the MLflow parent run.

    Attributes:
        pareto: the feasible front, one row per member: ``trial``, ``rung`` and one
            column per metric (values at the highest rung the member reached).
        study: the Optuna study (its storage holds every trial).
        mlflow_run_id: the parent run in MLflow.
        study_name: the study's name in the storage.
        hypervolume: of the front, normalised by the baseline (see README).
        trials: every finished trial with its values, rung, state and error.
    """

    pareto: pd.DataFrame
    study: Any
    mlflow_run_id: str
    study_name: str
    hypervolume: float
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)


class Search:
    """One search: build it from a config, then ``run()``.

    Args:
        config: the config (a ``Config``, a path or a built-in name).
        trials, backend, address, workers: override the config's values.
        resume: continue the latest study of this config instead of starting a new one.
        progress: True: a progress bar on a terminal, a line per generation otherwise;
            ``"lines"``: always lines; False: nothing.
        store: the DeviceStore for device tables.
        initial: parameter sets (``space.dimensions()`` names) tried first, in order,
            before the sampler proposes its own (a new study only).
        sampler: an Optuna sampler object to use instead of ``search.sampler``.
        callbacks: more ``Callback`` objects, called after the built-in ones.
        promotion: the multi-fidelity strategy (default ``SpreadPromotion`` with the
            config's ``search.fidelity.promote`` share).
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
        progress: bool | str = True,
        store: Any = None,
        initial: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        callbacks: Sequence[Callback] = (),
        promotion: Promotion | None = None,
    ) -> None:
        no_telemetry()
        if not isinstance(config, Config):
            config = load_config(config)
        self.config = config.override(
            {
                "backend.kind": backend or ("ray" if address else None),
                "backend.address": address,
                "backend.workers": workers,
                "search.trials": trials,
            }
        )
        self.resume = resume
        self.store = store
        self.initial = list(initial or [])
        self.sampler = sampler
        self.sampler_name = config.search.sampler if sampler is None else type(sampler).__name__
        self.promotion = promotion or SpreadPromotion(share=self.config.search.fidelity.promote)
        self.tracking = MlflowCallback(
            uri=self.config.tracking.uri,
            experiment=self.config.tracking.experiment or self.config.name,
            export_front=self.config.tracking.export_front,
        )
        shown: list[Callback] = []
        if progress == "lines" or (progress and not sys.stderr.isatty()):
            shown = [ProgressLines()]
        elif progress:
            shown = [ProgressBar()]
        self.callbacks: list[Callback] = [
            Emissions(self.config.carbon.country_iso),
            self.tracking,
            *shown,
            *callbacks,
        ]
        self.records: dict[int, TrialRecord] = {}
        self.constraints = self.config.parsed_constraints()
        #: numbers that describe the whole search, logged at its end
        self.summary: dict[str, float] = {}
        #: wall seconds of the search loop, and of the evaluations inside it (for
        #: workers: their own time); the difference is the engine's overhead
        self.loop_s = 0.0
        self.eval_s = 0.0
        self.generation = 0
        self._exhausted = False
        self._held: StudyStore | None = None  # the storage whose lock this search holds

    # -- state callbacks read ---------------------------------------------------------------
    @property
    def done(self) -> int:
        """Finished trials (complete or failed); refused repeats do not count."""
        return len(self.records)

    @property
    def hypervolume(self) -> float:
        return self.front.hypervolume(self.baseline)

    def _notify(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    # -- set-up -----------------------------------------------------------------------------
    def _open(self) -> None:
        cfg = self.config
        self.study_store = self._held = StudyStore(cfg.storage or default_storage(cfg))
        seed, population = cfg.search.seed, cfg.search.population
        sampler = self.sampler or build_sampler(
            cfg.search.sampler, population=population, seed=seed
        )
        directions = [o.direction for o in self.objectives]
        self.study = self.study_store.open(cfg.name, directions, sampler, resume=self.resume)
        self.study_name = self.study.study_name
        if self.resume and self.sampler is None:
            # a sampler seeded as before would first replay the plans already run
            self.study.sampler = build_sampler(
                cfg.search.sampler, population=population, seed=seed + len(self.study.trials)
            )
        if not self.resume:
            initial = list(self.initial)
            if cfg.search.anchors:
                initial += [p for p in anchor_params(self.evaluation.space) if p not in initial]
            for params in initial[: cfg.search.trials]:
                self.study.enqueue_trial(params)
        self.records = restore(self.study)
        if BASELINE_ATTR not in self.study.user_attrs:
            self.study.set_user_attr(BASELINE_ATTR, self.evaluation.baseline())
        self.baseline: dict[str, float] = self.study.user_attrs[BASELINE_ATTR]
        try:
            self.constraints = [c.resolve(self.baseline) for c in self.constraints]
        except ValueError as err:
            raise SearchError(str(err)) from None
        self.front = Front(self.records, self.objectives, self.constraints)
        self.generation = int(self.study.user_attrs.get(GENERATION_ATTR, 0))

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> SearchResult:
        """Run the search to its trial budget; returns its result."""
        cfg = self.config
        print(f"frontier: building the {cfg.name} task and space ...", file=sys.stderr)
        self.evaluation = Evaluation(cfg, store=self.store)
        for w in self.evaluation.warnings:
            print(f"warning: {w}", file=sys.stderr)
        for note in self.evaluation.notes:
            print(f"note: {note}", file=sys.stderr)
        self.objectives: list[Objective] = self.evaluation.objectives()
        try:
            self._open()
            backend = build_backend(cfg, self.evaluation)
            print(
                f"frontier: study {self.study_name!r} in {self.study_store.url}, {self.done} "
                f"of {cfg.search.trials} trials done, backend {backend.name} "
                f"({backend.slots} at a time), MLflow at {cfg.tracking.uri}",
                file=sys.stderr,
            )
            self._notify("on_start")
            self.study_store.flush()
            status = "FAILED"
            started = time.perf_counter()
            try:
                self._loop(backend)
                status = "FINISHED"
            except KeyboardInterrupt:
                status = "KILLED"
                print("\nfrontier: interrupted; continue with --resume", file=sys.stderr)
                raise
            finally:
                self.loop_s = time.perf_counter() - started
                self.study_store.flush()
                backend.close()
                self.summary.update(
                    search_loop_s=self.loop_s,
                    evaluation_s=self.eval_s,
                    failed_trials=sum(1 for r in self.records.values() if r.state == "failed"),
                )
                self._notify("on_finish", status)
        finally:
            if self._held is not None:
                self._held.close()
        return self.result()

    def _loop(self, backend: Backend) -> None:
        pending: dict[Any, tuple[str, Any, Job]] = {}
        promotions: list[tuple[int, int]] = []
        since_generation = 0
        total = self.config.search.trials
        while True:
            while promotions and len(pending) < backend.slots:
                number, rung = promotions.pop(0)
                job = Job(self.records[number].plan, rung)
                pending[backend.submit(job)] = ("promote", number, job)
            running = {plan_key(j.plan) for kind, _, j in pending.values() if kind == "trial"}
            while len(pending) < backend.slots and self.done + len(running) < total:
                asked = self._ask(running)
                if asked is None:
                    break
                trial, job = asked
                running.add(plan_key(job.plan))
                pending[backend.submit(job)] = ("trial", trial, job)
            if not pending:
                if promotions:
                    continue
                promotions = self._generation(final=True)
                if promotions:
                    continue
                break
            for handle, outcome in backend.wait(list(pending)):
                kind, what, job = pending.pop(handle)
                if kind == "trial":
                    self._finish_trial(what, job, outcome)
                    since_generation += 1
                else:
                    self._finish_promotion(what, job.rung, outcome)
            if since_generation >= self.config.search.population:
                since_generation = 0
                promotions += self._generation()

    def _ask(self, running: set[str]) -> tuple[Any, Job] | None:
        """A trial whose plan has not completed and is not running, or None when the
        space holds no such plan. A sampler that repeats itself (a resumed first
        generation, a converged TPE) has the repeat recorded as pruned, not run."""
        from optuna.samplers import RandomSampler
        from optuna.trial import TrialState

        seen = running | {r.key for r in self.records.values() if r.state == "complete"}
        repeats = 0
        sampler = self.study.sampler
        try:
            while not self._exhausted:
                trial = self.study.ask()
                plan = self.evaluation.space.suggest(trial).to_dict()
                if plan_key(plan) not in seen:
                    trial.set_user_attr("plan", plan)
                    return trial, Job(plan, 0)
                trial.set_user_attr(DUPLICATE_ATTR, plan_key(plan))
                self.study.tell(trial, state=TrialState.PRUNED)
                repeats += 1
                if repeats == MAX_REPEATS:
                    seed = self.config.search.seed + len(self.study.trials)
                    self.study.sampler = RandomSampler(seed=seed)
                elif repeats >= MAX_REPEATS + MAX_RANDOM_DRAWS:
                    self._exhausted = True
                    print(
                        f"frontier: the space seems exhausted: {MAX_RANDOM_DRAWS} random "
                        f"plans were all tried already ({len(seen)} distinct plans)",
                        file=sys.stderr,
                    )
            return None
        finally:
            self.study.sampler = sampler

    def _finish_trial(self, trial: Any, job: Job, outcome: TrialResult | BaseException) -> None:
        from optuna.trial import TrialState

        params = dict(trial.params)
        if isinstance(outcome, BaseException):
            error = f"{type(outcome).__name__}: {outcome}"[:2000]
            trial.set_user_attr("error", error)
            self.study.tell(trial, state=TrialState.FAIL)
            rec = TrialRecord(trial.number, params, job.plan, "failed", error=error)
            print(
                f"frontier: trial {trial.number} failed: {error.splitlines()[0]}", file=sys.stderr
            )
        else:
            for c in self.constraints:
                trial.set_constraint(str(c), c.violation(outcome.values[c.objective]))
            trial.set_user_attr("values", outcome.values)
            trial.set_user_attr("fidelity", outcome.fidelity)
            trial.set_user_attr("eval_s", outcome.wall_s)
            self.study.tell(trial, [outcome.values[o.name] for o in self.objectives])
            rec = TrialRecord(trial.number, params, job.plan, "complete")
            rec.rungs[0] = dict(outcome.values)
            self.eval_s += outcome.wall_s
        self.records[trial.number] = rec
        self.front.changed()
        self.study_store.flush()  # the trial is on disk before anyone hears of it
        self._notify("on_trial", rec)

    def _finish_promotion(
        self, number: int, rung: int, outcome: TrialResult | BaseException
    ) -> None:
        rec = self.records[number]
        if isinstance(outcome, BaseException):
            print(
                f"frontier: promoting trial {number} to rung {rung} failed: {outcome}",
                file=sys.stderr,
            )
            rec.rungs[rung] = {}  # counts as tried; keeps the lower rung's values
        else:
            rec.rungs[rung] = dict(outcome.values)
            self.eval_s += outcome.wall_s
        self.front.changed()
        self.study.set_user_attr(
            RUNG_ATTR + str(number), {str(r): v for r, v in rec.rungs.items() if r > 0}
        )
        self.study_store.flush()
        self._notify("on_promotion", rec, rung)

    def _generation(self, final: bool = False) -> list[tuple[int, int]]:
        promotions: list[tuple[int, int]] = []
        if ACCURACY in self.evaluation.metrics and len(self.evaluation.rungs) > 1:
            promotions = self.promotion.select(self.front, len(self.evaluation.rungs))
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

    def closest_miss(self) -> str:
        """See ``Front.closest_miss``: '' unless no completed plan was feasible."""
        return self.front.closest_miss()

    def trials_frame(self) -> pd.DataFrame:
        rows = []
        for n, rec in sorted(self.records.items()):
            vals = rec.values() if rec.state == "complete" else {}
            rows.append(
                {
                    "trial": n,
                    "state": rec.state,
                    "rung": self.evaluation.rungs[rec.rung] if rec.rung >= 0 else "",
                    "feasible": bool(vals) and self.front.feasible(vals),
                    "error": rec.error,
                    **vals,
                }
            )
        return pd.DataFrame(rows)

    def result(self) -> SearchResult:
        return SearchResult(
            pareto=self.pareto_frame(),
            study=self.study,
            mlflow_run_id=self.tracking.parent,
            study_name=self.study_name,
            hypervolume=self.hypervolume,
            trials=self.trials_frame(),
        )


def run(
    config: Config | str | Path,
    *,
    sampler: Any = None,
    callbacks: Sequence[Callback] = (),
    **options: Any,
) -> SearchResult:
    """Run a search (the Python API for notebooks).

    Args:
        config: a ``Config``, a config file or a built-in experiment name.
        sampler: an Optuna sampler object (``optuna.samplers.GPSampler(seed=0)``) to use
            instead of the config's ``search.sampler``.
        callbacks: ``Callback`` objects to notify of trials, generations and the end.
        options: ``trials``, ``backend``, ``address``, ``workers``, ``resume``,
            ``progress``, ``initial``, ``promotion`` (see ``Search``).

    Returns:
        A ``SearchResult`` with ``.pareto`` (DataFrame), ``.study`` and ``.mlflow_run_id``.
    """
    return Search(config, sampler=sampler, callbacks=callbacks, **options).run()
