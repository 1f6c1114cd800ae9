"""A search's front measured, and learnt from (``tracking.measure_front``,
``tracking.learn_front``; ``frontier search --no-learn`` keeps the tables fixed).

When a search ends, each front member is timed on the devices measured here by the
timing protocol, beside its predicted latency and the uncompressed model
(``latency_measured_ms@DEVICE`` on its run; ``baseline_latency_measured_ms@DEVICE`` and
the median gap ``latency_error@DEVICE`` on the parent). The gap compares speed-ups over
the uncompressed model (``prediction_ratio``): a machine that runs faster or slower now
than when its table was built moves every latency in ms alike, and is said apart from
how well the table predicts. Those are whole models
exactly where the search went, so they are then added to the stored table as
calibration models (``latency_models.learn``): the next search on that table predicts
from a calibration that includes them. What that changed (models added, the table's
cross-validated error before and after) is logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from frontier.evaluators import MetricKey

from .._log import logger
from ._tracking import MEASURED_PREFIX, PREDICTION_TOLERANCE, prediction_ratio


def measure_front(
    search: Any, models: dict[int, Path], device: str, tracker: Any, parent: str, *, learn: bool
) -> None:
    """Time each front member's exported model (``models``: by trial number) on the
    local ``device``, log it beside the prediction and, with ``learn``, add the
    measurements to the device's table (``learn_front``). Remote devices are measured
    by their runner (``frontier lut front``); a failure costs the search nothing."""
    from frontier.latency_models import measure_onnx, whole_model_bytes
    from frontier.spaces import CompressionPlan

    here = search.config.typed.device(device).local
    if here is None:
        return  # a remote device: its runner measures it
    if here.int8_qdq != search.evaluation.qdq:
        logger.info(
            "front not timed on %s: its models are exported in %s INT8 format, which it "
            "does not run (a search on %s alone exports its format)",
            device, "QDQ" if search.evaluation.qdq else "QOperator", device,
        )  # fmt: skip
        return
    members = sorted(models)
    ev = search.evaluation
    try:  # beside the uncompressed model, in the same rounds (runner.time_chunked)
        base = whole_model_bytes(ev.teacher, CompressionPlan(), ev.example)
        stats = measure_onnx(
            [models[n] for n in members],
            backend=here.backend(),
            batch_size=here.batch_size,
            reference=base,
        )
    except Exception as err:  # a report that fails costs the search nothing
        logger.warning("front not measured on %s (%s)", device, err)
        return
    if not stats:
        return
    measured = [st["median_ms"] for st in stats]
    now_base = float(np.median([st["baseline_ms"] for st in stats]))
    table_base = ev.setup.latency[device].predict(ev.teacher, CompressionPlan())
    # the uncompressed model's latency by the table over its latency beside the members
    scale = table_base.latency_ms / now_base
    tracker.log_metrics(parent, {f"baseline_{MEASURED_PREFIX}{device}": now_base})
    gaps = []
    for n, ms in zip(members, measured, strict=True):
        rec = search.records[n]
        predicted = rec.values().get(MetricKey.name("latency_ms", device))
        tracker.log_metrics(rec.run_id, {f"{MEASURED_PREFIX}{device}": ms})
        if predicted:
            gaps.append(abs(prediction_ratio(predicted, ms, scale) - 1))
            off = " (off by more than 10%)" if gaps[-1] > PREDICTION_TOLERANCE else ""
            logger.info(
                "trial %d on %s: predicted %.4g ms, measured %.4g ms; %.2fx the "
                "uncompressed model's speed predicted, %.2fx measured beside it%s",
                n, device, predicted, ms, table_base.latency_ms / predicted, now_base / ms, off,
            )  # fmt: skip
    if gaps:
        median = float(np.median(gaps))
        tracker.log_metrics(parent, {MetricKey.name("latency_error", device): median})
        logger.info(
            "%s: %d front members measured, median |predicted/measured - 1| %.1f%% of "
            "their speed-ups over the uncompressed model",
            device, len(gaps), 100 * median,
        )  # fmt: skip
    if table_base.measured_at and abs(scale - 1) > PREDICTION_TOLERANCE:
        logger.info(
            "%s: the uncompressed model ran in %.4g ms here now, %.4g ms when the table "
            "timed it: this machine runs %.2fx %s now. Latencies in ms move with it; the "
            "gaps above compare speed-ups over it, which do not",
            device, now_base, table_base.latency_ms, max(scale, 1 / scale),
            "faster" if scale > 1 else "slower",
        )  # fmt: skip
    if learn:  # stated against the table's own measurement of the uncompressed model
        factor = scale if table_base.measured_at else 1.0
        learned = {n: ms * factor for n, ms in zip(members, measured, strict=True)}
        learn_front(search, learned, device)


def learn_front(search: Any, measured: dict[int, float], device: str) -> None:
    """Add the measured front members (``{trial number: ms}``) to ``device``'s table.
    A few-shot or derived table keeps its calibration; a failure costs the search
    nothing."""
    from frontier.latency_models import DeviceStore, learn, learned_entry
    from frontier.spaces import CompressionPlan

    ev = search.evaluation
    table = ev.tables.get(device)
    if table is None or table.path is None or table.base is not None:
        return
    if table.device_meta.derived_from:
        return
    try:
        lm = ev.setup.latency[device]
        entries = [
            learned_entry(lm, ev.teacher, CompressionPlan.from_dict(search.records[n].plan), ms)
            for n, ms in measured.items()
        ]
        got = learn(DeviceStore(table.path.parent.parent.parent), table.name, entries)
    except Exception as err:  # learning is a bonus: the search's results stand
        logger.warning("%s: the front did not join the table's calibration (%s)", device, err)
        return

    if got.skipped:
        logger.info("%s: the front did not join the table's calibration (%s)", device, got.skipped)
        return
    logger.info(
        "%s: %d front members joined the table's calibration (%d models now); its "
        "cross-validated error %s before, %s after (--no-learn keeps the table fixed)",
        device, got.added, got.calibration_models, _pct(got.cv_mape_before),
        _pct(got.cv_mape_after),
    )  # fmt: skip


def _space_of(config: Any) -> tuple[Any, Any, Any]:
    """``config``'s task baseline (rebuilt, or read from its cache), its example batch
    and its space's op templates."""
    from frontier.experiments import build_task, task_baseline
    from frontier.latency_models import space_templates
    from frontier.spaces import discover

    task = build_task(config.task.name, **config.task.options)
    teacher, example = task_baseline(task, config.task.name)
    return (
        teacher,
        example,
        space_templates(teacher, example, discover(teacher, example, config.space)),
    )


def plan_entries(config: Any, plans: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each plan's ops (``latency_models.plan_entry``, by key) in the space of
    ``config``'s task: its baseline rebuilt (or read from its cache) and exported once."""
    return _entries(_space_of(config)[2], plans)


def _entries(templates: Any, plans: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    import math

    from frontier.latency_models import plan_entry
    from frontier.spaces import CompressionPlan

    return {
        key: plan_entry(templates, CompressionPlan.from_dict(plan), math.nan)
        for key, plan in plans.items()
    }


def front_entries(
    config: Any, plans: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], tuple[bytes, dict[str, Any]]]:
    """For ``frontier lut front``: the members' ``plan_entries`` (by run id), so a remote
    device's measurements can join its table, and the baseline measured beside them
    (its ONNX bytes, FP32 with nothing compressed, and its entry), so the device's
    result says how much faster each member runs there than the model it came from."""
    import math
    import tempfile

    from frontier.latency_models import plan_entry
    from frontier.spaces import CompressionPlan, export_onnx, model_bytes

    teacher, example, templates = _space_of(config)
    with tempfile.TemporaryDirectory(prefix="frontier-front-") as tmp:
        path = Path(tmp) / "baseline.onnx"
        export_onnx(teacher.eval(), CompressionPlan(), example, path)
        data = model_bytes(path)
    baseline = plan_entry(templates, CompressionPlan(), math.nan)
    return _entries(templates, plans), (data, baseline)


def learn_measured_front(store: Any, front: dict[str, Any], measured: dict[str, float]) -> str:
    """A remote device's measurement of a ``lut front`` bundle (``front``: its manifest,
    ``measured``: ms by run id) added to that device's stored table; what happened, in
    a line."""
    from frontier.latency_models import learn

    device = front["device"]
    entries = [
        {
            "key": e["calibration_key"],
            "kind": "calibration",
            "plan": e["plan"],
            "op_keys": e["op_keys"],
            "op_nodes": e["op_nodes"],
            "median_ms": measured[run_id],
        }
        for run_id, e in front.get("entries", {}).items()
        if run_id in measured and "op_keys" in e
    ]
    if not entries:
        return "the bundle carries no plans' ops (lut front could not rebuild them): nothing learnt"
    if not store.has(device):
        return f"no device table named {device!r} in {store.root}: nothing learnt (import one)"
    got = learn(store, device, entries)
    if got.skipped:
        return f"nothing learnt into {device}'s table: {got.skipped}"
    return (
        f"{got.added} members joined {device}'s calibration ({got.calibration_models} models "
        f"now; cross-validated error {_pct(got.cv_mape_before)} before, "
        f"{_pct(got.cv_mape_after)} after; --no-learn keeps it fixed)"
    )


def _pct(value: float | None) -> str:
    """A cross-validated error as the log lines print it ("-": none)."""
    return "-" if value is None else f"{100 * value:.1f}%"
