"""A pipeline search in MLflow, as a single-model search is: one parent run (its
objectives, constraints and baseline as the tags ``frontier pareto`` reads, the front's
hypervolume and measured frames as metrics) and one nested run per trial, holding every
stage's plan (``STAGE/plan.json``), placement (``STAGE.placement``) and every metric.
Front members are tagged ``frontier.pareto`` when the search ends, so ``frontier pareto
--experiment NAME`` lists the pipeline's front."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config._uri import TrackingError
from ..front._pareto import Objective
from ..tracking._tracking import Tag, Tracker, find_search

#: where a pipeline's study lives, on its parent run: a resumed search finds its run by it
PIPELINE_TAG = "frontier.pipeline"


class PipelineTracker:
    """Writes one pipeline search to MLflow.

    Args:
        uri: the tracking URI.
        experiment: the MLflow experiment (default: the config's name).
    """

    def __init__(self, uri: str, experiment: str) -> None:
        self.tracker = Tracker(uri, experiment)
        self.experiment = experiment
        self.parent = ""
        self.logged: set[int] = set()

    def start(
        self,
        name: str,
        storage: str,
        *,
        objectives: Sequence[Objective],
        metrics: Sequence[Objective],
        constraints: Sequence[str],
        baseline: dict[str, float],
        stages: dict[str, Any],
    ) -> str:
        """The search's parent run: the one a search of this study started before
        (resumed, its trials already logged kept), else a new one."""
        try:
            found = find_search(self.tracker.uri, self.experiment)
        except ValueError:
            found = None
        if found is not None and found.data.tags.get(PIPELINE_TAG) == storage:
            self.parent = found.info.run_id
            self.tracker.reopen(self.parent)
            self.logged = set(self.tracker.trial_runs(self.parent))
            return self.parent
        as_dicts = [{"name": o.name, "direction": o.direction} for o in metrics]
        self.parent = self.tracker.start_parent(
            name,
            params={"stages": json.dumps(stages)},
            tags={
                PIPELINE_TAG: storage,
                Tag.STUDY: name,
                Tag.STORAGE: storage,
                Tag.OBJECTIVES: json.dumps(
                    [{"name": o.name, "direction": o.direction} for o in objectives]
                ),
                Tag.METRICS: json.dumps(as_dicts),
                Tag.CONSTRAINTS: json.dumps(list(constraints)),
                Tag.BASELINE: json.dumps(baseline),
            },
        )
        self.tracker.log_metrics(self.parent, {f"baseline_{k}": v for k, v in baseline.items()})
        return self.parent

    def log_trial(self, trial: Any) -> None:
        """One trial's run: every stage's plan and placement, every metric."""
        if trial.number in self.logged:
            return
        params = {f"{s}.placement": d for s, d in trial.placement.items()}
        tags = {
            Tag.STATE: trial.state,
            Tag.FEASIBLE: str(trial.feasible).lower(),
            **({Tag.ERROR: trial.error[:5000]} if trial.error else {}),
        }
        run = self.tracker.log_trial(
            self.parent,
            trial.number,
            params=params,
            values=trial.values,
            tags=tags,
            failed=trial.state == "failed",
        )
        for stage, plan in trial.plans.items():
            self.tracker.log_text(run, json.dumps(plan, indent=1), f"{stage}/plan.json")
        self.logged.add(trial.number)

    def log_member(self, number: int, folder: Path, files: Sequence[Path]) -> None:
        """A front member's exported stages and ``pipeline.json``, as its run's artifacts
        (under the same relative paths)."""
        run = self.tracker.trial_runs(self.parent)[number].run_id
        for f in files:
            rel = f.relative_to(folder).parent
            self.tracker.log_artifact_files(run, [f], str(rel) if str(rel) != "." else None)

    def finish(self, result: Any) -> None:
        """Tag the front, log the hypervolume and the frames measured here, and end the
        parent run."""
        runs = self.tracker.trial_runs(self.parent)
        front = {t.number for t in result.front}
        for number, logged in runs.items():
            if (number in front) != logged.pareto:
                self.tracker.set_tags(logged.run_id, {Tag.PARETO: str(number in front).lower()})
        metrics: dict[str, float] = {"hypervolume": result.hypervolume}
        for m in result.measured:
            if m.number < 0:
                metrics["baseline_latency_measured_ms@frame"] = m.measured_ms
            elif m.number in runs:
                self.tracker.log_metrics(
                    runs[m.number].run_id,
                    {
                        "latency_measured_ms@frame": m.measured_ms,
                        "speedup_measured@frame": m.speedup_measured,
                    },
                )
        gaps = [m.speedup_error for m in result.measured if m.number >= 0]
        if gaps:
            metrics["latency_error@frame"] = sorted(gaps)[len(gaps) // 2]
        self.tracker.log_metrics(self.parent, metrics)
        self.tracker.finish(self.parent)


def is_pipeline(parent: Any) -> bool:
    """Whether a search's parent run is a pipeline search's."""
    return PIPELINE_TAG in parent.data.tags


def download_pipeline(uri: str, run_id: str, out_dir: Path) -> dict[str, Path]:
    """A pipeline front member's folder: ``pipeline.json``, each stage's model and plan,
    and ``run_pipeline.py``, the example that runs it."""
    import os

    import mlflow

    from ..tracking._tracking import resolve_uri
    from ._export import EXAMPLE, MANIFEST, RUN_EXAMPLE, read_manifest

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    out_dir.mkdir(parents=True, exist_ok=True)
    where = {"run_id": run_id, "tracking_uri": resolve_uri(uri)}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            got = Path(
                mlflow.artifacts.download_artifacts(artifact_path=MANIFEST, dst_path=tmp, **where)
            )
        except Exception as err:
            raise TrackingError(
                f"run {run_id} has no {MANIFEST} artifact (only front members are exported)"
            ) from err
        spec = read_manifest(got)
        (out_dir / MANIFEST).write_bytes(got.read_bytes())
    files = {MANIFEST: out_dir / MANIFEST}
    for stage in spec["stages"]:
        for name in (stage["model"], stage["plan"]):
            with tempfile.TemporaryDirectory() as tmp:
                path = mlflow.artifacts.download_artifacts(
                    artifact_path=name, dst_path=tmp, **where
                )
                target = out_dir / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(Path(path).read_bytes())
                files[name] = target
    (out_dir / EXAMPLE).write_text(RUN_EXAMPLE)
    files[EXAMPLE] = out_dir / EXAMPLE
    return files
