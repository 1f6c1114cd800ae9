"""MLflow: one parent run per search, one nested run per trial, the front as artifacts;
and reading fronts back for ``frontier pareto`` and ``frontier pick``.

Only ONNX and JSON are ever read back from MLflow artifacts.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from .._log import requiet
from ..config._uri import TrackingError
from ..front._pareto import Objective

#: a front member's accuracy on the test split, logged at the end of a search: it
#: reports, and nothing that chooses models reads it
TEST_METRIC = "accuracy_test"
#: + DEVICE: a front member's latency measured here at the end of a search, by the
#: timing protocol, beside the table's ``latency_ms@DEVICE``
MEASURED_PREFIX = "latency_measured_ms@"
#: a predicted latency further than this share from its measurement is flagged
PREDICTION_TOLERANCE = 0.10


class Tag:
    """Every ``frontier.*`` MLflow tag name, written by ``MlflowCallback`` and read back by
    ``frontier pareto`` / ``pick``; nothing else spells them."""

    KIND = "frontier.kind"  # "search" (the parent run) or "trial"
    # on the parent run
    VERSION = "frontier.version"
    STUDY = "frontier.study"
    STORAGE = "frontier.storage"
    OBJECTIVES = "frontier.objectives"
    METRICS = "frontier.metrics"
    CONSTRAINTS = "frontier.constraints"
    CONSTRAINTS_AS_WRITTEN = "frontier.constraints_as_written"
    REFERENCE_POINT = "frontier.reference_point"
    HV_NORMALISATION = "frontier.hv_normalisation"
    BASELINE = "frontier.baseline"
    DEVICE_TABLES = "frontier.device_tables"
    #: device -> what its table's own noise means to a reader (``DeviceMeta.noise_band``)
    NOISE_BANDS = "frontier.noise_bands"
    NOTES = "frontier.notes"
    #: why a front member has no ONNX model (its export failed)
    EXPORT_ERROR = "frontier.export_error"
    # on each trial run
    TRIAL = "frontier.trial"
    PARETO = "frontier.pareto"
    STATE = "frontier.state"
    FEASIBLE = "frontier.feasible"
    ERROR = "frontier.error"
    NODE = "frontier.node"  # the cluster node that scored the trial (Ray)
    #: the accelerator that trained and scored the trial (``cpu``, ``cuda:0 (NVIDIA H200)``)
    TRAIN_DEVICE = "frontier.train_device"
    RUNG = "frontier.rung"
    RUNG_INDEX = "frontier.rung_index"
    ONNX_PRECISION = "frontier.onnx_precision"
    #: the rung whose model the run's ``model.onnx`` artifact is
    EXPORTED_RUNG = "frontier.exported_rung"


PARETO_TAG = Tag.PARETO
TRIAL_TAG = Tag.TRIAL
KIND_TAG = Tag.KIND
PARENT_TAG = "mlflow.parentRunId"
PLAN_FILE = "plan.json"
MODEL_FILE = "model.onnx"


def no_telemetry() -> None:
    """Frontier sends nothing anywhere: MLflow's telemetry and Ray's usage stats are off
    unless the user turned them on explicitly. MLflow's client also stops printing two
    lines of run links per finished trial run against a tracking server (on stdout,
    where the front is printed, and at the cost of one more request per run)."""
    import os

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def prediction_ratio(predicted_ms: float, measured_ms: float, scale: float) -> float:
    """A table's prediction over a measurement of the same model, the measurement
    stated in the table's time: ``scale`` is the uncompressed model's latency by the
    table over its latency timed beside the measurement. So a machine that runs
    everything faster or slower than when its table was built moves no ratio: what is
    compared is the speed-up over the uncompressed model, predicted against measured."""
    return predicted_ms / (measured_ms * scale)


def metric_key(name: str) -> str:
    """MLflow's name for an objective: it forbids ``@``, so ``latency_ms@pi4`` is
    logged as ``latency_ms/pi4``."""
    return name.replace("@", "/")


def objective_name(key: str) -> str:
    return key.replace("/", "@")


def resolve_uri(uri: str) -> str:
    """``sqlite:///mlflow.db`` made absolute: MLflow caches stores by URI, so a
    relative one would follow the first working directory, not the current one."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str(Path(uri.removeprefix(prefix)).expanduser().resolve())
    return uri


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    requiet()  # importing MLflow put its terminal handler back
    return MlflowClient(tracking_uri=resolve_uri(uri))


class LoggedTrial(NamedTuple):
    """What MLflow holds of one trial run: enough to tell whether a resumed search must
    write it again."""

    run_id: str
    status: str  # MLflow's: RUNNING, FINISHED, FAILED, KILLED
    pareto: bool
    rung_index: int
    exported_rung: int


def _chunks(items: list[Any], size: int = 100) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


class Tracker:
    """Writes one search to MLflow.

    Args:
        uri: the tracking URI (``sqlite:///mlflow.db`` or ``http://host:port``).
        experiment: the MLflow experiment name.
    """

    def __init__(self, uri: str, experiment: str) -> None:
        self.uri = resolve_uri(uri)
        self.client = _client(uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (
            found.experiment_id if found else self.client.create_experiment(experiment)
        )

    # -- the parent run -----------------------------------------------------------------
    def start_parent(self, name: str, *, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={KIND_TAG: "search", **tags}
        )
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for chunk in _chunks(items):
            self.client.log_batch(run.info.run_id, params=chunk)
        return str(run.info.run_id)

    def reopen(self, run_id: str) -> None:
        self.client.update_run(run_id, status="RUNNING")

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(metric_key(k), float(v), now, step) for k, v in metrics.items()]
        for chunk in _chunks(items, 1000):
            self.client.log_batch(run_id, metrics=chunk)

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    # -- trial runs -----------------------------------------------------------------------
    def log_trial(
        self,
        parent: str,
        number: int,
        *,
        params: Mapping[str, Any],
        values: Mapping[str, float],
        tags: Mapping[str, str],
        failed: bool = False,
    ) -> str:
        """One nested run for trial ``number``: the plan's parameters, every metric,
        its rung and state."""
        from mlflow.entities import Param

        # tags go with create_run: log_batch writes tags in a transaction of their own
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"trial-{number}",
            tags={**tags, PARENT_TAG: parent, TRIAL_TAG: str(number), KIND_TAG: "trial"},
        )
        run_id = str(run.info.run_id)
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(metric_key(k), float(v), now, 0) for k, v in values.items()]
        items = [Param(k, str(v)) for k, v in params.items()]
        for i, chunk in enumerate(_chunks(items)):  # one write for most plans
            self.client.log_batch(run_id, params=chunk, metrics=metrics if i == 0 else [])
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
        return run_id

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_artifact_files(
        self, run_id: str, files: Sequence[Path], path: str | None = None
    ) -> None:
        for f in files:
            self.client.log_artifact(run_id, str(f), path)

    def trial_runs(self, parent: str) -> dict[int, LoggedTrial]:
        """Trial number -> what is logged of each trial under ``parent`` (the newest run
        where a number has several)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{PARENT_TAG} = '{parent}'",
            max_results=50000,
            order_by=["start_time ASC"],
        )
        out: dict[int, LoggedTrial] = {}
        for r in runs:
            tags = r.data.tags
            if TRIAL_TAG not in tags:
                continue
            out[int(tags[TRIAL_TAG])] = LoggedTrial(
                run_id=r.info.run_id,
                status=r.info.status,
                pareto=tags.get(PARETO_TAG) == "true",
                rung_index=int(tags.get(Tag.RUNG_INDEX) or -1),
                exported_rung=int(tags.get(Tag.EXPORTED_RUNG) or -1),
            )
        return out

    def delete_run(self, run_id: str) -> None:
        """Drop a run a killed search left half written (it is logged again whole)."""
        self.client.delete_run(run_id)


# -- reading fronts back ---------------------------------------------------------------------
def find_search(uri: str, experiment: str | None = None, run_id: str | None = None) -> Any:
    """The parent run of a search: ``run_id``, or the latest search of ``experiment``
    (default: the latest search of any experiment).

    Reading never creates a store: a SQLite file that does not exist is an error.
    """
    prefix = "sqlite:///"
    path = Path(resolve_uri(uri).removeprefix(prefix))
    if uri.startswith(prefix) and not path.is_file():
        raise TrackingError(
            f"no MLflow database at {path}: run `frontier search` here first, or point "
            "--tracking-uri (or $MLFLOW_TRACKING_URI) at the store a search wrote"
        )
    client = _client(uri)
    if run_id:
        run = client.get_run(run_id)
        if run.data.tags.get(KIND_TAG) != "search":
            parent = run.data.tags.get(PARENT_TAG)
            if parent is None:
                raise TrackingError(f"run {run_id} is not a Frontier search or trial run")
            run = client.get_run(parent)
        return run
    if experiment:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            names = [e.name for e in client.search_experiments()]
            raise TrackingError(f"no MLflow experiment {experiment!r} at {uri}; have: {names}")
        ids = [found.experiment_id]
    else:
        ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(
        ids,
        filter_string=f"tags.{KIND_TAG} = 'search'",
        order_by=["start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise TrackingError(f"no Frontier search in {experiment or 'any experiment'} at {uri}")
    return runs[0]


def objectives_of(parent: Any) -> list[Objective]:
    return [Objective(**o) for o in json.loads(parent.data.tags[Tag.OBJECTIVES])]


def metrics_of(parent: Any) -> list[Objective]:
    """Every metric the search recorded, with its direction (objectives first)."""
    found = parent.data.tags.get(Tag.METRICS)
    return [Objective(**o) for o in json.loads(found)] if found else objectives_of(parent)


def front_frame(uri: str, parent: Any, *, members_only: bool = True) -> pd.DataFrame:
    """The trials of a search as a DataFrame: ``run_id``, ``trial``, ``rung``,
    ``fidelity``, ``pareto`` and one column per metric (objective names, ``@`` kept)."""
    client = _client(uri)
    flt = f"tags.{PARENT_TAG} = '{parent.info.run_id}'"
    if members_only:
        flt += f" and tags.`{PARETO_TAG}` = 'true'"
    runs = client.search_runs([parent.info.experiment_id], filter_string=flt, max_results=50000)
    rows = []
    for r in runs:
        row: dict[str, Any] = {
            "run_id": r.info.run_id,
            "trial": int(r.data.tags.get(TRIAL_TAG, -1)),
            "rung": r.data.tags.get(Tag.RUNG, ""),
            "pareto": r.data.tags.get(PARETO_TAG) == "true",
            "state": r.data.tags.get(Tag.STATE, ""),
            "feasible": r.data.tags.get(Tag.FEASIBLE) == "true",
        }
        row.update({objective_name(k): v for k, v in r.data.metrics.items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values("trial").reset_index(drop=True)
    return frame


def trial_params(uri: str, parent: Any) -> dict[str, dict[str, str]]:
    """Each trial run's sampled parameters (``prune.features.0``, ``activation``, ...),
    by run id, from one query."""
    client = _client(uri)
    flt = f"tags.{PARENT_TAG} = '{parent.info.run_id}'"
    runs = client.search_runs([parent.info.experiment_id], filter_string=flt, max_results=50000)
    return {r.info.run_id: dict(r.data.params) for r in runs}


def download_text(uri: str, run_id: str, name: str, out_dir: str | Path) -> Path:
    """One artifact of a run (the parent's ``config.json``, say) downloaded into
    ``out_dir``; its path."""
    import mlflow

    got = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path=name, dst_path=str(out_dir), tracking_uri=resolve_uri(uri)
    )
    return Path(got)


def download(uri: str, run_id: str, out_dir: Path) -> dict[str, Path]:
    """Download a front member's ONNX model and plan JSON (nothing else is read)."""
    import os

    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    out_dir.mkdir(parents=True, exist_ok=True)
    found = {}
    for name in (MODEL_FILE, PLAN_FILE):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=name, dst_path=tmp, tracking_uri=resolve_uri(uri)
                )
            except Exception as err:
                raise TrackingError(
                    f"run {run_id} has no {name} artifact (only front members are exported)"
                ) from err
            target = out_dir / name
            target.write_bytes(Path(path).read_bytes())
            found[name] = target
    json.loads(found[PLAN_FILE].read_text())  # a plan is JSON; refuse anything else
    return found
