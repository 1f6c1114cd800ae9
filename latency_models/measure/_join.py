"""Whole models measured where searches go join a device table's calibration.

A table is calibrated on the bundle's whole models: corners, INT8-heavy and random
plans. A search's front sits somewhere particular in the space, and when its members
are timed (at the end of a search, or by the device runner on a ``lut front`` bundle),
each is one more calibration model exactly where predictions matter. ``learn`` adds
them to the stored table as calibration rows (kind ``calibration``, key ``front-<plan
hash>``: the same plan measured again replaces its row) with the ops of each plan, so
the next ``LatencyModel`` of that table refits with them. Learned rows carry no profile:
they join the whole-model fits (sum, groups), not the in-context one.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from frontier.spaces import CompressionPlan

from ..device._table import (
    MIN_CALIBRATION_MODELS,
    DeviceStore,
    DeviceTable,
    Row,
    TableError,
    write_rows,
)
from ..ops._arch import arch_key
from ..ops._ops import plan_op_nodes, plan_ops
from ..price._model import LatencyModel
from ._profile import layer_prices

#: the store file holding learned models' ops, beside the bundles' manifests
LEARNED_FILE = "learned.json"


@dataclass(frozen=True)
class Learned:
    """What ``learn`` did to a table: models added, models now, and the table's
    cross-validated calibration error (MAPE) before and after."""

    device: str
    added: int
    calibration_models: int
    cv_mape_before: float | None
    cv_mape_after: float | None
    #: why nothing was added, where nothing was
    skipped: str = ""


def plan_entry(templates: Mapping[str, Any], plan: CompressionPlan, median_ms: float) -> dict:
    """A measured whole model as a calibration entry: ``plan``'s ops (``templates``: the
    space's, ``space_templates``; the same op keys on every device) and its latency."""
    t = templates[arch_key(plan)]
    data = plan.to_dict()
    digest = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "key": f"front-{digest}",
        "kind": "calibration",
        "plan": data,
        "op_keys": [o.key for o in plan_ops(t, plan)],
        "op_nodes": plan_op_nodes(t, plan),
        "median_ms": float(median_ms),
    }


def learned_entry(lm: LatencyModel, model: Any, plan: CompressionPlan, median_ms: float) -> dict:
    """``plan_entry`` with the templates of ``model``, bound to ``lm`` (``bind``)."""
    templates = lm._bound.get(id(model))
    if templates is None:
        raise ValueError("learned_entry: bind(model, example_inputs, space) the model first")
    return plan_entry(templates, plan, median_ms)


def priced_layers(lm: LatencyModel, entry: Mapping[str, Any]) -> dict[str, float]:
    """The table prices of an entry's ops (``plan_entry``) summed per layer
    (``layer_prices``); an op the table cannot name is priced NaN, not free."""
    specs = [lm.spec_of(k) for k in entry["op_keys"]]
    costs = [lm.op_cost(s).latency_ms if s is not None else math.nan for s in specs]
    return layer_prices(entry["op_nodes"], costs)


def _cv_mape(table: DeviceTable) -> float | None:
    calibration = LatencyModel(table).quality().get("calibration", {})
    cv = calibration.get("cv_mape", {})
    method = calibration.get("method")
    value = cv.get(method) if isinstance(cv, dict) else None
    return float(value) if value is not None else None


def learn(store: DeviceStore, name: str, entries: Sequence[dict[str, Any]]) -> Learned:
    """Add measured whole models (``learned_entry``'s dicts) to the stored table
    ``name`` as calibration models. Entries whose ops the table does not hold, or whose
    latency is not a positive number, are skipped; so is a table calibrated on fewer
    than ``MIN_CALIBRATION_MODELS`` (it predicts the plain sum of its ops)."""
    table = store.load(name)
    if table.path is None:
        raise TableError(f"device table {name!r} has no stored files to learn into")
    count = len(table.whole_models("calibration"))
    if count < MIN_CALIBRATION_MODELS:  # uncalibrated: a few front models cannot fit it
        why = f"the table has {count} calibration models, fewer than {MIN_CALIBRATION_MODELS}"
        return Learned(name, 0, count, None, None, skipped=why)
    before = _cv_mape(table)
    known = {r.key for r in table.rows if r.kind == "op" and r.status == "ok"}
    same_plan: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if set(e["op_keys"]) <= known and math.isfinite(e["median_ms"]) and e["median_ms"] > 0:
            same_plan.setdefault(e["key"], []).append(e)
    # one row per plan: two members of one plan (a sampler may suggest it twice) are one
    # model measured twice, stated by the median of their latencies
    usable = [
        {**group[0], "median_ms": statistics.median(e["median_ms"] for e in group)}
        for group in same_plan.values()
    ]
    if not usable:
        return Learned(name, 0, count, before, before, skipped="no entry's ops are in the table")
    path = table.path
    keys = {e["key"] for e in usable}
    rows = [r for r in table.rows if r.key not in keys]
    for e in usable:
        ms = e["median_ms"]
        rows.append(Row(e["key"], "calibration", e["key"], "", "", "ok", ms, ms, ms, 1, None, ms))
    tmp = path.with_name(path.name + ".tmp")
    write_rows(tmp, rows)
    shutil.move(str(tmp), path)
    learned_path = path.parent / "bundles" / LEARNED_FILE
    old = json.loads(learned_path.read_text()) if learned_path.exists() else []
    merged = {e["key"]: e for e in old}
    merged.update({e["key"]: {k: v for k, v in e.items() if k != "median_ms"} for e in usable})
    learned_path.parent.mkdir(exist_ok=True)
    learned_path.write_text(json.dumps(list(merged.values())))
    after_table = store.load(name)
    store.record(name, learned_models=len(merged))
    return Learned(
        name,
        len(usable),
        len(after_table.whole_models("calibration")),
        before,
        _cv_mape(after_table),
    )
