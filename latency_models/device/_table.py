"""Device tables: measured per-op latencies with device metadata, and the device store.

A table is plain CSV (one row per measured model, the runner's columns, optionally an
``energy_mj`` column) plus JSON metadata, so people can read and diff them. The store is
a directory per device under ``$FRONTIER_DATA_DIR`` (default ``~/.local/share/frontier``).

Over 500 lines: the table's rows, their reading and validation, their restating against
the baseline and the store that keeps them are one format, read top to bottom.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runner import (
    COLUMNS,
    READABLE_VERSIONS,
    manifest_path,
    profiles_path,
    restated,
    seeded_weights,
    state_against,
)

REQUIRED = ("model_id", "kind", "key", "status", "median_ms")
KINDS = ("overhead", "op", "calibration", "validation", "baseline")
#: Fewest calibration models a table's calibration is fitted from (5-fold
#: cross-validation picks it); with fewer a table predicts the plain sum of its ops.
MIN_CALIBRATION_MODELS = 8
#: Fewest measured ops a few-shot table shares with its base, and fewest whole models
#: it holds (they choose and scale its predictions).
MIN_SHARED_OPS = 4
MIN_FEW_SHOT_WHOLE_MODELS = 3

#: How a bundle's uncompressed model is keyed in a table: every row the bundle measured
#: names it as its ``baseline_key``, so the key says which space a row belongs to.
BASELINE_PREFIX = "baseline-"


def baseline_key(bundle: str) -> str:
    """The table key of bundle ``bundle``'s uncompressed model."""
    return BASELINE_PREFIX + bundle


def bundle_of(key: str) -> str:
    """The bundle whose uncompressed model ``key`` is (``baseline_key``'s inverse)."""
    return key.removeprefix(BASELINE_PREFIX)


class TableError(ValueError):
    """A device table breaks a rule; the message names the file and the rows."""


def data_dir() -> Path:
    """Frontier's data directory: ``$FRONTIER_DATA_DIR`` or ``~/.local/share/frontier``."""
    env = os.environ.get("FRONTIER_DATA_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "frontier"


@dataclass(frozen=True)
class Row:
    """One measured model."""

    model_id: str
    kind: str
    key: str
    op_type: str
    precision: str
    status: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    energy_mj: float | None = None
    #: the median as measured (the same as ``median_ms`` since timing protocol 1)
    raw_median_ms: float = math.nan
    #: the uncompressed model's median in the same rounds (``runner.relative_to``);
    #: NaN where the bundle had no baseline
    baseline_ms: float = math.nan
    #: which uncompressed model that was (a store's table holds several spaces)
    baseline_key: str = ""
    #: the row's ratio to it in the same rounds (``runner.relative_to``)
    relative: float = math.nan
    #: a GPU's diagnostics beside the price (``Backend.diagnose``): the model's time
    #: as eager PyTorch (the launch floor), and its host time per replay
    eager_ms: float = math.nan
    host_ms: float = math.nan
    #: an op's layout glue (``runner.glue_split``): the shares of its time spent
    #: converting its input into ``layout`` and its output back (0 and "" where none)
    glue_in_share: float = 0.0
    glue_out_share: float = 0.0
    layout: str = ""


#: what a bundle's own measurement states of itself, kept by bundle in a table that holds
#: several bundles' rows (``DeviceMeta.bundles``)
BUNDLE_FACTS = (
    "date",
    "noise_pct",
    "noise_models",
    "noise_within_5pct",
    "noise_within_10pct",
    "drifted_chunks",
    "redone_chunks",
)


def _bundles(old: dict[str, Any], new: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each bundle's own facts once ``new``'s rows join ``old``'s: those ``old`` kept (its
    top-level ones for a table stored before they were kept by bundle), then ``new``'s,
    which replace a bundle measured again."""
    kept = dict(old.get("bundles") or new.get("bundles") or {})
    for meta in (old, new):
        if meta.get("bundle_id") and (meta is new or meta["bundle_id"] not in kept):
            kept[meta["bundle_id"]] = {k: meta[k] for k in BUNDLE_FACTS if k in meta}
    return kept


@dataclass(frozen=True)
class DeviceMeta:
    """What Frontier knows of a device beside its rows: the typed fields other parts read
    and write. The metadata file keeps the runner's own keys as well (``extra``).

    Args:
        device: the device name the table is stored under.
        cpu, provider, threads, onnxruntime, date, bundle_id: how it was measured.
        half: its 16-bit layers run in FP16 (a GPU's bundle, ``export_onnx(half=True)``).
        int8_qdq: its INT8 models are in QDQ format (an OpenVINO device's bundle,
            ``export_onnx(qdq=True)``); else ONNX Runtime's QOperator format.
        batch_size, op_batch_size: the batch its whole models were timed at, and its op
            models built at (one, where the table was imported).
        active_power_w: the device's power while running, for energy (None: unknown).
        unsupported_ops: op kinds it cannot run (priced on ``offload_device``).
        derived_from: the device whose rows a derived device reuses.
        offload_device: where unsupported ops run.
        transfer_gbps: bandwidth to the offload device.
        noise_pct, noise_models: see ``noise_band``.
        protocol: how its rows were timed (``runner.protocol``).
        few_shot_from: the device a few-shot table's ops are transferred from.
        import_warnings: what importing its measurements warned of.
        validation: the last ``lut validate`` result.
        extra: every other key of the metadata file, kept as read.
    """

    device: str | None = None
    cpu: str | None = None
    provider: str | None = None
    threads: int | None = None
    onnxruntime: str | None = None
    date: str | None = None
    bundle_id: str | None = None
    half: bool = False
    int8_qdq: bool = False
    batch_size: int | None = None
    op_batch_size: int | None = None
    active_power_w: float | None = None
    unsupported_ops: tuple[str, ...] = ()
    derived_from: str | None = None
    offload_device: str | None = None
    transfer_gbps: float | None = None
    #: how well its whole models timed twice agreed when it was built (90th percentile
    #: of the difference, percent; ``noise_models`` of them): below that, no difference
    #: on this device is real
    noise_pct: float | None = None
    noise_models: int | None = None
    #: each bundle's own measurement (``BUNDLE_FACTS``: its date, its noise band), by
    #: bundle id: a device's table holds the rows of every space measured on it, and the
    #: fields above are those of the latest
    bundles: dict[str, dict[str, Any]] = field(default_factory=dict)
    protocol: dict[str, Any] | None = None
    few_shot_from: str | None = None
    import_warnings: tuple[str, ...] = ()
    validation: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def noise_band(self) -> str:
        """What its noise means to a reader ("" where it was not measured)."""
        if self.noise_pct is None:
            return ""
        return (
            f"differences under {self.noise_pct:.1f}% on {self.device or 'this device'} are "
            f"within its noise ({self.noise_models} whole models timed twice when its table "
            "was built agreed that closely, 90th percentile)"
        )

    def for_bundle(self, bundle_id: str | None) -> DeviceMeta:
        """The device as it measured one bundle: that bundle's date and noise band where
        they are kept (``bundles``), else the table's."""
        facts = self.bundles.get(bundle_id or "")
        if facts is None:
            return self
        rest = {k: v for k, v in self.to_dict().items() if k not in BUNDLE_FACTS}
        return DeviceMeta.from_dict({**rest, **facts, "bundle_id": bundle_id})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceMeta:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        for many in ("unsupported_ops", "import_warnings"):
            if many in known:
                known[many] = tuple(known[many] or ())
        for flag in ("half", "int8_qdq"):
            if flag in known:
                known[flag] = bool(known[flag])
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The metadata file's content: set fields and ``extra``."""
        out = dict(self.extra)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value not in (None, (), False, {}):
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass
class DeviceTable:
    """Per-op latencies of one device. Build with ``read_table`` or ``DeviceStore.load``."""

    name: str
    meta: dict[str, Any]
    rows: list[Row]
    path: Path | None = None
    #: the bundle manifest entries behind the rows (op specs, whole-model plans), by key
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per-node kernel times (ONNX Runtime profiler) of calibration models, by key
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: a few-shot table's base: the full table of another device its ops are
    #: transferred from (``few_shot_from`` in the metadata)
    base: DeviceTable | None = None
    _by_key: dict[str, Row] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {r.key: r for r in self.rows}
        self.__dict__.pop("unsupported_types", None)
        self.__dict__.pop("overhead_ms", None)
        self.__dict__.pop("device_meta", None)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "meta":  # new metadata: its typed form is read again when next asked
            self.__dict__.pop("device_meta", None)

    def get(self, key: str) -> Row | None:
        return self._by_key.get(key)

    @functools.cached_property
    def device_meta(self) -> DeviceMeta:
        """The metadata, typed: read once (``meta`` is the file's content, as written)."""
        return DeviceMeta.from_dict(self.meta)

    def bundle_meta(self, bundle_id: str | None) -> DeviceMeta:
        """The metadata as the device measured one bundle (``DeviceMeta.for_bundle``)."""
        return self.device_meta.for_bundle(bundle_id)

    def derive(
        self, name: str, *, unsupported: list[str], offload: str, transfer_gbps: float
    ) -> DeviceTable:
        """A device priced from this table's rows that cannot run the ``unsupported`` op
        kinds: they run on ``offload`` and move their tensors at ``transfer_gbps``."""
        meta = dataclasses.replace(
            self.device_meta,
            device=name,
            derived_from=self.name,
            unsupported_ops=tuple(sorted(set(unsupported))),
            offload_device=offload,
            transfer_gbps=transfer_gbps,
        )
        return DeviceTable(
            name=name,
            meta=meta.to_dict(),
            rows=list(self.rows),
            models=self.models,
            profiles=self.profiles,
        )

    @functools.cached_property
    def overhead_ms(self) -> float:
        """Per-run session overhead: the median over the identity model's measurements
        (several, spread over the run), or 0 if unmeasured."""
        values = [r.median_ms for r in self.rows if r.kind == "overhead" and r.status == "ok"]
        return statistics.median(values) if values else 0.0

    def ops(self) -> list[Row]:
        return [r for r in self.rows if r.kind == "op"]

    def whole_models(self, kind: str) -> list[Row]:
        return [r for r in self.rows if r.kind == kind and r.status == "ok"]

    @functools.cached_property
    def unsupported_types(self) -> set[str]:
        """Op types the device cannot run: from metadata, or every row of the type failed."""
        declared = set(self.device_meta.unsupported_ops)
        by_type: dict[str, list[str]] = {}
        for r in self.ops():
            by_type.setdefault(r.op_type, []).append(r.status)
        failed = {t for t, st in by_type.items() if st and all(s != "ok" for s in st)}
        return declared | failed

    @property
    def active_power_w(self) -> float | None:
        value = self.device_meta.active_power_w
        return float(value) if value is not None else None

    @property
    def content_hash(self) -> str:
        text = "\n".join(f"{r.key},{r.status},{r.median_ms}" for r in self.rows)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def summary(self) -> dict[str, Any]:
        ops = self.ops()
        by_type: dict[str, int] = {}
        for r in ops:
            by_type[r.op_type] = by_type.get(r.op_type, 0) + 1
        meta = self.device_meta
        return {
            "name": self.name,
            "device": meta.device,
            "cpu": meta.cpu,
            "provider": meta.provider,
            "threads": meta.threads,
            "onnxruntime": meta.onnxruntime,
            "date": meta.date,
            "ops": len(ops),
            "ops_ok": sum(r.status == "ok" for r in ops),
            "ops_by_type": dict(sorted(by_type.items())),
            "unsupported_types": sorted(self.unsupported_types),
            "overhead_ms": self.overhead_ms,
            # how every row was timed (runner.protocol)
            "protocol": meta.protocol,
            "calibration_models": len(self.whole_models("calibration")),
            "validation_models": len(self.whole_models("validation")),
            "energy_column": any(r.energy_mj is not None for r in self.rows),
            "active_power_w": self.active_power_w,
            "content_hash": self.content_hash,
        }


def with_weights(model_bytes: bytes, layout: list[list[Any]], seed: int) -> bytes:
    """A stripped bundle model (``strip_weights``) whole again: its weights drawn from
    ``seed`` as the runner draws them, stored in the file."""
    import onnx
    from onnx import numpy_helper

    if not layout:
        return model_bytes
    values = seeded_weights(layout, seed)
    proto = onnx.load_from_string(model_bytes)
    for tensor in proto.graph.initializer:
        if tensor.name in values:
            tensor.CopyFrom(numpy_helper.from_array(values[tensor.name], tensor.name))
    return bytes(proto.SerializeToString())


def _float(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


class _NotANumber(ValueError):
    """A numeric column of a table row holds something else."""


def _share(raw: dict[str, Any], column: str) -> float:
    """The row's ``column`` as a share of its time: 0 where empty, else in [0, 1]."""
    share = _number(raw, column)
    if math.isnan(share):
        return 0.0
    if not 0.0 <= share <= 1.0:
        raise _NotANumber(f"{column} must be between 0 and 1, got {share!r}")
    return share


def _number(raw: dict[str, Any], column: str) -> float:
    """The row's ``column`` as a float (NaN where empty); ``_NotANumber`` names it."""
    text = (raw.get(column) or "").strip()
    try:
        return _float(text)
    except ValueError:
        raise _NotANumber(f"{column} must be a number, got {text!r}") from None


def read_table(path: str | Path, *, name: str | None = None) -> DeviceTable:
    """Read and validate a measured table (CSV plus ``.meta.json`` beside it).

    Rejects missing columns, unknown kinds, non-finite or non-positive latencies of
    measured rows, duplicate keys and a bundle version this Frontier cannot read; every
    bad row is named by its line number.
    """
    path = Path(path)
    if path.is_dir():
        raise TableError(f"{path}: is a folder; give the table CSV `frontier lut measure` wrote")
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    try:
        return _read_table(path, name)
    except UnicodeDecodeError as err:
        raise TableError(
            f"{path}: not a UTF-8 text file (byte {err.start} is "
            f"{err.object[err.start : err.start + 1]!r}); expected the CSV that "
            "`frontier lut measure` writes"
        ) from None
    except csv.Error as err:
        raise TableError(f"{path}: not a readable CSV ({err})") from None


def _read_meta(path: Path) -> dict[str, Any]:
    """The metadata beside a table's CSV (``.meta.json``; empty where there is none),
    refusing a bundle version this Frontier does not read."""
    meta_path = Path(str(path) + ".meta.json")
    meta: dict[str, Any] = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise TableError(f"{meta_path}: not valid JSON ({err})") from err
    version = meta.get("bundle_version", READABLE_VERSIONS[-1])
    if version not in READABLE_VERSIONS:
        raise TableError(
            f"{meta_path}: bundle_version {version!r}; this Frontier reads "
            f"{list(READABLE_VERSIONS)} (version 3 times INT8 ops inside their chain and "
            "their precision boundaries apart): write the bundle again with `frontier lut "
            "ops`, measure it and import it"
        )
    return meta


def _row(raw: dict[str, Any], line: int, seen: dict[str, int]) -> Row | str:
    """One CSV row as a ``Row``, or what is wrong with it (``seen``: keys by line)."""
    try:
        return _parsed_row(raw, line, seen)
    except _NotANumber as err:
        return str(err)


def _parsed_row(raw: dict[str, Any], line: int, seen: dict[str, int]) -> Row | str:
    key = (raw.get("key") or "").strip()
    kind = (raw.get("kind") or "").strip()
    status = (raw.get("status") or "").strip()
    median = _number(raw, "median_ms")
    energy_text = (raw.get("energy_mj") or "").strip()
    if not key:
        return "empty key"
    if key in seen:
        return f"duplicate key {key!r} (first at row {seen[key]})"
    seen[key] = line
    if kind not in KINDS:
        return f"kind must be one of {list(KINDS)}, got {kind!r}"
    if status not in ("ok", "unsupported"):
        return f"status must be ok or unsupported, got {status!r}"
    if status == "ok" and not (math.isfinite(median) and median > 0):
        return f"median_ms must be finite and > 0, got {median!r}"
    energy = None
    if energy_text:
        energy = _number(raw, "energy_mj")
        if not (math.isfinite(energy) and energy >= 0):
            return f"energy_mj must be finite and >= 0, got {energy!r}"
    return Row(
        model_id=raw.get("model_id", ""),
        kind=kind,
        key=key,
        op_type=raw.get("op_type", ""),
        precision=raw.get("precision", ""),
        status=status,
        median_ms=median,
        p10_ms=_number(raw, "p10_ms"),
        p90_ms=_number(raw, "p90_ms"),
        runs=int(runs) if math.isfinite(runs := _number(raw, "runs")) else 0,
        energy_mj=energy,
        raw_median_ms=_number(raw, "raw_median_ms"),
        baseline_ms=_number(raw, "baseline_ms"),
        baseline_key=(raw.get("baseline_key") or "").strip(),
        relative=_number(raw, "relative"),
        eager_ms=_number(raw, "eager_ms"),
        host_ms=_number(raw, "host_ms"),
        glue_in_share=_share(raw, "glue_in_share"),
        glue_out_share=_share(raw, "glue_out_share"),
        layout=(raw.get("layout") or "").strip(),
    )


def _read_table(path: Path, name: str | None) -> DeviceTable:
    meta = _read_meta(path)
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise TableError(f"{path}: missing required column(s) {missing}; header is {header}")
        rows: list[Row] = []
        problems: list[str] = []
        seen: dict[str, int] = {}
        for line, raw in enumerate(reader, start=2):
            row = _row(raw, line, seen)
            if isinstance(row, str):
                problems.append(f"row {line}: {row}")
            else:
                rows.append(row)
    if problems:
        raise TableError(_refused(path, problems))
    _check_batch(path, meta, rows)
    return DeviceTable(
        name=name or meta.get("device") or path.stem,
        meta=meta,
        rows=against_baseline(rows),
        path=path,
    )


def _refused(path: Path, problems: list[str]) -> str:
    """One line for a table's bad rows: how many, the first, and the file that lists
    them all (``PATH.rejected``, written beside the table where it can be)."""
    first = problems[0]
    if len(problems) == 1:
        return f"{path}: 1 bad row: {first}"
    rejected = Path(f"{path}.rejected")
    try:
        rejected.write_text("\n".join(problems) + "\n", encoding="utf-8")
        where = f"; all in {rejected}"
    except OSError:
        where = ""
    return f"{path}: {len(problems):,} bad rows, the first {first}{where}"


def _check_batch(path: Path, meta: dict[str, Any], rows: list[Row]) -> None:
    """Refuse a table whose whole models were timed at another batch than its op models
    were built at: its sum of ops would predict one batch and calibrate on another."""
    typed = DeviceMeta.from_dict(meta)
    batch, op_batch = typed.batch_size, typed.op_batch_size
    if batch is None or op_batch is None or int(batch) == int(op_batch):
        return
    if any(r.kind == "op" for r in rows):
        raise TableError(
            f"{path}.meta.json: whole models timed at batch {batch}, op models built at "
            f"batch {op_batch}; measure the bundle again without --batch-size (the runner "
            "takes the bundle's batch)"
        )


def _anchor_key(row: Row) -> tuple[str, bool]:
    """Which median a row is stated against: its baseline's, over the chunks of its own
    sort. The uncompressed model runs at another speed between op models than between
    whole models (its caches after a 5 us op are not those after a whole model): on a
    MobileNetV3 table 0.178 ms among ops against 0.195 among whole models, one speed."""
    return row.baseline_key, row.kind in ("op", "overhead")


def _baseline_anchors(rows: list[Row]) -> dict[tuple[str, bool], float]:
    """Each baseline's median ``baseline_ms`` over the rows of each sort timed beside it."""
    by_key: dict[tuple[str, bool], list[float]] = {}
    for r in rows:
        if r.status == "ok" and r.baseline_ms > 0 and r.baseline_key:
            by_key.setdefault(_anchor_key(r), []).append(r.baseline_ms)
    return {k: _csv_digits(statistics.median(v)) for k, v in by_key.items()}


def _csv_digits(value: float) -> float:
    """``value`` as the table's CSV keeps it (6 significant digits): a table stated
    against its baseline, written and read again, reads the same."""
    return float(f"{value:.6g}")


def against_baseline(rows: list[Row]) -> list[Row]:
    """``rows`` stated against the uncompressed model (``runner.state_against``): a row
    whose chunk ran the baseline far off its median over the table (another of the
    device's speeds) becomes its ratio to it times that median; the rest, and rows
    without a baseline, stay as measured; the baseline's own row is that median (it was
    timed in every chunk). Stating them again changes nothing."""
    anchors = _baseline_anchors(rows)
    if not anchors:
        return rows
    out = []
    for r in rows:
        anchor = anchors.get(_anchor_key(r))
        if r.status != "ok" or anchor is None or not r.baseline_ms > 0 or not r.relative > 0:
            out.append(r)
            continue
        ms = _csv_digits(state_against(r.median_ms, r.relative, r.baseline_ms, anchor))
        if r.kind == "baseline":  # timed in every chunk: its price is their median
            ms = anchor
        spread = restated({"median_ms": r.median_ms, "p10_ms": r.p10_ms, "p90_ms": r.p90_ms}, ms)
        out.append(
            dataclasses.replace(
                r,
                median_ms=ms,
                p10_ms=_csv_digits(spread["p10_ms"]),
                p90_ms=_csv_digits(spread["p90_ms"]),
            )
        )
    return out


class DeviceStore:
    """Device tables by name, as ``ROOT/devices/NAME/table.csv`` + ``table.csv.meta.json``."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else data_dir()
        for path in (self.root, *self.root.parents):
            if path.exists() and not path.is_dir():
                raise TableError(
                    f"the device store {self.root}: {path} is a file, not a folder; point "
                    "device_store (or --store, $FRONTIER_DATA_DIR) at a folder"
                )

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise TableError(f"device name must be a plain name, got {name!r}")
        return self.root / "devices" / name

    def names(self) -> list[str]:
        base = self.root / "devices"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / "table.csv").exists())

    def has(self, name: str) -> bool:
        return (self._dir(name) / "table.csv").exists()

    def load(self, name: str, *, _within: tuple[str, ...] = ()) -> DeviceTable:
        """The stored table ``name`` with its bundle entries, profiles and, for a few-shot
        table, its base table (``base``)."""
        path = self._dir(name) / "table.csv"
        if not path.exists():
            raise TableError(
                f"no device table named {name!r} in {self.root}; known: {self.names() or 'none'}"
                " (import one with `frontier lut import`)"
            )
        table = read_table(path, name=name)
        for file in sorted((path.parent / "bundles").glob("*.json")):
            for entry in json.loads(file.read_text()):
                table.models[entry["key"]] = entry
        table.profiles = read_profiles(profiles_path(path))
        base = table.device_meta.few_shot_from
        if base:
            chain = (*_within, name)
            if base in chain:
                raise TableError(
                    f"device table {name!r}: its few-shot base {base!r} leads back to itself "
                    f"({' -> '.join((*chain, base))}); import one of them again without "
                    "--few-shot-from"
                )
            table.base = self.load(base, _within=chain)
        return table

    def import_table(
        self,
        path: str | Path,
        *,
        name: str,
        meta: DeviceMeta | None = None,
        manifest: dict[str, Any] | None = None,
        merge: bool = False,
        allow_degraded: bool = False,
        few_shot_from: str | None = None,
    ) -> DeviceTable:
        """Validate ``path`` and store it as ``name``.

        What the runner wrote beside the CSV comes along: ``.meta.json`` (device
        metadata), ``.manifest.json`` (the bundle's manifest), ``.profiles.jsonl``
        (in-context kernel times) and the reference models. A table missing any of
        these that its rows need predicts worse than it could (no whole-model
        calibration, no in-context calibration, unknown CPU and threads), so it is
        refused, or with ``allow_degraded`` stored with each loss in
        ``import_warnings``. Fewer than ``MIN_CALIBRATION_MODELS`` calibration models
        are recorded there too.

        Args:
            path: the measured CSV (the runner's files beside it).
            name: the device name to store it under.
            meta: metadata to add: its set fields (``active_power_w``, ...) override
                the table's.
            manifest: the bundle's manifest, where it is not beside the CSV; its
                whole-model entries let the table calibrate predictions against
                whole-model latency.
            merge: keep a stored table's rows that ``path`` does not replace.
            allow_degraded: store a table missing what its rows need, with warnings.
            few_shot_from: a stored device whose full table predicts the ops this
                (few-shot) table did not measure (``frontier lut ops --few-shot``).
        """
        path = Path(path)
        table = read_table(path, name=name)
        if few_shot_from is not None:
            self._check_base(path, table, name, few_shot_from)
        manifest = manifest if manifest is not None else _read_manifest_beside(path)
        losses = _import_losses(path, table, manifest)
        if losses and not allow_degraded:
            raise TableError(
                f"{path}: not imported, it would predict worse than it was measured: "
                + "; ".join(losses)
                + ". Keep the files the runner wrote beside the CSV, or pass --bundle; or "
                "import anyway with --allow-degraded (recorded in its import_warnings)"
            )
        warnings = [*losses, *_calibration_warnings(table)]
        added = meta.to_dict() if meta is not None else {}
        if few_shot_from is not None:
            added["few_shot_from"] = few_shot_from
        merged_meta = {**table.meta, **added, "device": name}
        rows = table.rows
        old = self._mergeable(name, table, warnings) if merge else None
        if old is not None:
            new_keys = {r.key for r in rows}
            rows = [r for r in old.rows if r.key not in new_keys] + rows
            merged_meta = {**old.meta, **merged_meta}
            warnings = [*old.device_meta.import_warnings, *warnings]
        merged_meta["bundles"] = _bundles(old.meta if old is not None else {}, table.meta)
        for key in BUNDLE_FACTS:  # the top-level facts are the latest bundle's, not a mix
            if table.device_meta.bundle_id and key not in table.meta:
                merged_meta.pop(key, None)
        merged_meta.pop("import_warnings", None)
        if warnings:
            merged_meta["import_warnings"] = list(dict.fromkeys(warnings))
        profiles = {
            **(old.profiles if old is not None else {}),
            **read_profiles(profiles_path(Path(path))),
        }
        self._write(name, rows, merged_meta, profiles, manifest)
        return self.load(name)

    def _check_base(self, path: Path, table: DeviceTable, name: str, base: str) -> None:
        """Refuse a few-shot base that is not stored, shares too little with ``table``,
        or is itself predicted through ``name``."""
        if not self.has(base):
            raise TableError(
                f"few-shot base {base!r} is not a stored device table; known: "
                f"{self.names() or 'none'}"
            )
        _check_few_shot(path, table, self.load(base))
        if name in self._bases(base):
            raise TableError(
                f"{name!r} cannot be predicted through {base!r}: "
                f"{base!r} is predicted through {name!r} "
                f"({' -> '.join(self._bases(base))})"
            )

    def _mergeable(self, name: str, table: DeviceTable, warnings: list[str]) -> DeviceTable | None:
        """The stored table ``name`` whose rows ``table``'s join, or None (and why, in
        ``warnings``) where it cannot be read or was timed with another protocol."""
        if not self.has(name):
            return None
        try:
            old = self.load(name)
        except TableError as err:  # an older bundle version: replaced, not merged
            warnings.append(f"the stored {name} table was dropped: {err}")
            return None
        if old.device_meta.protocol != table.device_meta.protocol:
            # rows timed another way are not comparable: the new run replaces them
            warnings.append(
                f"the stored {name} rows were timed with another protocol "
                f"({old.device_meta.protocol}) and were dropped"
            )
            return None
        return old

    def _write(
        self,
        name: str,
        rows: list[Row],
        meta: dict[str, Any],
        profiles: dict[str, Any],
        manifest: dict[str, Any] | None,
    ) -> None:
        """Store a table's files: its rows (replaced in one move), profiles, metadata and
        the whole-model entries of its bundle's manifest."""
        target = self._dir(name)
        target.mkdir(parents=True, exist_ok=True)
        tmp = target / "table.csv.tmp"
        write_rows(tmp, rows)
        shutil.move(str(tmp), target / "table.csv")
        with profiles_path(target / "table.csv").open("w") as f:
            for key, nodes in profiles.items():
                f.write(json.dumps({"key": key, "nodes": nodes}) + "\n")
        (target / "table.csv.meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        if manifest is not None:
            whole = [
                {
                    k: e[k]
                    for k in ("id", "kind", "key", "seed", "plan", "op_keys", "op_nodes", "spec")
                    if k in e
                }
                for e in manifest["models"]
            ]
            (target / "bundles").mkdir(exist_ok=True)
            (target / "bundles" / f"{manifest['bundle_id']}.json").write_text(json.dumps(whole))

    def _bases(self, name: str) -> list[str]:
        """``name`` and the devices its few-shot table leans on, in order."""
        chain: list[str] = []
        while name and name not in chain and self.has(name):
            chain.append(name)
            meta_path = self._dir(name) / "table.csv.meta.json"
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            name = meta.get("few_shot_from") or ""
        return chain

    def record(self, name: str, **fields: Any) -> None:
        """Add ``fields`` to the stored metadata of ``name`` (``validation``, say)."""
        meta_path = self._dir(name) / "table.csv.meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        meta.update(fields)
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))


def _check_few_shot(path: Path, table: DeviceTable, base: DeviceTable) -> None:
    """A few-shot table must share enough measured ops with its base, and hold enough
    whole models, to be predicted through it."""
    shared = sum(
        r.status == "ok" and (b := base.get(r.key)) is not None and b.status == "ok"
        for r in table.ops()
    )
    whole = len(table.whole_models("calibration"))
    if shared < MIN_SHARED_OPS or whole < MIN_FEW_SHOT_WHOLE_MODELS:
        raise TableError(
            f"{path}: shares {shared} measured ops with its base table {base.name!r} and "
            f"holds {whole} calibration models; a few-shot table needs at least "
            f"{MIN_SHARED_OPS} and {MIN_FEW_SHOT_WHOLE_MODELS} (write its bundle from the "
            "same config with `frontier lut ops --few-shot N`)"
        )


def _read_manifest_beside(path: Path) -> dict[str, Any] | None:
    file = manifest_path(path)
    if not file.exists():
        return None
    try:
        manifest: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TableError(f"{file}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("models"), list):
        raise TableError(f"{file}: not a bundle manifest (no 'models' list)")
    return manifest


def _import_losses(path: Path, table: DeviceTable, manifest: dict[str, Any] | None) -> list[str]:
    """What importing ``path`` as it is would lose, one sentence each."""
    losses = []
    if not Path(str(path) + ".meta.json").exists():
        losses.append(
            f"no {path.name}.meta.json: the device's CPU, threads, ONNX Runtime and the "
            "timing protocol its rows were measured with would be unknown"
        )
    whole = [r for r in table.rows if r.kind in ("calibration", "validation")]
    bundle_id = table.device_meta.bundle_id
    if manifest is not None and bundle_id and manifest.get("bundle_id") not in (None, bundle_id):
        raise TableError(
            f"{path}: measured bundle {bundle_id}, but the manifest given is of bundle "
            f"{manifest.get('bundle_id')}"
        )
    if whole and manifest is None:
        losses.append(
            f"{len(whole)} whole models but no bundle manifest (the runner writes "
            f"{manifest_path(path).name}; or --bundle): without the ops of each, there is "
            "no calibration and predictions are the plain sum of ops"
        )
    calibration = [r for r in table.rows if r.kind == "calibration" and r.status == "ok"]
    if calibration and not profiles_path(path).exists():
        losses.append(
            f"{len(calibration)} calibration models but no {profiles_path(path).name}: the "
            "in-context calibration (each op's kernel time inside whole models) is lost"
        )
    return losses


def _calibration_warnings(table: DeviceTable) -> list[str]:
    calibration = sum(r.kind == "calibration" and r.status == "ok" for r in table.rows)
    if 0 < calibration < MIN_CALIBRATION_MODELS:
        return [
            f"only {calibration} calibration models (at least {MIN_CALIBRATION_MODELS} are "
            "needed): predictions are the plain sum of ops"
        ]
    return []


def read_profiles(path: Path) -> dict[str, dict[str, Any]]:
    """Per-node kernel times the runner profiled, by whole-model key ({} if none)."""
    if not path.exists():
        return {}
    out = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise TableError(f"{path}: not a UTF-8 text file ({err})") from None
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                record = json.loads(line)
                out[record["key"]] = record["nodes"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise TableError(
                    f"{path}: line {number} is not a profile record ({err!r})"
                ) from None
    return out


def write_rows(path: Path, rows: list[Row]) -> None:
    columns = COLUMNS
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {
                    "model_id": r.model_id,
                    "kind": r.kind,
                    "key": r.key,
                    "op_type": r.op_type,
                    "precision": r.precision,
                    "status": r.status,
                    "median_ms": "" if math.isnan(r.median_ms) else f"{r.median_ms:.6g}",
                    "p10_ms": "" if math.isnan(r.p10_ms) else f"{r.p10_ms:.6g}",
                    "p90_ms": "" if math.isnan(r.p90_ms) else f"{r.p90_ms:.6g}",
                    "runs": r.runs,
                    "error": "",
                    "energy_mj": "" if r.energy_mj is None else f"{r.energy_mj:.6g}",
                    "raw_median_ms": ""
                    if math.isnan(r.raw_median_ms)
                    else f"{r.raw_median_ms:.6g}",
                    "baseline_ms": "" if math.isnan(r.baseline_ms) else f"{r.baseline_ms:.6g}",
                    "baseline_key": r.baseline_key,
                    "relative": "" if math.isnan(r.relative) else f"{r.relative:.6g}",
                    "eager_ms": "" if math.isnan(r.eager_ms) else f"{r.eager_ms:.6g}",
                    "host_ms": "" if math.isnan(r.host_ms) else f"{r.host_ms:.6g}",
                    "glue_in_share": f"{r.glue_in_share:.4g}" if r.layout else "",
                    "glue_out_share": f"{r.glue_out_share:.4g}" if r.layout else "",
                    "layout": r.layout,
                }
            )
