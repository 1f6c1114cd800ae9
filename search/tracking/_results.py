"""Reading a finished search back from MLflow: its front filtered by constraints,
sorted, recomputed on some metrics, with sampled parameters, and a picked model measured
and registered. ``frontier pareto`` and ``frontier pick`` are thin wrappers."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from frontier.evaluators import MetricKey

from .._log import logger
from ..config._constraints import Constraint
from ..front._pareto import Objective, pareto_mask
from ._tracking import (
    MEASURED_PREFIX,
    PREDICTION_TOLERANCE,
    TEST_METRIC,
    Tag,
    find_search,
    front_frame,
    metric_key,
    metrics_of,
    objectives_of,
    prediction_ratio,
    resolve_uri,
    trial_params,
)

#: the columns of a front frame that are not metrics
INFO_COLUMNS = ("run_id", "trial", "rung", "pareto", "state", "feasible")


class QueryError(ValueError):
    """A query names a metric, parameter or run the search does not have; the message
    names the option (``--where``) and what there is instead."""


def parse_where(text: str | None) -> list[Constraint]:
    """``"accuracy >= 0.95, size_bytes <= 32768"`` (``,`` or ``and``) as constraints."""
    if not text:
        return []
    parts = [p for p in re.split(r",|\band\b", text) if p.strip()]
    try:
        return [Constraint.parse(p) for p in parts]
    except ValueError as err:
        raise QueryError(f"--where: {err}") from None


def query_front(
    uri: str,
    *,
    experiment: str | None = None,
    run: str | None = None,
    where: str | None = None,
    objectives: str | None = None,
    everything: bool = False,
) -> tuple[Any, pd.DataFrame]:
    """A search's parent run and its front (``everything``: every trial), recomputed
    on ``objectives`` (comma-separated recorded metrics) where given, filtered by
    ``where`` (constraints; relative bounds resolve against the search's baseline)."""
    parent = find_search(uri, experiment, run)
    on = [n.strip() for n in (objectives or "").split(",") if n.strip()]
    stopped = parent.info.status != "FINISHED" and Tag.OBJECTIVES in parent.data.tags
    frame = front_frame(uri, parent, members_only=not (everything or on or stopped))
    if on:
        frame = front_on(frame, on, metrics_of(parent))
    elif stopped and not everything:  # a stopped search's tags may predate its last trials
        frame = front_on(frame, [o.name for o in objectives_of(parent)], metrics_of(parent))
    baseline = json.loads(parent.data.tags.get(Tag.BASELINE, "{}"))
    for c in parse_where(where):
        if c.objective == TEST_METRIC:
            raise QueryError(
                f"--where: {TEST_METRIC} reports the test split and never chooses a model; "
                "filter on accuracy (the validation split the search chose by)"
            )
        try:
            c = c.resolve(baseline)
        except ValueError as err:
            raise QueryError(f"--where: {err}") from None
        if c.objective not in frame.columns:
            metrics = [k for k in frame.columns if k not in INFO_COLUMNS]
            raise QueryError(
                f"--where: {c.objective!r} is not a metric of this search; have: {metrics}"
            )
        frame = frame[[c.holds(v) for v in frame[c.objective]]]
    return parent, frame


def front_on(frame: pd.DataFrame, names: list[str], metrics: list[Objective]) -> pd.DataFrame:
    """The feasible front of every trial on some of the recorded metrics only (one
    device's latency and accuracy, say)."""
    directions = {m.name: m for m in metrics}
    unknown = [n for n in names if n not in directions]
    if unknown:
        raise QueryError(f"--objectives: {unknown} not recorded; have: {sorted(directions)}")
    pool = frame[(frame["state"] == "complete") & frame["feasible"]]
    pool = pool.drop_duplicates(subset=names)
    if pool.empty:
        return pool
    mask = pareto_mask(pool[names].to_numpy(dtype=float), [directions[n] for n in names])
    return pool[mask]


def sort_front(
    frame: pd.DataFrame, key: str, objectives: list[Objective], option: str = "--sort"
) -> pd.DataFrame:
    """``frame`` sorted by column ``key`` (``+x``/``-x``: ascending/descending; bare:
    best first by the metric's direction)."""
    name = key.lstrip("+-")
    if option == "--best" and name not in {o.name for o in objectives}:
        known = ", ".join(o.name for o in objectives)
        raise QueryError(f"--best: {name!r} is not a metric this search recorded; have: {known}")
    if name not in frame.columns:
        raise QueryError(f"{option}: {name!r} is not a column; have: {list(frame.columns)}")
    if key[0] in "+-":
        ascending = key[0] == "+"
    else:
        direction = {o.name: o.direction for o in objectives}.get(name, "minimize")
        ascending = direction == "minimize"
    return frame.sort_values(name, ascending=ascending, kind="stable")


def with_params(frame: pd.DataFrame, uri: str, parent: Any, patterns: str) -> pd.DataFrame:
    """``frame`` with the trials' sampled parameters whose names match one of the
    comma-separated glob ``patterns`` (``activation``, ``sparse.*``) as columns."""
    params = trial_params(uri, parent)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    names = sorted(
        {k for ps in params.values() for k in ps if any(fnmatch.fnmatch(k, w) for w in wanted)}
    )
    if not names:
        known = sorted({k for ps in params.values() for k in ps})
        raise QueryError(f"--params: nothing matches {patterns!r}; parameters: {known}")
    frame = frame.copy()
    for name in names:
        frame[name] = [params.get(run_id, {}).get(name, "") for run_id in frame["run_id"]]
    return frame


def latency_checks(frame: pd.DataFrame, parent: Any = None) -> pd.DataFrame:
    """``frame`` with ``pred/meas@DEVICE`` (predicted over measured latency) for each
    device whose front members were measured at the end of the search; a ratio more than
    10% from 1 is marked ``!``. Where ``parent`` (the search's run) holds the
    uncompressed model's latency timed beside them, each measurement is stated in the
    table's time first (``prediction_ratio``): the ratio compares speed-ups, so a machine
    faster or slower now than when its table was built moves none."""
    baseline = json.loads(parent.data.tags.get(Tag.BASELINE, "{}")) if parent else {}
    frame = frame.copy()
    for column in [c for c in frame.columns if c.startswith(MEASURED_PREFIX)]:
        device = column.removeprefix(MEASURED_PREFIX)
        predicted = MetricKey.name("latency_ms", device)
        if predicted not in frame.columns:
            continue
        now_base = (
            parent.data.metrics.get(metric_key(f"baseline_{MEASURED_PREFIX}{device}"))
            if parent
            else None
        )
        table_base = baseline.get(predicted)
        scale = table_base / now_base if now_base and table_base else 1.0
        pairs = zip(frame[predicted], frame[column], strict=True)
        ratio = [prediction_ratio(p, m, scale) for p, m in pairs]
        frame[MetricKey.name("pred/meas", device)] = [
            "" if r != r else f"{r:.2f}" + (" !" if abs(r - 1) > PREDICTION_TOLERANCE else "")
            for r in ratio
        ]
    return frame


def deploy_picked(onnx_path: Path, metrics: dict[str, Any]) -> dict[str, Path]:
    """What each local device's runtime among ``metrics`` loads in deployment, written
    beside the picked ONNX file (``Runtime.deploy``: OpenVINO's IR); a runtime that
    cannot convert the model is warned about."""
    from frontier.latency_models import resolve_device

    out: dict[str, Path] = {}
    done: set[str] = set()
    for name in metrics:  # a logged result's devices: resolved here, from their names
        here = resolve_device(MetricKey.parse(name).device or "").local
        if here is None or here.kind in done or here.unavailable():
            continue
        done.add(here.kind)
        try:
            out.update(here.runtime.deploy(onnx_path))
        except Exception as err:
            logger.warning("%s: not converted for %s (%s)", onnx_path, here.name, err)
    return out


def latency_change(logged_ms: float, measured_ms: float) -> str:
    """A model's logged and measured latency in words whose sign reads as it is."""
    ratio = measured_ms / logged_ms
    how = f"{ratio - 1:.0%} slower" if ratio >= 1 else f"{1 - ratio:.0%} faster"
    return (
        f"logged {logged_ms:.4g} ms, measured here {measured_ms:.4g} ms: it runs {how} here "
        "than the search priced it (a machine whose speed changed since moves this too)"
    )


def _local_latencies(metrics: dict[str, Any]) -> Iterator[tuple[str, str, Any, Any]]:
    """(metric name, device, logged value, the device of this machine) for each
    ``latency_ms`` metric among ``metrics`` on a device this machine has and can run
    now (one it cannot is warned about)."""
    from frontier.latency_models import resolve_device

    for name, logged in metrics.items():
        key = MetricKey.parse(name)
        here = resolve_device(key.device).local
        if key.metric != "latency_ms" or here is None:
            continue
        if reason := here.unavailable():
            logger.warning("%s not measured: %s", name, reason)
            continue
        yield name, key.device, logged, here


def measure_picked(onnx_path: Path, metrics: dict[str, Any]) -> dict[str, float]:
    """A picked model's latency on each local device among its metrics (one this
    machine can measure), measured here by the timing protocol every table row was
    measured with; a logged figure more than 10% off the measurement is warned about."""
    from frontier.latency_models import measure_local

    out = {}
    for name, device, logged, here in _local_latencies(metrics):
        try:
            measured = measure_local(onnx_path.read_bytes(), device=here)
        except Exception as err:  # a model this runtime cannot load: said, not fatal
            logger.warning("%s not measured: %s", name, str(err).splitlines()[0])
            continue
        out[device] = measured
        if logged is not None and abs(float(logged) / measured - 1) > PREDICTION_TOLERANCE:
            logger.warning("%s: %s", name, latency_change(float(logged), measured))
    return out


def register_model(uri: str, run_id: str, onnx_path: Path, name: str, alias: str) -> dict[str, Any]:
    """Log ``onnx_path`` as trial ``run_id``'s model, register it as ``name`` and point
    ``alias`` at the new version."""
    import mlflow
    import onnx
    from mlflow.tracking import MlflowClient

    uri = resolve_uri(uri)
    model = onnx.load(str(onnx_path))
    # mlflow.set_tracking_uri also sets MLFLOW_TRACKING_URI for the whole process;
    # put it back, or a later pareto/pick in this process reads this store
    env_before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run(run_id=run_id):
            info = mlflow.onnx.log_model(model, name="model", registered_model_name=name)
    finally:
        if env_before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env_before
    version = str(info.registered_model_version)
    MlflowClient(tracking_uri=uri).set_registered_model_alias(name, alias, version)
    return {"name": name, "version": version, "alias": alias}


def noise_bands(evaluation: Any) -> dict[str, str]:
    """Device -> what the noise its table measured of itself when it measured this
    search's space means (``noise_band``), for the tables that measured it."""
    bands = {
        name: lm.device_meta(evaluation.teacher).noise_band()
        for name, lm in evaluation.setup.latency.items()
    }
    return {name: band for name, band in bands.items() if band}


#: the parent run's artifact holding the uncompressed model, FP32, which ``pick`` times
#: beside the picked model
BASELINE_ONNX = "baseline/model.onnx"


def speedup_change(priced: float, measured: float) -> str:
    """A pick's speed-up over the uncompressed model, as the search priced it and as
    measured here beside it, in words whose sign reads as it is."""
    ratio = measured / priced
    how = f"{1 - ratio:.0%} less" if ratio < 1 else f"{ratio - 1:.0%} more"
    return (
        f"the search priced it {priced:.2f}x the uncompressed model's speed; measured here "
        f"beside it, {measured:.2f}x ({how} than priced)"
    )


def compare_picked(
    onnx_path: Path, metrics: dict[str, Any], baseline_path: Path, baseline: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """A picked model and the uncompressed one (``baseline_path``, the search's
    ``BASELINE_ONNX``) timed here in the same rounds on each local device among the
    pick's latency metrics, by the timing protocol. Per device: the pick's and the
    baseline's ms, the speed-up measured, and the speed-up the search priced (the
    table's baseline, ``baseline``, over the pick's logged latency). A priced speed-up
    more than 10% off the measured one is warned about; latencies in ms that moved
    while the speed-up held are this machine's speed, said as a note."""
    from frontier.latency_models import measure_models

    out: dict[str, dict[str, float]] = {}
    for name, device, logged, here in _local_latencies(metrics):
        if here.half:  # the logged baseline is FP32; this device runs 16-bit layers FP16
            continue
        try:
            pick_ms, base_ms = measure_models(
                [onnx_path.read_bytes(), baseline_path.read_bytes()], device=here
            )
        except Exception as err:  # a model this runtime cannot load: said, not fatal
            logger.warning("%s not measured: %s", name, str(err).splitlines()[0])
            continue
        entry = {"ms": pick_ms, "baseline_ms": base_ms, "speedup_measured": base_ms / pick_ms}
        table_base = baseline.get(name)
        if logged and table_base:
            priced = float(table_base) / float(logged)
            entry["speedup_priced"] = priced
            if abs(priced / entry["speedup_measured"] - 1) > PREDICTION_TOLERANCE:
                logger.warning("%s: %s", name, speedup_change(priced, entry["speedup_measured"]))
            elif abs(float(logged) / pick_ms - 1) > PREDICTION_TOLERANCE:
                logger.info(
                    "%s: %s; its speed-up over the uncompressed model holds (%.2fx priced, "
                    "%.2fx measured): this machine's speed moved, not the prediction",
                    name, latency_change(float(logged), pick_ms).split(":")[0],
                    priced, entry["speedup_measured"],
                )  # fmt: skip
        out[device] = entry
    return out
