"""MLflow as a search callback: one parent run per search, one nested run per trial,
front membership as tags, the front's ONNX models, CSV and plots as artifacts.

Writes go, in order, to one background thread so the search loop never waits on the
tracking store; torch work (exporting a front member) stays on the driver's thread.

Over 500 lines: the callback's hooks and the end-of-search reports (test split, front
timing, baseline for pick, savings, profiles) share its run ids and its one writer
thread; split, each half would reach into the other's state.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from frontier.evaluators import MetricKey

from .._log import logger
from ..front._pareto import REFERENCE, Objective
from ..study._storage import RUN_ATTR
from ..tracking._tracking import (
    MODEL_FILE,
    PLAN_FILE,
    TEST_METRIC,
    Tag,
    Tracker,
    download,
)
from ..trials._view import SearchView
from ._callbacks import Callback

if TYPE_CHECKING:
    from ..front._front import TrialRecord


class _Background:
    """MLflow writes on background threads: ``lanes`` of them, each in order. The
    writes of one trial run share a lane (``key``: the trial number), so they land in
    the order they were made; lanes let a tracking server's round trips overlap. A write
    that fails is reported once, and the search goes on (a resumed search writes the
    trial runs that are missing)."""

    def __init__(self, lanes: int = 1) -> None:
        import concurrent.futures as cf

        self._lanes = [
            cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"frontier-mlflow-{i}")
            for i in range(lanes)
        ]
        self._futures: list[Any] = []
        self.errors: list[str] = []

    def __call__(self, fn: Callable[[], Any], key: int = 0) -> None:
        self._futures.append(self._lanes[key % len(self._lanes)].submit(fn))
        self._collect()

    def after_all(self, fn: Callable[[], Any]) -> None:
        """``fn`` once every write queued so far has run (lane 0 waits for the others;
        they never wait, so nothing deadlocks)."""
        import concurrent.futures as cf

        before = list(self._futures)

        def run() -> Any:
            cf.wait(before)
            return fn()

        self(run)

    def _collect(self) -> None:
        pending = []
        for f in self._futures:
            if not f.done():
                pending.append(f)
            elif f.exception() is not None:
                err = f"{type(f.exception()).__name__}: {f.exception()}"
                if not self.errors:
                    logger.warning("MLflow write failed: %s", err)
                self.errors.append(err)
        self._futures = pending

    def drain(self) -> None:
        import concurrent.futures as cf

        cf.wait(self._futures)
        self._collect()


class MlflowCallback(Callback):
    """Tracks a search in MLflow.

    Args:
        uri: the tracking URI (``sqlite:///mlflow.db`` or ``http://host:port``).
        experiment: the MLflow experiment name.
        export_front: write each front member's ONNX model and plan as artifacts.
        test_front: at the end, score each exported front member on the test split.
        plot_interval_s: front CSV, plots and exports are refreshed at most this often
            (and at the end): they cost CPU.
        write_lanes: MLflow writes at once (a trial's writes stay in order); None: 4
            against a tracking server, 1 for a local database.
        profile_front: at the end, profile each front member's layers beside the
            baseline's (``profile/`` artifacts of its run).
        learn_front: and add the measured members to the device table's calibration.
    """

    def __init__(
        self,
        *,
        uri: str,
        experiment: str,
        export_front: bool = True,
        measure_front: bool = True,
        test_front: bool = True,
        plot_interval_s: float = 20.0,
        write_lanes: int | None = None,
        profile_front: bool = False,
        learn_front: bool = False,
    ) -> None:
        self.uri = uri
        self.learn_front = learn_front
        self.experiment = experiment
        self.export_front = export_front
        self.measure_front = measure_front
        self.test_front = test_front
        self.profile_front = profile_front
        self.plot_interval_s = plot_interval_s
        self.parent = ""
        #: what MLflow was last told: the trials tagged on the front, and the rung whose
        #: model each trial's run holds (-1: none)
        self._on_front: set[int] = set()
        self._exported: dict[int, int] = {}
        #: each front member's exported model, kept to report its test accuracy at the end
        self._models: dict[int, Path] = {}
        self._models_dir: Path | None = None
        #: a tracking server answers several writes at once; a local database one
        server = uri.startswith(("http://", "https://"))
        self.later = _Background(lanes=write_lanes or (4 if server else 1))
        self._last_front_csv = ""
        self._last_plot = -float("inf")

    # -- hooks ----------------------------------------------------------------------------
    def on_start(self, search: SearchView) -> None:
        self.tracker = Tracker(self.uri, self.experiment)
        parent = search.study.user_attrs.get(RUN_ATTR)
        if parent:
            self.parent = parent
            self.tracker.reopen(parent)
        else:
            self.parent = self._start_parent(search)
            search.study.set_user_attr(RUN_ATTR, self.parent)
            search.study_store.flush()
        self._reconcile(search)

    def _reconcile(self, search: SearchView) -> None:
        """Make MLflow agree with the study a resumed search restored: a trial a killed
        run finished but never logged (or left half written) is logged whole, a promotion
        it never wrote is written, and the front tags follow the restored front now."""
        logged = self.tracker.trial_runs(self.parent)
        for rec in search.records.values():
            found = logged.get(rec.number)
            if found is not None and found.status == "RUNNING":
                self.tracker.delete_run(found.run_id)  # killed mid-write
                found = None
            if found is None:
                self.on_trial(search, rec)
                for rung in sorted(r for r in rec.rungs if r > 0):
                    self.on_promotion(search, rec, rung)
                continue
            rec.run_id = found.run_id
            if found.pareto:
                self._on_front.add(rec.number)
            self._exported[rec.number] = found.exported_rung
            for rung in sorted(r for r in rec.rungs if r > found.rung_index and r > 0):
                self.on_promotion(search, rec, rung)
        self._retag(search)

    def on_trial(self, search: SearchView, record: TrialRecord) -> None:
        tags = {Tag.STATE: record.state, Tag.PARETO: "false", **self._rung_tags(search, record)}
        if record.error:
            tags[Tag.ERROR] = record.error[:5000]
        if record.node:
            tags[Tag.NODE] = record.node
        if record.train_device:
            tags[Tag.TRAIN_DEVICE] = record.train_device
        values = record.values(0) if record.state == "complete" else {}
        if values:
            tags[Tag.FEASIBLE] = str(search.front.judge(record)).lower()
        params, parent, failed = dict(record.params), self.parent, record.state == "failed"

        def write() -> None:
            record.run_id = self.tracker.log_trial(
                parent, record.number, params=params, values=values, tags=tags, failed=failed
            )

        self.later(write, key=record.number)

    def on_promotion(self, search: SearchView, record: TrialRecord, rung: int) -> None:
        values, tags = dict(record.rungs[rung]), self._rung_tags(search, record)
        tags[Tag.FEASIBLE] = str(search.front.judge(record)).lower()

        def write() -> None:
            if record.run_id:
                self.tracker.log_metrics(record.run_id, values, step=rung)
                self.tracker.set_tags(record.run_id, tags)

        self.later(write, key=record.number)

    def _retag(self, search: SearchView) -> set[int]:
        """Tag the trials that joined or left the front since the last tags; returns the
        front."""
        front = set(search.front.numbers())
        for n in front ^ self._on_front:
            self._tag_later(search.records[n], {Tag.PARETO: str(n in front).lower()})
        for n in set(self._models) - front:  # off the front: its model is not reported
            self._models.pop(n).unlink(missing_ok=True)
        self._on_front = set(front)
        return front

    def on_generation(self, search: SearchView, final: bool) -> None:
        front = self._retag(search)
        for n, rec in search.records.items():
            if n not in front:  # off the front: its job's model is not written (memory)
                rec.exports.clear()
        metrics = {
            "hypervolume": search.hypervolume,
            "front_size": len(front),
            "trials_done": search.done,
        }
        parent, step = self.parent, search.generation
        self.later(lambda: self.tracker.log_metrics(parent, metrics, step=step))
        frame = search.pareto_frame()
        text = frame.drop(columns="run_id").to_csv(index=False)
        if text == self._last_front_csv:
            return  # artifacts only when the front moved,
        if not final and time.monotonic() - self._last_plot < self.plot_interval_s:
            return  # and at most every plot_interval_s
        self._last_front_csv = text
        self._last_plot = time.monotonic()
        if self.export_front:
            for n in sorted(front):
                self._export(search, search.records[n])
        members = [search.records[n] for n in frame["trial"]]
        points = search.front.matrix(search.front.complete())
        objectives = search.objectives

        def write() -> None:
            frame["run_id"] = [r.run_id for r in members]  # known once earlier writes ran
            self.tracker.log_text(parent, frame.to_csv(index=False), "pareto.csv")
            _plot_fronts(self.tracker, parent, objectives, points, frame)

        self.later.after_all(write)

    def on_finish(self, search: SearchView, status: str) -> None:
        if not self.parent:
            return  # never started
        if status != "FINISHED":  # a stopped search's front: that of its completed trials
            self._retag(search)
        self.later.drain()
        if status == "FINISHED":
            self._report_front(search)
            self._report_savings(search)
        if self._models_dir is not None:
            shutil.rmtree(self._models_dir, ignore_errors=True)
        metrics = {**search.summary, "tracking_errors": len(self.later.errors)}
        self.tracker.log_metrics(self.parent, metrics, step=search.generation)
        self.tracker.finish(self.parent, status)

    # -- helpers ----------------------------------------------------------------------------
    def _dir(self) -> Path:
        if self._models_dir is None:
            self._models_dir = Path(tempfile.mkdtemp(prefix="frontier-front-"))
        return self._models_dir

    def _keep_model(self, number: int, path: Path) -> None:
        kept = self._dir() / f"trial-{number}.onnx"
        shutil.copyfile(path, kept)
        self._models[number] = kept

    def _report_front(self, search: SearchView) -> None:
        """What the final front's exported models measure: each member's test accuracy
        (``accuracy_test``: reported, never read by the search or a pick rule) and its
        latency on each device measured here (``latency_measured_ms@DEVICE``, by the
        timing protocol, beside the table's prediction; the median gap goes on the
        parent run as ``latency_error@DEVICE``)."""
        members = self._front_models(search)
        if not members:
            return
        self._log_baseline(search)
        ev = search.evaluation
        if self.test_front and ev.reports_test():
            logger.info(
                "test split of %d front members (reported only: models are chosen on "
                "validation)", len(members),
            )  # fmt: skip
            for n in members:
                try:
                    value = ev.test_accuracy(self._models[n])
                except Exception as err:  # a report that fails costs the search nothing
                    logger.warning("trial %d: test accuracy not measured (%s)", n, err)
                    continue
                logger.info("trial %d: %s %.4f", n, TEST_METRIC, value)
                self.tracker.log_metrics(search.records[n].run_id, {TEST_METRIC: value})
        for name in ev.metrics if self.measure_front else []:
            key = MetricKey.parse(name)
            if key.metric == "latency_ms" and key.device:
                self._measure_front(search, members, key.device)
        if self.profile_front:
            from ._savings import profile_front

            kept = {n: (self._models[n], search.records[n].run_id) for n in members}
            profile_front(search, kept, self._dir(), self.tracker)

    def _log_baseline(self, search: SearchView) -> None:
        """The uncompressed model, FP32 ONNX, on the parent run (``BASELINE_ONNX``):
        what ``pick`` times beside the model it picks, to compare speed-ups."""
        from frontier.latency_models import quiet_root_logger, whole_model_bytes
        from frontier.spaces import CompressionPlan

        from ..tracking._results import BASELINE_ONNX

        ev = search.evaluation
        try:
            with quiet_root_logger():
                data = whole_model_bytes(ev.teacher, CompressionPlan(), ev.example)
            path = self._dir() / BASELINE_ONNX
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            self.tracker.log_artifact_files(self.parent, [path], str(Path(BASELINE_ONNX).parent))
        except Exception as err:  # pick then compares milliseconds only
            logger.warning("the uncompressed model was not logged for pick (%s)", err)

    def _report_savings(self, search: SearchView) -> None:
        """Each front member's year of serving (``serving_*@DEVICE``, ``_savings``)."""
        from ._savings import report_savings

        report_savings(search, lambda n, m: self.tracker.log_metrics(search.records[n].run_id, m))

    def _front_models(self, search: SearchView) -> list[int]:
        """The final front members with an exported model here (read back from MLflow
        for a member exported before a resume)."""
        members = sorted(search.front.numbers())
        for n in members:
            if n not in self._models and self._exported.get(n, -1) >= 0:
                with contextlib.suppress(Exception):
                    got = download(self.uri, search.records[n].run_id, self._dir() / f"{n}")
                    self._models[n] = got[MODEL_FILE]
        return [n for n in members if n in self._models]

    def _measure_front(self, search: SearchView, members: list[int], device: str) -> None:
        from ..tracking._learning import measure_front

        kept = {n: self._models[n] for n in members}
        measure_front(search, kept, device, self.tracker, self.parent, learn=self.learn_front)

    def _start_parent(self, search: SearchView) -> str:
        from importlib.metadata import version

        from ..tracking._results import noise_bands

        cfg, evaluation = search.config, search.evaluation
        tables = {n: t.content_hash for n, t in evaluation.tables.items()}
        as_dicts = [{"name": o.name, "direction": o.direction} for o in search.objectives]
        parent = self.tracker.start_parent(
            search.study_name,
            params={
                "seed": cfg.search.seed,
                "sampler": search.sampler_name,
                "trials": cfg.search.trials,
                "rungs": ",".join(evaluation.rungs),
                "promote": cfg.search.fidelity.promote,
                "promote_slack": cfg.search.fidelity.slack,
                "promote_toward": cfg.search.fidelity.toward or "spread",
                "backend": cfg.backend.kind,
                "task": cfg.task.name,
            },
            tags={
                Tag.VERSION: version("frontier"),
                Tag.STUDY: search.study_name,
                Tag.STORAGE: search.study_store.url,
                Tag.OBJECTIVES: json.dumps(as_dicts),
                Tag.METRICS: json.dumps(
                    [{"name": o.name, "direction": o.direction} for o in evaluation.recorded()]
                ),
                Tag.CONSTRAINTS: json.dumps([str(c) for c in search.constraints]),
                Tag.CONSTRAINTS_AS_WRITTEN: json.dumps(cfg.constraints),
                Tag.REFERENCE_POINT: json.dumps({o.name: REFERENCE for o in search.objectives}),
                Tag.HV_NORMALISATION: "minimize: value/baseline; maximize: 1 - value/baseline",
                Tag.BASELINE: json.dumps(search.baseline),
                Tag.DEVICE_TABLES: json.dumps(tables),
                Tag.NOISE_BANDS: json.dumps(noise_bands(evaluation)),
                Tag.NOTES: json.dumps(evaluation.notes),
            },
        )
        self.tracker.log_text(parent, cfg.model_dump_json(indent=2), "config.json")
        self.tracker.log_text(parent, evaluation.space.describe(), "space.txt")
        # how each device's table predicts: calibration, its warnings, validation error
        quality = {
            name: {"content_hash": evaluation.tables[name].content_hash, **lm.quality()}
            for name, lm in evaluation.setup.latency.items()
        }
        self.tracker.log_text(parent, json.dumps(quality, indent=2), "device_tables.json")
        if search.sensitivity:
            self._log_sensitivity(search, parent)
        return parent

    def _log_sensitivity(self, search: SearchView, parent: str) -> None:
        import tempfile
        from pathlib import Path

        from ._sensitivity import plot

        rows = search.sensitivity
        self.tracker.log_text(parent, json.dumps(rows, indent=1), "sensitivity.json")
        metric = "accuracy" if "accuracy" in rows[0] else search.evaluation.metrics[0]
        with tempfile.TemporaryDirectory() as tmp:
            path = plot(rows, Path(tmp) / "sensitivity.png", metric=metric)
            self.tracker.log_artifact_files(parent, [path])

    def _rung_tags(self, search: SearchView, rec: TrialRecord) -> dict[str, str]:
        return {
            Tag.RUNG: search.evaluation.rungs[rec.rung] if rec.rung >= 0 else "",
            Tag.RUNG_INDEX: str(rec.rung),
        }

    def _tag_later(self, rec: TrialRecord, tags: dict[str, str]) -> None:
        # the run exists by now: its creation went first, on the same lane
        self.later(lambda: self.tracker.set_tags(rec.run_id, tags), key=rec.number)

    def _export(self, search: SearchView, rec: TrialRecord) -> None:
        """A front member's ONNX model (the one its accuracy was measured on) and plan."""
        if self._exported.get(rec.number, -1) == rec.rung:
            return
        tmp = Path(tempfile.mkdtemp(prefix="frontier-export-"))
        self._exported[rec.number] = exported = rec.rung  # tried once per rung, failed or not
        # the job's own export where it made one; else fine-tune again (seeded) here
        job = rec.exports.get(rec.rung)
        rec.exports.clear()  # a lower rung's model is never written now
        try:
            if job is not None and job.error:
                raise RuntimeError(job.error)
            if job is not None and job.onnx is not None:
                (tmp / MODEL_FILE).write_bytes(job.onnx)
                precision = job.precision
            else:
                path = tmp / MODEL_FILE
                precision = search.evaluation.export(rec.plan, max(rec.rung, 0), path).precision
        except Exception as err:  # the search goes on; the run says why it has no model
            shutil.rmtree(tmp, ignore_errors=True)
            error = str(err) if job is not None and job.error else f"{type(err).__name__}: {err}"
            logger.info("trial %d: ONNX export failed (%s)", rec.number, error)
            self._tag_later(rec, {Tag.EXPORT_ERROR: error[:4000]})
            return
        (tmp / PLAN_FILE).write_text(search.evaluation.plan(rec.plan).to_json())
        self._keep_model(rec.number, tmp / MODEL_FILE)

        def write() -> None:
            try:
                self.tracker.log_artifact_files(rec.run_id, [tmp / MODEL_FILE, tmp / PLAN_FILE])
                self.tracker.set_tags(
                    rec.run_id,
                    {Tag.ONNX_PRECISION: precision, Tag.EXPORTED_RUNG: str(exported)},
                )
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

        self.later(write, key=rec.number)


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
