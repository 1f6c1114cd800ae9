"""One joint search over a pipeline: the sampler sees every stage's plan and placement in
one space, each trial's frame is scheduled from its stages' scores, and the front is the
pipeline's.

A stage's plan is scored by that stage's own ``TrialRunner`` (its task, teacher, space,
evaluators and device tables, as a single-model search builds them), once per distinct
plan: every trial that shares a stage's plan reuses its score, so a trial that changes
one stage retrains only that stage (``PipelineResult.evaluations`` counts them). Each
stage's latency and energy come from its device tables on every device it may run on;
the trial's placement picks one per stage and ``latency_models.price_frame`` schedules
the frame. The study lives in an Optuna journal file, so an interrupted search resumes.

Metrics of a trial (objective and constraint names):

- ``latency_ms@frame``, ``energy_mj@frame``, ``power_w@frame`` (with ``pipeline.fps``);
- ``size_bytes``, the stages' sizes summed;
- ``STAGE.accuracy`` and ``STAGE.accuracy_drop`` (the uncompressed stage's minus it), and
  ``STAGE.latency_ms``, the stage's latency on its placement;
- ``accuracy_kept``: the worst stage's accuracy as a share of its own uncompressed model's.

Over 500 lines: the joint space, the per-stage score cache, the resume of both and the
frame's values are one trial's path; pricing (``_price``), measuring (``_measure``) and
export (``_export``) already live apart.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frontier.evaluators import MetricKey

from .._log import logger
from ..config._config import Config
from ..config._constraints import Constraint
from ..config._pipeline import FRAME, FRAME_METRICS, metric_direction
from ..front._pareto import Objective, hypervolume, pareto_mask
from ._price import schedule, stage_config, tensor_bytes


@dataclass(frozen=True)
class PipelineTrial:
    """One trial of a pipeline search (plain data).

    Attributes:
        number: the Optuna trial number.
        plans: each stage's plan (``CompressionPlan.to_dict``).
        placement: each stage's device.
        values: every metric (module docstring), or {} where it failed.
        state: ``complete`` or ``failed``.
        error: why it failed.
        feasible: every constraint holds.
    """

    number: int
    plans: dict[str, dict[str, Any]]
    placement: dict[str, str]
    values: dict[str, float]
    state: str = "complete"
    error: str = ""
    feasible: bool = True


@dataclass
class PipelineResult:
    """A pipeline search's outcome.

    Attributes:
        trials: every trial, in order.
        front: the feasible, non-dominated trials.
        baseline: the uncompressed stages in their fastest placement.
        objectives: what was optimised.
        constraints: the constraints, absolute.
        evaluations: per stage, how many distinct plans were scored (trained).
        hypervolume: the front's, normalised by the baseline.
        measured: the uncompressed pipeline and each front member run here, frame by
            frame (``FrameMeasurement``; ``tracking.measure_front``), where their
            devices are this machine's.
    """

    trials: list[PipelineTrial]
    front: list[PipelineTrial]
    baseline: PipelineTrial
    objectives: list[Objective]
    constraints: list[Constraint]
    evaluations: dict[str, int] = field(default_factory=dict)
    hypervolume: float = 0.0
    measured: list[Any] = field(default_factory=list)


class _Prefixed:
    """An Optuna trial whose parameter names carry a stage's name (``det/prune.fc``), so
    one study holds every stage's space."""

    def __init__(self, trial: Any, stage: str) -> None:
        self.trial, self.stage = trial, stage

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self.trial.suggest_categorical(f"{self.stage}/{name}", choices)


class PipelineSearch:
    """A joint search of a pipeline config's stages and placements.

    Building it is cheap; ``prepare()`` builds every stage (its task, trained baseline,
    space and device tables, saying so) and ``run()`` calls it where needed.

    Args:
        config: a config with a ``pipeline`` section.
        store: the DeviceStore tables come from (default: the config's).
        storage: the Optuna journal file (default: ``NAME.pipeline.journal`` here).
    """

    def __init__(self, config: Config, *, store: Any = None, storage: str | None = None) -> None:
        if config.pipeline is None:
            raise ValueError(f"config {config.name!r} has no pipeline section")
        self.config = config
        self.pipeline = config.pipeline
        self.stage_names = [s.name for s in self.pipeline.stages]
        self.store = store
        self.storage = storage or f"{config.name}.pipeline.journal"
        names = config.pipeline.objective_names([o.name for o in config.objectives])
        self.objectives = [Objective(n, metric_direction(n, self.stage_names)) for n in names]
        self._constraints = [Constraint.parse(c) for c in config.constraints]
        # the frame's budget and power limit bind the search unless a constraint says more
        named = {c.objective for c in self._constraints}
        limits = {
            "latency_ms@frame": self.pipeline.budget_ms,
            "power_w@frame": self.pipeline.power_w,
        }
        for metric, bound in limits.items():
            if bound is not None and metric not in named:
                self._constraints.append(Constraint(metric, "<=", bound))
        self.runners: dict[str, Any] = {}
        self.scores: dict[str, dict[str, Any]] = {n: {} for n in self.stage_names}
        self.output_bytes: dict[str, int] = {}
        self.frame_bytes = 0
        self.constraints: list[Constraint] = []
        self._baseline: PipelineTrial | None = None
        self.baseline_values: dict[str, float] = {}
        #: what running inside a frame costs each stage on each device (ms), measured
        #: once and kept beside the journal
        self.context_ms: dict[str, dict[str, float]] = {}

    # -- set-up -------------------------------------------------------------------------
    def prepare(self) -> PipelineTrial:
        """Build every stage and score its uncompressed model; the baseline (the
        uncompressed stages in their fastest placement) resolves relative constraints."""
        if self._baseline is not None:
            return self._baseline
        from frontier.spaces import check_forward

        from ..trials._trials import TrialRunner

        for stage in self.pipeline.stages:
            logger.info(
                "pipeline: building stage %s (task, baseline, space, tables) ...", stage.name
            )
            runner = TrialRunner(stage_config(self.config, stage), store=self.store, driver=True)
            self.runners[stage.name] = runner
            self.output_bytes[stage.name] = tensor_bytes(
                check_forward(runner.teacher, runner.example)
            )
            if FRAME in stage.reads and not self.frame_bytes:
                self.frame_bytes = tensor_bytes(runner.example)
        if self.pipeline.frame_bytes is not None:
            self.frame_bytes = self.pipeline.frame_bytes
        plans = {n: self.runners[n].space.plan_of({}).to_dict() for n in self.stage_names}
        self.context_ms = self._context(plans)
        best: PipelineTrial | None = None
        from frontier.latency_models import placements

        for placement in placements(self._choices()):
            values = self._values(plans, placement, baseline=None)
            if best is None or values["latency_ms@frame"] < best.values["latency_ms@frame"]:
                best = PipelineTrial(-1, plans, placement, values)
        assert best is not None
        base = best.values
        values = {**base, **{f"{n}.accuracy_drop": 0.0 for n in self.stage_names}}
        self._baseline = PipelineTrial(-1, plans, best.placement, values | {"accuracy_kept": 1.0})
        self.baseline_values = self._baseline.values
        self.constraints = [c.resolve(self._baseline.values) for c in self._constraints]
        logger.info(
            "pipeline: uncompressed stages %.4g ms a frame at best (%s)",
            base["latency_ms@frame"],
            ", ".join(f"{n} on {d}" for n, d in best.placement.items()),
        )
        budget = self.pipeline.budget_ms
        if budget is not None and base["latency_ms@frame"] > budget:
            gap = base["latency_ms@frame"] - budget
            logger.info(
                "pipeline: the budget is %.4g ms: compression must save %.4g ms (%.0f%%)",
                budget, gap, 100 * gap / base["latency_ms@frame"],
            )  # fmt: skip
        return self._baseline

    def _choices(self) -> dict[str, list[str]]:
        names = self.config.listed_devices()
        return self.pipeline.placements_of(names)

    @property
    def context_path(self) -> Path:
        """Where the stages' in-frame costs are kept (beside the journal)."""
        return Path(self.storage).with_suffix(".context.json")

    def _context(self, plans: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
        """Each stage's in-frame cost on each device: read from beside the journal where
        a search measured it for these stages and devices, else measured here and kept."""
        from ._measure import stage_context_ms

        if not self.pipeline.stage_context:
            return {}
        choices = self._choices()
        key = {"plans": plans, "choices": choices}
        if self.context_path.exists():
            kept = json.loads(self.context_path.read_text())
            if kept.get("key") == json.loads(json.dumps(key)):
                return dict(kept["context_ms"])
        context = stage_context_ms(self, plans, choices)
        self.context_path.parent.mkdir(parents=True, exist_ok=True)
        self.context_path.write_text(json.dumps({"key": key, "context_ms": context}, indent=1))
        return context

    def stage_latency_ms(
        self, stage: str, values: Mapping[str, float], placement: Mapping[str, str]
    ) -> float:
        """A stage's latency inside the frame: its table's on the device it is placed on,
        plus what the frame costs it there when another stage shares that device."""
        device = placement[stage]
        shared = any(placement[s] == device for s in placement if s != stage)
        extra = self.context_ms.get(stage, {}).get(device, 0.0) if shared else 0.0
        return float(values[MetricKey.name("latency_ms", device)]) + extra

    # -- one trial ----------------------------------------------------------------------
    def score_stage(self, stage: str, plan: Mapping[str, Any]) -> dict[str, float]:
        """A stage's metrics for ``plan``: scored once per distinct plan, then reused."""
        key = json.dumps(plan, sort_keys=True)
        cached = self.scores[stage].get(key)
        if cached is None:
            cached = dict(self.runners[stage].run_job(plan, 0).values)
            self.scores[stage][key] = cached
        return cached

    def _values(
        self,
        plans: Mapping[str, Mapping[str, Any]],
        placement: Mapping[str, str],
        baseline: PipelineTrial | None,
    ) -> dict[str, float]:
        stage_values = {n: self.score_stage(n, plans[n]) for n in self.stage_names}
        latency = {n: self.stage_latency_ms(n, v, placement) for n, v in stage_values.items()}
        frame = schedule(
            self.config,
            placement,
            latency,
            {
                n: v.get(MetricKey.name("energy_mj", placement[n]), 0.0)
                for n, v in stage_values.items()
            },
            self.output_bytes,
            self.frame_bytes,
        )
        out = {
            "latency_ms@frame": frame.latency_ms,
            "energy_mj@frame": frame.energy_mj,
            "size_bytes": sum(v["size_bytes"] for v in stage_values.values()),
        }
        if self.pipeline.fps is not None:
            out["power_w@frame"] = frame.power_w(self.pipeline.fps)
        kept = math.inf
        for n, v in stage_values.items():
            out[f"{n}.accuracy"] = v["accuracy"]
            out[f"{n}.latency_ms"] = latency[n]
            if baseline is not None:
                base = baseline.values[f"{n}.accuracy"]
                out[f"{n}.accuracy_drop"] = base - v["accuracy"]
                kept = min(kept, v["accuracy"] / base if base else 0.0)
        if baseline is not None:
            out["accuracy_kept"] = kept
        return out

    def evaluate(
        self, plans: Mapping[str, Mapping[str, Any]], placement: Mapping[str, str]
    ) -> dict[str, float]:
        """Every metric of one pipeline: each stage's plan (scored or reused) on its
        placement, the frame scheduled."""
        return self._values(plans, placement, self.prepare())

    # -- the loop -----------------------------------------------------------------------
    def run(self, *, trials: int | None = None) -> PipelineResult:
        """Run (or resume) the search for ``trials`` trials in all (default: the
        config's ``search.trials``)."""
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        from optuna.trial import TrialState

        from ..trials._samplers import build_sampler

        total = trials or self.config.search.trials
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        Path(self.storage).parent.mkdir(parents=True, exist_ok=True)
        directions: list[Any] = [o.direction for o in self.objectives]
        study = optuna.create_study(
            study_name=self.config.name,
            storage=JournalStorage(JournalFileBackend(self.storage)),
            directions=directions,
            sampler=build_sampler(
                self.config.search.sampler,
                population=self.config.search.population,
                seed=self.config.search.seed,
            ),
            load_if_exists=True,
        )
        done = len([t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)])
        if done:
            logger.info("pipeline: resuming %s at trial %d of %d", self.config.name, done, total)
            self._reuse_scores(study)
        baseline = self.prepare()
        if not done:  # the uncompressed pipeline first, in its fastest placement
            study.enqueue_trial(self._params(baseline))
        choices = self._choices()
        tracker = self._tracker(baseline)
        started = time.monotonic()
        for k in range(done, total):
            if getattr(study.sampler, "exhausted", False):
                logger.info("pipeline: every combination tried after %d trials", k)
                break
            trial = study.ask()
            plans = {
                s: self.runners[s].space.suggest(_Prefixed(trial, s)).to_dict()
                for s in self.stage_names
            }
            placement = {
                s: trial.suggest_categorical(f"{s}/placement", choices[s]) for s in choices
            }
            trial.set_user_attr("plans", plans)
            trial.set_user_attr("placement", placement)
            try:
                values = self.evaluate(plans, placement)
            except Exception as err:  # a failed trial is recorded and the search goes on
                error = f"{type(err).__name__}: {err}"[:2000]
                trial.set_user_attr("error", error)
                study.tell(trial, state=TrialState.FAIL)
                logger.warning("pipeline: trial %d failed: %s", trial.number, error)
                tracker.log_trial(
                    PipelineTrial(trial.number, plans, placement, {}, "failed", error, False)
                )
                continue
            for c in self.constraints:
                trial.set_constraint(str(c), c.violation(values[c.objective]))
            trial.set_user_attr("values", values)
            trial.set_user_attr(
                "stages", {s: self.score_stage(s, plans[s]) for s in self.stage_names}
            )
            study.tell(trial, [values[o.name] for o in self.objectives])
            tracker.log_trial(
                PipelineTrial(
                    trial.number,
                    plans,
                    placement,
                    values,
                    feasible=all(c.holds(values[c.objective]) for c in self.constraints),
                )
            )
            logger.info(
                "pipeline: trial %d/%d: %.4g ms a frame, accuracy kept %.3f (%.0f s)",
                k + 1,
                total,
                values["latency_ms@frame"],
                values["accuracy_kept"],
                time.monotonic() - started,
            )
        result = self._result(study)
        for t in result.trials:  # what a killed search told its study but did not log
            tracker.log_trial(t)
        if self.config.tracking.measure_front and result.front:
            result.measured = self.measure(result.front)
        if self.config.tracking.export_front:
            self.export_front(result, tracker)
        tracker.finish(result)
        return result

    def export_front(self, result: PipelineResult, tracker: Any) -> None:
        """Each front member's stages exported (fine-tuned at the top rung, as scored) and
        its ``pipeline.json``, logged on its run for ``frontier pick``."""
        import tempfile

        from ._export import export_member

        members = [t for t in result.front if t.number >= 0]
        logger.info("pipeline: exporting %d front members' stages ...", len(members))
        done: dict[str, Path] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for t in members:
                folder = Path(tmp) / f"trial-{t.number}"
                try:
                    files = export_member(self, t, folder, done)
                except Exception as err:  # the trial stands; its run says why
                    logger.warning("pipeline: trial %d not exported (%s)", t.number, err)
                    continue
                tracker.log_member(t.number, folder, files)

    def export_member(self, trial: PipelineTrial, folder: Path) -> list[Path]:
        """``trial``'s stages (``STAGE/model.onnx``, fine-tuned at the top rung as scored,
        and ``STAGE/plan.json``) and its ``pipeline.json``, written under ``folder``."""
        from ._export import export_member

        return export_member(self, trial, Path(folder), {})

    def _tracker(self, baseline: PipelineTrial) -> Any:
        """The search's MLflow runs: its parent run started (or found, resumed)."""
        from ._track import PipelineTracker

        tracking = self.config.tracking
        tracker = PipelineTracker(tracking.uri, tracking.experiment or self.config.name)
        metrics = [
            Objective(n, metric_direction(n, self.stage_names))
            for n in baseline.values
            if n in FRAME_METRICS or n.partition(".")[0] in self.stage_names
        ]
        tracker.start(
            self.config.name,
            self.storage,
            objectives=self.objectives,
            metrics=self.objectives + [m for m in metrics if m not in self.objectives],
            constraints=[str(c) for c in self.constraints],
            baseline=baseline.values,
            stages={s.name: {"reads": s.reads, "task": s.task.name} for s in self.pipeline.stages},
        )
        return tracker

    def measure(self, members: list[PipelineTrial]) -> list[Any]:
        """Run the uncompressed pipeline and ``members`` here, frame by frame, and say
        how their measured frame times and speed-ups compare with the prediction."""
        from ._measure import measure_trials

        logger.info("pipeline: running %d front members here, frame by frame ...", len(members))
        try:
            measured = measure_trials(self, members)
        except Exception as err:  # a report that fails costs the search nothing
            logger.warning("pipeline: front not measured (%s: %s)", type(err).__name__, err)
            return []
        for m in measured:
            label = "uncompressed" if m.number == -1 else f"trial {m.number}"
            logger.info(
                "pipeline: %s: predicted %.4g ms a frame, measured %.4g ms; %.2fx the "
                "uncompressed pipeline's speed predicted, %.2fx measured",
                label, m.predicted_ms, m.measured_ms, m.speedup_predicted, m.speedup_measured,
            )  # fmt: skip
        return measured

    def _reuse_scores(self, study: Any) -> None:
        """The stage scores a resumed search's completed trials kept: a plan scored
        before is not scored again."""
        for t in study.trials:
            plans, scored = t.user_attrs.get("plans", {}), t.user_attrs.get("stages", {})
            for s, values in scored.items():
                if s in self.scores and s in plans:
                    self.scores[s].setdefault(json.dumps(plans[s], sort_keys=True), values)
        kept = sum(len(v) for v in self.scores.values())
        if kept:
            logger.info("pipeline: %d stage plans scored before are not scored again", kept)

    def _params(self, trial: PipelineTrial) -> dict[str, Any]:
        """The Optuna parameters of a pipeline: each stage's plan and placement."""
        out: dict[str, Any] = {}
        for s in self.stage_names:
            space = self.runners[s].space
            uncompressed = space.uncompressed_params()
            out |= {f"{s}/{k}": v for k, v in uncompressed.items()}
            out[f"{s}/placement"] = trial.placement[s]
        return out

    def _result(self, study: Any) -> PipelineResult:
        import numpy as np
        from optuna.trial import TrialState

        baseline = self.prepare()
        trials: list[PipelineTrial] = []
        for t in study.trials:
            plans, placement = t.user_attrs.get("plans", {}), t.user_attrs.get("placement", {})
            if t.state == TrialState.COMPLETE:
                values = dict(t.user_attrs["values"])
                trials.append(
                    PipelineTrial(
                        t.number,
                        plans,
                        placement,
                        values,
                        feasible=all(c.holds(values[c.objective]) for c in self.constraints),
                    )
                )
            elif t.state == TrialState.FAIL:
                trials.append(
                    PipelineTrial(
                        t.number,
                        plans,
                        placement,
                        {},
                        "failed",
                        t.user_attrs.get("error", ""),
                        False,
                    )
                )
        ok = [t for t in trials if t.state == "complete" and t.feasible]
        front: list[PipelineTrial] = []
        hv = 0.0
        if ok:
            table = np.array([[t.values[o.name] for o in self.objectives] for t in ok])
            front = [t for t, on in zip(ok, pareto_mask(table, self.objectives), strict=True) if on]
            base = [baseline.values[o.name] for o in self.objectives]
            hv = hypervolume(
                np.array([[t.values[o.name] for o in self.objectives] for t in front]),
                self.objectives,
                base,
            )
        return PipelineResult(
            trials,
            front,
            baseline,
            self.objectives,
            self.constraints,
            {s: len(self.scores[s]) for s in self.stage_names},
            hv,
        )
