"""The search driver: Optuna ask/tell, rung promotion, the front, MLflow, resume."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._anchors import anchor_params
from ._backends import Backend, InProcess, Job, LocalProcesses, RayBackend
from ._config import Config, Constraint, load_config
from ._evaluation import ACCURACY, Evaluation, TrialResult
from ._pareto import REFERENCE, Objective, hypervolume, pareto_mask
from ._tracking import MODEL_FILE, PARETO_TAG, PLAN_FILE, Tracker

CONFIG_ATTR = "frontier.config_name"
RUN_ATTR = "frontier.mlflow_run_id"
BASELINE_ATTR = "frontier.baseline"
INTERRUPTED_ATTR = "frontier.interrupted"
RUNG_ATTR = "frontier.rungs."  # + trial number: {rung: values}
#: pareto.csv, the front plots and front members' ONNX files are refreshed at most this
#: often (and at the end)
PLOT_INTERVAL_S = 20.0


def no_telemetry() -> None:
    """Frontier sends nothing anywhere: MLflow's telemetry and Ray's usage stats are off
    unless the user turned them on explicitly."""
    import os

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


class SearchError(RuntimeError):
    """A search cannot start or resume; the message says why and what to do."""


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


@dataclass
class _Record:
    number: int
    params: dict[str, Any]
    plan: dict[str, Any]
    state: str  # "complete" | "failed"
    rungs: dict[int, dict[str, float]] = field(default_factory=dict)
    error: str = ""
    run_id: str = ""
    on_front: bool = False  # as last tagged in MLflow
    exported_rung: int = -1

    @functools.cached_property
    def key(self) -> str:
        """The plan, canonically: equal plans have equal keys."""
        return json.dumps(self.plan, sort_keys=True)

    @property
    def rung(self) -> int:
        return max(self.rungs) if self.rungs else -1

    def values(self, rung: int | None = None) -> dict[str, float]:
        """Metrics at ``rung`` (default: the highest reached); a promotion re-measures
        accuracy only, the rest carries over from rung 0."""
        rung = self.rung if rung is None else rung
        merged: dict[str, float] = {}
        for r in sorted(self.rungs):
            if r <= rung:
                merged.update(self.rungs[r])
        return merged


def default_storage(config: Config) -> str:
    """A journal file beside the MLflow database (or in the working directory when
    tracking goes to a server)."""
    uri = config.tracking.uri
    if uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).expanduser().resolve().parent
    else:
        folder = Path.cwd()
    return str(folder / "frontier-optuna.journal")


def open_storage(url: str, *, single_writer: bool = False) -> Any:
    """An Optuna storage: a journal file (a path, or ``journal:PATH``; safe for several
    processes on one machine), or an RDB URL (``postgresql://``, ``mysql://``,
    ``sqlite:///``) for several machines.

    Args:
        url: the storage.
        single_writer: this process is the journal's only writer (the search driver):
            writes are buffered and made durable together (``storage.flush()``), one
            fsync per finished trial instead of one per parameter.
    """
    import optuna

    if "://" in url and not url.startswith("journal:"):
        return optuna.storages.RDBStorage(url)
    path = Path(url.removeprefix("journal:")).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages.journal import JournalFileBackend

    backend: Any = JournalFileBackend(str(path))
    if single_writer:
        backend = _BufferedJournal(backend)
    storage = optuna.storages.JournalStorage(backend)
    if single_writer:
        storage.flush = backend.flush  # type: ignore[attr-defined]
    return storage


class _BufferedJournal:
    """A journal file backend for its only writer: appended logs stay in memory (and
    are read back from there) until ``flush`` writes them with one fsync."""

    def __init__(self, backend: Any) -> None:
        self._file = backend
        self._on_disk = sum(1 for _ in backend.read_logs(0))
        self._buffer: list[dict[str, Any]] = []

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        if log_number_from < self._on_disk:
            yield from self._file.read_logs(log_number_from)
        yield from self._buffer[max(0, log_number_from - self._on_disk) :]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self._buffer.extend(logs)

    def flush(self) -> None:
        if self._buffer:
            self._file.append_logs(self._buffer)
            self._on_disk += len(self._buffer)
            self._buffer = []


def _driver_lock(url: str) -> Any:
    """Hold the journal's driver lock for the whole search: the driver buffers its
    journal writes, so two drivers on one journal would corrupt it. The OS releases the
    lock when the process dies, so a killed search can always be resumed."""
    import fcntl

    if "://" in url and not url.startswith("journal:"):
        return None  # a database storage: Optuna arbitrates
    path = Path(url.removeprefix("journal:")).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path.with_name(path.name + ".driver-lock"), "a+")  # noqa: SIM115
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise SearchError(
            f"another frontier search ({owner}) is running on {path}; wait for it to "
            "finish, or give this one its own storage (--storage PATH)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


def make_sampler(config: Config) -> Any:
    import optuna

    s = config.search
    if s.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=s.population, seed=s.seed)
    if s.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=s.seed, multivariate=True)
    if s.sampler == "gp":
        return optuna.samplers.GPSampler(seed=s.seed)
    return optuna.samplers.RandomSampler(seed=s.seed)


def _studies(storage: Any, config_name: str) -> list[Any]:
    import optuna

    found = [
        s
        for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
        if s.user_attrs.get(CONFIG_ATTR) == config_name
    ]
    return sorted(found, key=lambda s: s._study_id)


class _Background:
    """MLflow writes, in order, on one background thread, so the search loop does not
    wait on the tracking store. A write that fails is reported once, and the search
    goes on (a resumed search writes the trial runs that are missing)."""

    def __init__(self) -> None:
        import concurrent.futures as cf

        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="frontier-mlflow")
        self._futures: list[Any] = []
        self.errors: list[str] = []

    def __call__(self, fn: Callable[[], Any]) -> None:
        self._futures.append(self._pool.submit(fn))
        self._collect()

    def _collect(self) -> None:
        pending = []
        for f in self._futures:
            if not f.done():
                pending.append(f)
            elif f.exception() is not None:
                err = f"{type(f.exception()).__name__}: {f.exception()}"
                if not self.errors:
                    print(f"warning: MLflow write failed: {err}", file=sys.stderr)
                self.errors.append(err)
        self._futures = pending

    def drain(self) -> None:
        import concurrent.futures as cf

        cf.wait(self._futures)
        self._collect()


class _Progress:
    """A rich progress bar on stderr (trials, front size, hypervolume), or nothing."""

    def __init__(self, enabled: bool, total: int, done: int) -> None:
        self.enabled = enabled
        self._bar: Any = None
        if enabled:
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
            self._task = self._bar.add_task("search", total=total, completed=done, info="")
            self._bar.start()

    def update(self, done: int, info: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, info=info)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


class Search:
    """One search: build it from a config, then ``run()``.

    Args:
        config: the config (a ``Config``, a path or a built-in name).
        trials, backend, address, workers: override the config's values.
        resume: continue the latest study of this config instead of starting a new one.
        progress: show a progress bar on stderr.
        store: the DeviceStore for device tables.
        initial: parameter sets (``space.dimensions()`` names) tried first, in order,
            before the sampler proposes its own (a new study only).
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
        progress: bool = True,
        store: Any = None,
        initial: list[dict[str, Any]] | None = None,
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
        self.progress = progress
        self.store = store
        self.records: dict[int, _Record] = {}
        self.constraints: list[Constraint] = self.config.parsed_constraints()
        self.initial = list(initial or [])
        #: wall seconds of the search loop, and of the evaluations inside it (for
        #: workers: their own time); the difference is the engine's overhead
        self.loop_s = 0.0
        self.eval_s = 0.0
        self._last_front_csv = ""
        self._last_plot = -math.inf
        self.later = _Background()
        self._lock: Any = None  # the journal's driver lock while running
        #: bumped whenever a trial or promotion lands; keys the front cache
        self._changes = 0
        self._front_cache: dict[tuple[int, int | None], list[int]] = {}

    # -- set-up ---------------------------------------------------------------------------
    def _open_study(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        cfg = self.config
        self.storage_url = cfg.storage or default_storage(cfg)
        self._lock = _driver_lock(self.storage_url)
        self.storage = open_storage(self.storage_url, single_writer=True)
        existing = _studies(self.storage, cfg.name)
        directions: list[Any] = [o.direction for o in self.objectives]
        if self.resume:
            if not existing:
                raise SearchError(
                    f"nothing to resume: no study of config {cfg.name!r} in {self.storage_url}"
                )
            self.study_name = existing[-1].study_name
        else:
            taken = {s.study_name for s in optuna.get_all_study_summaries(self.storage, False)}
            name, k = cfg.name, 1
            while name in taken:
                k += 1
                name = f"{cfg.name}-{k}"
            self.study_name = name
        self.study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            sampler=make_sampler(cfg),
            directions=directions,
            load_if_exists=self.resume,
        )
        if not self.resume:
            self.study.set_user_attr(CONFIG_ATTR, cfg.name)
            initial = list(self.initial)
            if cfg.search.anchors:
                initial += [p for p in anchor_params(self.evaluation.space) if p not in initial]
            for params in initial[: cfg.search.trials]:
                self.study.enqueue_trial(params)

    def _backend(self) -> Backend:
        b = self.config.backend
        if b.kind == "ray":
            return RayBackend(
                self.config.model_dump_json(),
                self.evaluation.tables,
                address=b.address,
                cpus_per_trial=b.cpus_per_trial,
                gpus_per_trial=b.gpus_per_trial,
                max_retries=b.max_retries,
            )
        if b.workers > 1:
            return LocalProcesses(
                self.config.model_dump_json(), self.evaluation.tables, b.workers, b.max_retries
            )
        return InProcess(self.evaluation)

    def _restore(self) -> None:
        """Rebuild the records from the storage; trials a killed run left RUNNING are
        failed, marked interrupted and queued again with the same parameters."""
        from optuna.trial import TrialState

        attrs = self.study.user_attrs
        interrupted = list(attrs.get(INTERRUPTED_ATTR, []))
        for t in self.study.get_trials(deepcopy=False):
            if t.state == TrialState.RUNNING:
                self.study.tell(t.number, state=TrialState.FAIL)
                self.study.enqueue_trial(t.params, skip_if_exists=False)
                interrupted.append(t.number)
        self.study.set_user_attr(INTERRUPTED_ATTR, interrupted)
        for t in self.study.get_trials(deepcopy=False):
            if t.number in interrupted:
                continue
            if t.state == TrialState.COMPLETE:
                rec = _Record(t.number, t.params, t.user_attrs["plan"], "complete")
                rec.rungs[0] = dict(t.user_attrs["values"])
                for r, vals in attrs.get(RUNG_ATTR + str(t.number), {}).items():
                    rec.rungs[int(r)] = dict(vals)
                self.records[t.number] = rec
            elif t.state == TrialState.FAIL:
                self.records[t.number] = _Record(
                    t.number,
                    t.params,
                    t.user_attrs.get("plan", {}),
                    "failed",
                    error=t.user_attrs.get("error", ""),
                )

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> SearchResult:
        """Run the search to its trial budget; returns its result."""
        self._lock = None
        try:
            return self._run()
        finally:
            if self._lock is not None:
                self._lock.close()  # releases the driver lock

    def _run(self) -> SearchResult:
        cfg = self.config
        print(f"frontier: building the {cfg.name} task and space ...", file=sys.stderr)
        self.evaluation = Evaluation(cfg, store=self.store)
        for w in self.evaluation.warnings:
            print(f"warning: {w}", file=sys.stderr)
        for note in self.evaluation.notes:
            print(f"note: {note}", file=sys.stderr)
        self.objectives: list[Objective] = self.evaluation.objectives()
        self._open_study()
        self._restore()
        if BASELINE_ATTR not in self.study.user_attrs:
            self.study.set_user_attr(BASELINE_ATTR, self.evaluation.baseline())
        self.baseline: dict[str, float] = self.study.user_attrs[BASELINE_ATTR]
        try:
            self.constraints = [c.resolve(self.baseline) for c in self.config.parsed_constraints()]
        except ValueError as err:
            raise SearchError(str(err)) from None
        self.tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment or cfg.name)
        self._start_tracking()
        self.flush()
        backend = self._backend()
        emissions = _emissions_tracker(cfg.carbon.country_iso)
        print(
            f"frontier: study {self.study_name!r} in {self.storage_url}, "
            f"{self._done()} of {cfg.search.trials} trials done, backend {backend.name} "
            f"({backend.slots} at a time), MLflow run {self.parent} at {cfg.tracking.uri}",
            file=sys.stderr,
        )
        bar = _Progress(self.progress, cfg.search.trials, self._done())
        status = "FAILED"
        started = time.perf_counter()
        try:
            self._loop(backend, bar)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            print("\nfrontier: interrupted; continue with --resume", file=sys.stderr)
            raise
        finally:
            self.loop_s = time.perf_counter() - started
            self.flush()
            bar.close()
            backend.close()
            bar.update(self._done(), "")
            self._finish_tracking(emissions, status)
        return self.result()

    def flush(self) -> None:
        """Make what the study holds durable (a buffered journal writes it now)."""
        flush = getattr(self.storage, "flush", None)
        if flush is not None:
            flush()

    def _done(self) -> int:
        return len(self.records)

    def _loop(self, backend: Backend, bar: _Progress) -> None:
        pending: dict[Any, tuple[str, Any, Job]] = {}
        promotions: list[tuple[int, int]] = []
        since_generation = 0
        self.generation = int(self.study.user_attrs.get("frontier.generation", 0))
        total = self.config.search.trials
        shown = 0.0
        while True:
            while promotions and len(pending) < backend.slots:
                number, rung = promotions.pop(0)
                job = Job(self.records[number].plan, rung)
                pending[backend.submit(job)] = ("promote", number, job)
            running = sum(1 for kind, _, _ in pending.values() if kind == "trial")
            while len(pending) < backend.slots and self._done() + running < total:
                trial = self.study.ask()
                plan = self.evaluation.space.suggest(trial)
                job = Job(plan.to_dict(), 0)
                trial.set_user_attr("plan", job.plan)
                handle = backend.submit(job)
                pending[handle] = ("trial", trial, job)
                running += 1
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
            if bar.enabled and time.monotonic() - shown > 0.5:
                shown = time.monotonic()
                bar.update(self._done(), f"front {len(self.front_numbers())}  HV {self.hv:.4f}")

    # -- trials ---------------------------------------------------------------------------
    def _finish_trial(self, trial: Any, job: Job, outcome: TrialResult | BaseException) -> None:
        from optuna.trial import TrialState

        params = dict(trial.params)
        if isinstance(outcome, BaseException):
            error = f"{type(outcome).__name__}: {outcome}"[:2000]
            trial.set_user_attr("error", error)
            self.study.tell(trial, state=TrialState.FAIL)
            rec = _Record(trial.number, params, job.plan, "failed", error=error)
            self.records[trial.number] = rec
            self._changes += 1
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
            rec = _Record(trial.number, params, job.plan, "complete")
            rec.rungs[0] = dict(outcome.values)
            self.records[trial.number] = rec
            self._changes += 1
            self.eval_s += outcome.wall_s
        self.flush()  # the trial is on disk before MLflow hears of it
        self._log_trial(rec)

    def _finish_promotion(
        self, number: int, rung: int, outcome: TrialResult | BaseException
    ) -> None:
        rec = self.records[number]
        self._changes += 1
        if isinstance(outcome, BaseException):
            print(
                f"frontier: promoting trial {number} to rung {rung} failed: {outcome}",
                file=sys.stderr,
            )
            rec.rungs[rung] = {}  # counts as tried; keeps the lower rung's values
        else:
            rec.rungs[rung] = dict(outcome.values)
            self.eval_s += outcome.wall_s
        self.study.set_user_attr(
            RUNG_ATTR + str(number), {str(r): v for r, v in rec.rungs.items() if r > 0}
        )
        self.flush()
        values, tags = dict(rec.rungs[rung]), self._rung_tags(rec)

        def write() -> None:
            if rec.run_id:
                self.tracker.log_metrics(rec.run_id, values, step=rung)
                self.tracker.set_tags(rec.run_id, tags)

        self.later(write)

    # -- the front ------------------------------------------------------------------------
    def feasible(self, values: dict[str, float]) -> bool:
        return all(c.holds(values[c.objective]) for c in self.constraints)

    def _matrix(self, recs: list[_Record], rung: int | None) -> np.ndarray:
        return np.array(
            [[r.values(rung)[o.name] for o in self.objectives] for r in recs], dtype=float
        ).reshape(len(recs), len(self.objectives))

    def front_numbers(self, rung: int | None = None) -> list[int]:
        """Trial numbers on the feasible front, each at its highest rung (or at ``rung``,
        among those that reached it)."""
        cache_key = (self._changes, rung)
        if cache_key in self._front_cache:
            return list(self._front_cache[cache_key])
        recs = [
            r
            for r in self.records.values()
            if r.state == "complete"
            and (rung is None or r.rung >= rung)
            and self.feasible(r.values(rung))
        ]
        # a sampler may propose a plan twice; the front lists each plan once
        unique: dict[str, _Record] = {}
        for r in sorted(recs, key=lambda r: r.number):
            unique.setdefault(r.key, r)
        recs = list(unique.values())
        front = []
        if recs:
            mask = pareto_mask(self._matrix(recs, rung), self.objectives)
            front = [r.number for r, m in zip(recs, mask, strict=True) if m]
        self._front_cache = {k: v for k, v in self._front_cache.items() if k[0] == self._changes}
        self._front_cache[cache_key] = front
        return list(front)

    @property
    def hv(self) -> float:
        front = [self.records[n] for n in self.front_numbers()]
        if not front:
            return 0.0
        base = [self.baseline[o.name] for o in self.objectives]
        return hypervolume(self._matrix(front, None), self.objectives, base)

    def _promotions(self) -> list[tuple[int, int]]:
        """Which candidates go up a rung: at each rung, a ``promote`` share of its front,
        evenly spread along the first objective, minus those already promoted."""
        if ACCURACY not in self.evaluation.metrics:
            return []
        share = self.config.search.fidelity.promote
        out = []
        for rung in range(len(self.evaluation.rungs) - 1):
            front = self.front_numbers(rung)
            quota = math.ceil(share * len(front))
            quota -= sum(1 for n in front if self.records[n].rung > rung)
            waiting = [n for n in front if self.records[n].rung == rung]
            if quota <= 0 or not waiting:
                continue
            first = self.objectives[0].name
            waiting.sort(key=lambda n: self.records[n].values(rung)[first])
            picks = np.unique(np.linspace(0, len(waiting) - 1, min(quota, len(waiting))).round())
            out += [(waiting[int(i)], rung + 1) for i in picks]
        return out

    def _generation(self, final: bool = False) -> list[tuple[int, int]]:
        promotions = self._promotions()
        if promotions and final:
            return promotions
        self.generation += 1
        self.study.set_user_attr("frontier.generation", self.generation)
        self.flush()
        self._log_front(final)
        return promotions

    # -- MLflow -----------------------------------------------------------------------------
    def _start_tracking(self) -> None:
        from importlib.metadata import version

        parent = self.study.user_attrs.get(RUN_ATTR)
        if parent:
            self.parent = parent
            self.tracker.reopen(parent)
        else:
            cfg = self.config
            tables = {n: t.content_hash for n, t in self.evaluation.tables.items()}
            self.parent = self.tracker.start_parent(
                self.study_name,
                params={
                    "seed": cfg.search.seed,
                    "sampler": cfg.search.sampler,
                    "trials": cfg.search.trials,
                    "rungs": ",".join(self.evaluation.rungs),
                    "promote": cfg.search.fidelity.promote,
                    "backend": cfg.backend.kind,
                    "task": cfg.task.name,
                },
                tags={
                    "frontier.version": version("frontier"),
                    "frontier.study": self.study_name,
                    "frontier.storage": self.storage_url,
                    "frontier.objectives": json.dumps(
                        [{"name": o.name, "direction": o.direction} for o in self.objectives]
                    ),
                    "frontier.metrics": json.dumps(
                        [
                            {"name": o.name, "direction": o.direction}
                            for o in self.evaluation.recorded()
                        ]
                    ),
                    "frontier.constraints": json.dumps([str(c) for c in self.constraints]),
                    "frontier.constraints_as_written": json.dumps(cfg.constraints),
                    "frontier.reference_point": json.dumps(
                        {o.name: REFERENCE for o in self.objectives}
                    ),
                    "frontier.hv_normalisation": "minimize: value/baseline; "
                    "maximize: 1 - value/baseline",
                    "frontier.baseline": json.dumps(self.baseline),
                    "frontier.device_tables": json.dumps(tables),
                    "frontier.notes": json.dumps(self.evaluation.notes),
                },
            )
            self.study.set_user_attr(RUN_ATTR, self.parent)
            self.tracker.log_text(self.parent, cfg.model_dump_json(indent=2), "config.json")
            self.tracker.log_text(self.parent, self.evaluation.space.describe(), "space.txt")
        # trials a killed run finished but never logged
        logged = self.tracker.trial_runs(self.parent)
        for rec in self.records.values():
            rec.run_id = logged.get(rec.number, "")
            rec.on_front = True  # re-tag every restored trial at the next generation
            if not rec.run_id:
                self._log_trial(rec)

    def _rung_tags(self, rec: _Record) -> dict[str, str]:
        rungs = self.evaluation.rungs
        return {
            "frontier.rung": rungs[rec.rung] if rec.rung >= 0 else "",
            "frontier.rung_index": str(rec.rung),
        }

    def _log_trial(self, rec: _Record) -> None:
        tags = {"frontier.state": rec.state, PARETO_TAG: "false", **self._rung_tags(rec)}
        if rec.error:
            tags["frontier.error"] = rec.error[:5000]
        values = rec.values() if rec.state == "complete" else {}
        if values:
            tags["frontier.feasible"] = str(self.feasible(values)).lower()
        params, parent, failed = dict(rec.params), self.parent, rec.state == "failed"

        def write() -> None:
            rec.run_id = self.tracker.log_trial(
                parent, rec.number, params=params, values=values, tags=tags, failed=failed
            )

        self.later(write)

    def _tag_later(self, rec: _Record, tags: dict[str, str]) -> None:
        def write() -> None:
            self.tracker.set_tags(rec.run_id, tags)  # the run id exists by now

        self.later(write)

    def _log_front(self, final: bool = False) -> None:
        front = set(self.front_numbers())
        was = {n for n, r in self.records.items() if r.on_front}
        for n in front ^ was:
            rec = self.records[n]
            rec.on_front = n in front
            self._tag_later(rec, {PARETO_TAG: str(n in front).lower()})
        metrics = {"hypervolume": self.hv, "front_size": len(front), "trials_done": self._done()}
        parent, step = self.parent, self.generation
        self.later(lambda: self.tracker.log_metrics(parent, metrics, step=step))
        frame = self.pareto_frame()
        text = frame.drop(columns="run_id").to_csv(index=False)
        if text == self._last_front_csv:
            return  # artifacts only when the front moved,
        if not final and time.monotonic() - self._last_plot < PLOT_INTERVAL_S:
            return  # and at most every PLOT_INTERVAL_S (exports and plots cost CPU)
        self._last_front_csv = text
        self._last_plot = time.monotonic()
        if self.config.tracking.export_front:
            for n in sorted(front):
                self._export(self.records[n])
        members = [self.records[n] for n in frame["trial"]] if not frame.empty else []
        points = self._matrix([r for r in self.records.values() if r.state == "complete"], None)

        def write() -> None:
            frame["run_id"] = [r.run_id for r in members]  # known once earlier writes ran
            self.tracker.log_text(parent, frame.to_csv(index=False), "pareto.csv")
            _plot_fronts(self.tracker, parent, self.objectives, points, frame)

        self.later(write)

    def _export(self, rec: _Record) -> None:
        """A front member's ONNX model (the one its accuracy was measured on) and plan.
        The model is built here (torch work stays on the search thread: seeded); the
        upload happens in the background."""
        import shutil
        import tempfile
        import warnings

        from frontier.latency_models._validate import quiet_root_logger
        from frontier.spaces import export_onnx

        if rec.exported_rung == rec.rung:
            return
        plan = self.evaluation.plan(rec.plan)
        tmp = Path(tempfile.mkdtemp(prefix="frontier-export-"))
        with warnings.catch_warnings(), quiet_root_logger():
            warnings.simplefilter("ignore")
            model = self.evaluation.scored_model(plan, max(rec.rung, 0))
            result = export_onnx(
                model,
                plan,
                self.evaluation.example,
                tmp / MODEL_FILE,
                calibration_data=self.evaluation.context.calibration(),
            )
        (tmp / PLAN_FILE).write_text(plan.to_json())
        rec.exported_rung = rec.rung

        def write() -> None:
            try:
                self.tracker.log_artifact_files(rec.run_id, [tmp / MODEL_FILE, tmp / PLAN_FILE])
                self.tracker.set_tags(rec.run_id, {"frontier.onnx_precision": result.precision})
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

        self.later(write)

    def _finish_tracking(self, emissions: Any, status: str) -> None:
        self.later.drain()
        metrics: dict[str, float] = {
            "search_loop_s": self.loop_s,
            "evaluation_s": self.eval_s,
            "failed_trials": sum(1 for r in self.records.values() if r.state == "failed"),
            "tracking_errors": len(self.later.errors),
        }
        if emissions is not None:
            kg = emissions.stop() or 0.0
            data = emissions.final_emissions_data
            metrics["search_co2e_g"] = float(kg) * 1000.0
            metrics["search_energy_kwh"] = float(getattr(data, "energy_consumed", 0.0) or 0.0)
        self.tracker.log_metrics(self.parent, metrics, step=self.generation)
        self.tracker.finish(self.parent, status)

    # -- results ----------------------------------------------------------------------------
    def pareto_frame(self) -> pd.DataFrame:
        rows = []
        for n in self.front_numbers():
            rec = self.records[n]
            rows.append(
                {
                    "trial": n,
                    "run_id": rec.run_id,
                    "rung": self.evaluation.rungs[rec.rung],
                    **rec.values(),
                }
            )
        columns = ["trial", "run_id", "rung", *self.evaluation.metrics]
        return pd.DataFrame(rows, columns=columns)  # the columns also when it is empty

    def closest_miss(self) -> str:
        """When no completed plan meets every constraint: the constraint that came
        closest to holding (smallest violation relative to its bound) and the best value
        reached; '' when some plan is feasible or nothing completed."""
        done = [r.values() for r in self.records.values() if r.state == "complete"]
        if not done or not self.constraints or any(self.feasible(v) for v in done):
            return ""
        misses = []
        for c in self.constraints:
            best = min(done, key=lambda v: c.violation(v[c.objective]))
            if c.holds(best[c.objective]):
                continue
            scale = abs(c.bound) or 1.0
            misses.append((c.violation(best[c.objective]) / scale, c, best[c.objective]))
        if not misses:  # each holds somewhere, never all at once
            return "each constraint holds for some plan, but no plan meets them all"
        _, c, value = min(misses, key=lambda m: m[0])
        return f"closest: {c} (best {c.objective} reached: {value:.6g})"

    def trials_frame(self) -> pd.DataFrame:
        rows = []
        for n, rec in sorted(self.records.items()):
            vals = rec.values() if rec.state == "complete" else {}
            rows.append(
                {
                    "trial": n,
                    "state": rec.state,
                    "rung": self.evaluation.rungs[rec.rung] if rec.rung >= 0 else "",
                    "feasible": bool(vals) and self.feasible(vals),
                    "error": rec.error,
                    **vals,
                }
            )
        return pd.DataFrame(rows)

    def result(self) -> SearchResult:
        return SearchResult(
            pareto=self.pareto_frame(),
            study=self.study,
            mlflow_run_id=self.parent,
            study_name=self.study_name,
            hypervolume=self.hv,
            trials=self.trials_frame(),
        )


def run(config: Config | str | Path, **options: Any) -> SearchResult:
    """Run a search (the Python API for notebooks).

    Args:
        config: a ``Config``, a config file or a built-in experiment name.
        options: ``trials``, ``backend``, ``address``, ``workers``, ``resume``,
            ``progress`` (see ``frontier search --help``).

    Returns:
        A ``SearchResult`` with ``.pareto`` (DataFrame), ``.study`` and ``.mlflow_run_id``.
    """
    return Search(config, **options).run()


def _quiet_codecarbon() -> None:
    """CodeCarbon logs at INFO every 15 s; a search's output is its progress bar."""
    import logging

    logging.getLogger("codecarbon").setLevel(logging.ERROR)


def _emissions_tracker(country_iso: str) -> Any:
    """CodeCarbon, offline, measuring the search's own energy and carbon."""
    try:
        from codecarbon import OfflineEmissionsTracker

        _quiet_codecarbon()
        tracker = OfflineEmissionsTracker(
            country_iso_code=country_iso, save_to_file=False, log_level="error"
        )
        _quiet_codecarbon()  # the tracker sets its own level on creation
        tracker.start()
        return tracker
    except Exception as err:  # carbon accounting must never stop a search
        print(f"warning: CodeCarbon unavailable ({err}); no search energy logged", file=sys.stderr)
        return None


def _plot_fronts(
    tracker: Tracker,
    parent: str,
    objectives: list[Objective],
    points: np.ndarray,
    frame: pd.DataFrame,
) -> None:
    """2-D projections of the trials and the front, one PNG per objective pair
    (matplotlib's object API: safe off the main thread)."""
    import itertools
    import tempfile

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if len(objectives) < 2 or len(points) == 0:
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for (i, a), (j, b) in itertools.combinations(enumerate(objectives), 2):
            fig = Figure(figsize=(5, 4))
            FigureCanvasAgg(fig)
            ax = fig.add_subplot()
            ax.scatter(points[:, i], points[:, j], s=8, c="0.7", label="trials")
            if not frame.empty:
                ax.scatter(frame[a.name], frame[b.name], s=18, c="tab:red", label="front")
            ax.set_xlabel(f"{a.name} ({a.direction})")
            ax.set_ylabel(f"{b.name} ({b.direction})")
            ax.legend(loc="best", fontsize=8)
            fig.tight_layout()
            path = Path(tmp) / f"{a.name}--{b.name}.png".replace("@", "_at_")
            fig.savefig(path, dpi=80)
            files.append(path)
        tracker.log_artifact_files(parent, files, "front")
