"""A search's front, measured on a device Frontier cannot reach: the members' ONNX
models packed as a bundle the device runner measures like any other (kind ``front``),
and the runner's result read back, keyed by each member's MLflow run id."""

from __future__ import annotations

import csv
import hashlib
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..ops._op_models import strip_weights
from ..runner import BUNDLE_FORMAT, BUNDLE_VERSION, manifest_path

FRONT_KIND = "front"
#: the ``role`` of the bundle's baseline entry: the uncompressed model, keyed by the
#: search's parent run, so the device's result says what each member gains there
BASELINE_ROLE = "baseline"


def write_front_bundle(
    out: str | Path,
    models: Sequence[tuple[str, bytes]],
    *,
    device: str,
    source: dict[str, Any],
    plans: dict[str, dict[str, Any]] | None = None,
    baseline: tuple[bytes, dict[str, Any]] | None = None,
    keep_weights: bool = False,
) -> dict[str, Any]:
    """Write ``models`` (``(run id, ONNX bytes)``) to the bundle ``out`` for the runner
    on ``device``; ``source`` (the search's parent run and tracking URI) travels in the
    manifest so the result can be attached to those runs, and ``plans`` (by run id:
    ``plan_entry``'s plan, op keys and op nodes) so it can join the device's table.
    ``baseline`` (ONNX bytes and its ``plan_entry``) is measured beside the members,
    keyed by the parent run, so the device's speed-up of each member is known. The
    models' large weights are stripped (``strip_weights``: the runner draws them from
    a seed; latency depends on their shapes and types, and a ResNet-50 front shrinks
    from about 100 MB a member to under 1 MB) unless ``keep_weights``."""
    digest = hashlib.sha256()
    entries: list[dict[str, Any]] = []
    models = list(models)
    plans = dict(plans or {})
    parent = str(source.get("parent", "baseline"))
    if baseline is not None:
        models.append((parent, baseline[0]))
        plans[parent] = baseline[1]
    files: list[bytes] = []
    for i, (run_id, data) in enumerate(models):
        digest.update(run_id.encode() + data)
        layout: list[list[Any]] = []
        if not keep_weights:
            data, layout = strip_weights(data)
        files.append(data)
        found: dict[str, Any] = plans.get(run_id, {})
        role = BASELINE_ROLE if baseline is not None and run_id == parent else ""
        name = role or f"front-{i}"
        entry: dict[str, Any] = {
            "id": name,
            "kind": FRONT_KIND,
            "key": run_id,
            "file": f"{name}.onnx",
            **({"role": role} if role else {}),
            **({"weights": layout, "weights_seed": i} if layout else {}),
        }
        entry.update({k: found[k] for k in ("plan", "op_keys", "op_nodes") if k in found})
        if "key" in found:
            entry["calibration_key"] = found["key"]
        entries.append(entry)
    manifest = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "bundle_id": digest.hexdigest()[:16],
        "name": f"front of {source.get('parent', '?')}",
        "batch_size": 1,
        "front": {"device": device, **source},
        "models": entries,
    }
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for entry, data in zip(entries, files, strict=True):
            zf.writestr(entry["file"], data)
        zf.writestr("manifest.json", json.dumps(manifest, indent=1))
    return manifest


def read_front_result(result: str | Path) -> tuple[dict[str, Any], dict[str, float]]:
    """The front manifest a runner's result was measured from (``front``: device,
    parent run, tracking URI; ``entries``: the bundle's entries by run id) and each
    member's measured ms by run id (``ok`` rows; the baseline's, where the bundle has
    one, under the parent run's id, which ``front["baseline"]`` then names). Raises
    ValueError when ``result`` is not the measurement of a front bundle."""
    result = Path(result)
    copy = manifest_path(result)
    if not result.is_file() or not copy.is_file():
        raise ValueError(
            f"{result}: needs the runner's CSV and its {copy.name} beside it (the runner "
            "writes both)"
        )
    manifest = json.loads(copy.read_text())
    if "front" not in manifest:
        raise ValueError(f"{result}: not the measurement of a front bundle (lut front)")
    measured: dict[str, float] = {}
    with result.open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get("kind") == FRONT_KIND and row.get("status") == "ok":
                measured[row["key"]] = float(row["median_ms"])
    entries = {e["key"]: e for e in manifest.get("models", []) if e.get("kind") == FRONT_KIND}
    base = [k for k, e in entries.items() if e.get("role") == BASELINE_ROLE]
    return {
        **manifest["front"],
        "entries": entries,
        **({"baseline": base[0]} if base else {}),
    }, measured
