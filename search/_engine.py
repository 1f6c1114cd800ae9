"""The search loop: ask the sampler, submit to a backend, tell the study, notify the
callbacks. Storage (``_storage``), the front (``_front``), promotion (``_promotion``),
MLflow (``_mlflow``) and progress (``_callbacks``) live in their own modules."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ._anchors import anchor_params
from ._backends import Backend, Job, build_backend, check_ray_address, ray_address
from ._callbacks import Callback, Emissions, progress_callbacks
from ._config import Config, load_config
from ._evaluation import ACCURACY, Evaluation, TrialResult
from ._front import Front, JobExport, SearchResult, TrialRecord, plan_key
from ._mlflow import MlflowCallback
from ._pareto import Objective
from ._promotion import Promotion, SpreadPromotion
from ._samplers import ask_unique, build_sampler
from ._storage import (
    BASELINE_ATTR,
    GENERATION_ATTR,
    PROMOTION_ATTR,
    SearchError,
    StudyStore,
    default_storage,
    restore,
    search_folders,
    writable,
)
from ._tracking import no_telemetry

#: the per-layer sensitivity pass scores each choice at the first rung while there are
#: at most this share of the trial budget's choices, else at the proxy fidelity
SENSITIVITY_SHARE = 0.2


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
        fidelity = self.config.search.fidelity
        self.promotion = promotion or SpreadPromotion(
            share=fidelity.promote,
            slack=fidelity.slack,
            toward=fidelity.toward,
            adapt=fidelity.adapt,
        )
        self.tracking = MlflowCallback(
            uri=self.config.tracking.uri,
            experiment=self.config.tracking.experiment or self.config.name,
            export_front=self.config.tracking.export_front,
        )
        self.callbacks: list[Callback] = [
            Emissions(self.config.carbon.country_iso),
            self.tracking,
            *progress_callbacks(progress),
            *callbacks,
        ]
        self.records: dict[int, TrialRecord] = {}
        self.constraints = self.config.parsed_constraints()
        #: numbers that describe the whole search, logged at its end
        self.summary: dict[str, float] = {}
        #: per-layer sensitivity rows (``search.sensitivity``), else empty
        self.sensitivity: list[dict[str, Any]] = []
        #: the fidelity the sensitivities were measured at
        self.sensitivity_fidelity = ""
        #: wall seconds of the search loop, and of the evaluations inside it (for
        #: workers: their own time); the difference is the engine's overhead
        self.loop_s = 0.0
        self.eval_s = 0.0
        #: seconds the jobs spent exporting their scored models (not in ``eval_s``)
        self.export_s = 0.0
        #: seconds of each evaluation this process finished, by rung
        self.rung_s: dict[int, list[float]] = {}
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
        directions = [o.direction for o in self.objectives]
        self.study = self.study_store.open(cfg.name, directions, self.sampler, resume=self.resume)
        self.study_name = self.study.study_name
        if self.sampler is None:  # reseeded on resume: the same seed would replay old draws
            s = cfg.search
            seed = s.seed + len(self.study.trials)
            self.study.sampler = build_sampler(s.sampler, population=s.population, seed=seed)
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
            resolved = [c.resolve(self.baseline) for c in self.constraints]
        except ValueError as err:
            raise SearchError(str(err)) from None
        shown = ", ".join(f"{k} {v:.6g}" for k, v in self.baseline.items())
        print(f"frontier: baseline (the uncompressed model): {shown}", file=sys.stderr)
        for was, now in zip(self.constraints, resolved, strict=True):
            if str(was) != str(now):
                print(f"frontier: constraint {was} -> {now}", file=sys.stderr)
        self.constraints = resolved
        self.front = Front(self.records, self.objectives, self.constraints)
        self.promotion.start(self.baseline)
        self.promotion.restore(self.study.user_attrs.get(PROMOTION_ATTR, {}))
        self.generation = int(self.study.user_attrs.get(GENERATION_ATTR, 0))

    def _sensitivity(self) -> None:
        """Per-layer sensitivity at the first rung, cached (a resumed search reads it)."""
        from frontier.experiments import cache_dir

        from ._sensitivity import choices, sensitivity

        def progress(done: int, total: int, seconds: float) -> None:
            if done == total or done % 20 == 0:
                print(f"frontier: sensitivity {done}/{total} ({seconds:.0f} s)", file=sys.stderr)

        # each choice alone at the first rung while that is at most a fifth of the trial
        # budget; else without fine-tuning (a large model has hundreds of choices)
        count = len(choices(self.evaluation.space)) + 1
        rung: int | str = 0
        if (
            self.evaluation.rungs[0] != "proxy"
            and count > SENSITIVITY_SHARE * self.config.search.trials
        ):
            rung = "proxy"
            print(
                f"frontier: sensitivity of {count} choices at the proxy fidelity (more than "
                f"{SENSITIVITY_SHARE:.0%} of {self.config.search.trials} trials)",
                file=sys.stderr,
            )
        self.sensitivity_fidelity = self.evaluation.fidelity(rung)
        start = time.perf_counter()
        self.sensitivity = sensitivity(
            self.evaluation,
            rung=rung,
            cache=cache_dir() / f"sensitivity-{self.config.name}.json",
            progress=progress,
        )
        self.summary["sensitivity_s"] = time.perf_counter() - start

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> SearchResult:
        """Run the search to its trial budget; returns its result."""
        cfg = self.config
        for what, folder in search_folders(cfg).items():
            writable(folder, what)
        address = ray_address(cfg.backend.address) if cfg.backend.kind == "ray" else None
        if address:  # before any long work; the backend checks again when it joins
            check_ray_address(address)
        print(f"frontier: building the {cfg.name} task and space ...", file=sys.stderr)
        # the teacher is checked before the device tables are measured (a new study)
        self.evaluation = Evaluation(cfg, store=self.store, check_teacher=not self.resume)
        for w in self.evaluation.warnings:
            print(f"warning: {w}", file=sys.stderr)
        for note in self.evaluation.notes:
            print(f"note: {note}", file=sys.stderr)
        self.objectives: list[Objective] = self.evaluation.objectives()
        try:
            self._open()
            ev = self.evaluation
            if ACCURACY in ev.metrics and ev.rungs != ["proxy"]:
                # distillation's soft targets, once here with every core, before workers
                # start (a task caches them; each worker would otherwise make its own)
                ev.context.soft_teacher  # noqa: B018
            backend = build_backend(cfg, self.evaluation)
            print(
                f"frontier: study {self.study_name!r} in {self.study_store.url}, {self.done} "
                f"of {cfg.search.trials} trials done, backend {backend.name} "
                f"({backend.slots} at a time), MLflow at {cfg.tracking.uri}",
                file=sys.stderr,
            )
            sampler = self.study.sampler
            if cfg.search.sensitivity or getattr(sampler, "wants_sensitivity", False):
                self._sensitivity()
            if hasattr(sampler, "bind"):  # a sampler that screens plans on what it knows
                sampler.bind(self)
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
                    job_export_s=self.export_s,
                    failed_trials=sum(1 for r in self.records.values() if r.state == "failed"),
                    **promotion_savings(self.rung_s),
                )
                if hasattr(self.study.sampler, "propose_s"):  # time spent screening plans
                    self.summary["sampler_propose_s"] = self.study.sampler.propose_s
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
            print(
                f"frontier: trial {rec.number} failed: {rec.error.splitlines()[0]}", file=sys.stderr
            )
        else:
            self.eval_s += getattr(outcome, "wall_s", 0.0)
            self.rung_s.setdefault(0, []).append(getattr(outcome, "wall_s", 0.0))
            if isinstance(outcome, TrialResult):
                self._keep_export(rec, 0, outcome)
        self.records[rec.number] = rec
        self.front.changed()
        self._notify("on_trial", rec)

    def _keep_export(self, rec: TrialRecord, rung: int, outcome: TrialResult) -> None:
        """The model ``outcome``'s job exported, kept on ``rec`` for the MLflow callback."""
        if outcome.onnx is not None or outcome.export_error:
            rec.exports[rung] = JobExport(
                outcome.onnx, outcome.onnx_precision, outcome.export_error
            )
            self.export_s += outcome.export_s

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
            self._keep_export(rec, rung, outcome)
            self.eval_s += outcome.wall_s
            self.rung_s.setdefault(rung, []).append(outcome.wall_s)
        self.front.changed()
        self.study_store.save_rungs(self.study, rec)
        self._notify("on_promotion", rec, rung)

    def _generation(self, final: bool = False) -> list[tuple[int, int]]:
        promotions: list[tuple[int, int]] = []
        if ACCURACY in self.evaluation.metrics and len(self.evaluation.rungs) > 1:
            promotions = self.promotion.select(self.front, len(self.evaluation.rungs))
            for note in self.promotion.take_notes():
                print(f"frontier: promotion: {note}", file=sys.stderr)
            self.study.set_user_attr(PROMOTION_ATTR, self.promotion.state())
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
        return self.front.trials_frame(self.evaluation.rungs)

    def result(self) -> SearchResult:
        return SearchResult(
            pareto=self.pareto_frame(),
            study=self.study,
            mlflow_run_id=self.tracking.parent,
            study_name=self.study_name,
            hypervolume=self.hypervolume,
            trials=self.trials_frame(),
        )


def promotion_savings(rung_s: dict[int, list[float]]) -> dict[str, float]:
    """What multi-fidelity promotion saved, from the seconds of each evaluation by rung:
    ``top_rung_only_s`` estimates scoring every trial at the highest rung reached (the
    trials times that rung's mean evaluation), ``promotion_saved_s`` is that minus what
    all evaluations took. Empty with one rung, or when no trial went up."""
    top = max(rung_s, default=0)
    if top == 0 or not rung_s.get(0) or not rung_s[top]:
        return {}
    trials = len(rung_s[0])
    estimate = trials * sum(rung_s[top]) / len(rung_s[top])
    spent = sum(sum(v) for v in rung_s.values())
    out = {f"rung{r}_evaluations": float(len(v)) for r, v in sorted(rung_s.items())}
    return {**out, "top_rung_only_s": estimate, "promotion_saved_s": estimate - spent}


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
