"""The device runner: measures every model of an op bundle with ONNX Runtime.

This file imports only onnxruntime, numpy and the standard library, so it runs on a
Raspberry Pi or a Jetson after ``pip install onnxruntime numpy`` with this one file
copied over::

    python runner.py ops.zip --device pi4 --out pi4.csv

(or ``python -m frontier.latency_models.runner`` / ``frontier lut measure`` where
Frontier is installed). Rerunning with the same ``--out`` skips what the file holds.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

BUNDLE_FORMAT = "frontier-op-bundle"
#: Version 2 stores large weights as seeded external initializers (``weights``).
BUNDLE_VERSION = 2
#: Bundle versions this runner measures.
READABLE_VERSIONS = (1, 2)
COLUMNS = [
    "model_id",
    "kind",
    "key",
    "op_type",
    "precision",
    "status",
    "median_ms",
    "p10_ms",
    "p90_ms",
    "runs",
    "error",
    "raw_median_ms",
]

#: Seconds of reference runs in each window of the reference level (``reference_level``).
REFERENCE_LEVEL_S = 1.0
#: The level is taken once two windows in a row agree within this share and neither is
#: slower than the fastest window so far by more than it (a cold machine runs slow for
#: its first seconds), or after ``REFERENCE_LEVEL_MAX_S``.
REFERENCE_LEVEL_STABLE = 0.03
REFERENCE_LEVEL_MAX_S = 10.0
#: Seconds the reference runs before its level is timed at all.
REFERENCE_WARMUP_S = 3.0
#: Which of a bundle's references each kind of model is timed beside: a machine's slow
#: spells hit small cache-resident kernels and whole models (memory traffic) differently,
#: so ops follow an op and whole models follow a whole model.
REFERENCE_OF = {"overhead": "op", "op": "op", "calibration": "model", "validation": "model"}
#: Whole models are timed in this many fresh sessions (each up to the time cap), spread
#: over the run, and their row holds the median over sessions. Predictions are fitted to
#: whole models (calibration) and judged against them (validation), so their noise is
#: everyone's; and one session's memory placement moves a model's time by about 1.5%,
#: which no amount of runs inside that session averages out.
WHOLE_MODEL_SESSIONS = 3
#: A session whose reference ran this much slower than the machine's calm level is timed
#: again once the spell has passed (``SlowSpells``), at most ``SLOW_RETRIES`` times.
SLOW_FACTOR = 1.2
SLOW_RETRIES = 3
#: The longest wait, in seconds, for a slow spell to pass before a session is retimed.
SPELL_WAIT_S = 2.0


def cpu_model() -> str:
    """The CPU's model name, as the OS reports it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _timed(run: Any) -> float:
    t0 = time.perf_counter()
    run()
    return (time.perf_counter() - t0) * 1000.0


def time_session(
    run: Any,
    *,
    reference: Any = None,
    min_runs: int = 10,
    max_runs: int = 2000,
    warmup_s: float = 0.02,
    time_cap_s: float = 0.5,
    rel_ci: float = 0.02,
) -> dict[str, float]:
    """Time ``run()`` until the 95% CI of the median is within ``rel_ci`` or the cap.

    The CI of the median comes from order statistics (ranks n/2 -/+ 0.98 sqrt(n)).
    With ``reference`` (another model's run), every timed run is followed by two runs
    of the reference, the second timed (the first warms its caches again); the result
    then also holds ``reference_ms``, the reference's median over the same seconds, and
    ``ratio_median`` / ``ratio_p10`` / ``ratio_p90``, quantiles of each run's time over
    the reference run after it (the CI then tracks the ratio). A shared machine that
    slows down for a while slows both, so their ratio holds still.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        run()
        if reference is not None:
            reference()
    times: list[float] = []
    refs: list[float] = []
    ratios: list[float] = []
    tracked = times if reference is None else ratios
    t_begin = time.perf_counter()
    while len(times) < max_runs:
        times.append(_timed(run))
        if reference is not None:
            reference()
            refs.append(_timed(reference))
            ratios.append(times[-1] / refs[-1])
        n = len(times)
        if n >= min_runs and (n % 5 == 0 or time.perf_counter() - t_begin > time_cap_s):
            s = sorted(tracked)
            half = 0.98 * n**0.5
            lo = s[max(0, int(n / 2 - half))]
            hi = s[min(n - 1, int(n / 2 + half))]
            med = statistics.median(s)
            if (hi - lo) <= rel_ci * med or time.perf_counter() - t_begin > time_cap_s:
                break
    s = sorted(times)
    out = {
        "median_ms": statistics.median(s),
        "p10_ms": _quantile(s, 0.1),
        "p90_ms": _quantile(s, 0.9),
        "runs": float(len(s)),
    }
    if refs:
        r = sorted(ratios)
        out["reference_ms"] = statistics.median(refs)
        out["ratio_median"] = statistics.median(r)
        out["ratio_p10"] = _quantile(r, 0.1)
        out["ratio_p90"] = _quantile(r, 0.9)
    return out


def visit_order(sessions: dict[Any, int], seed: int = 0) -> list[Any]:
    """Each model as many times as it has ``sessions``, in a seeded random order: a slow
    spell of the machine then falls on many models a little, not on a few models whole,
    and a model's sessions lie spread over the run."""
    visits = [key for key, n in sessions.items() for _ in range(n)]
    random.Random(seed).shuffle(visits)
    return visits


def combine_sessions(sessions: list[dict[str, float]]) -> dict[str, float]:
    """One row from the stats of several sessions of one model: the median over sessions
    of each latency figure, and the runs of all of them."""
    out = {k: statistics.median(s[k] for s in sessions) for k in sessions[0] if k.endswith("_ms")}
    out["runs"] = float(sum(s["runs"] for s in sessions))
    return out


class SlowSpells:
    """Tells a session timed in one of a shared machine's slow spells, by its reference,
    and has it timed again once the spell has passed.

    On a shared machine the timings of small models jump by 1.4-1.7x for seconds at a
    time (a neighbour's load), and not by the same factor for every model: the ratio to
    the reference beside them moves by 5-25%, so normalising does not undo it. A session
    of a small model lasts milliseconds, so it falls wholly inside a spell or outside;
    the reference's median over the session tells which. The calm level is the low
    quantile of the reference medians of the sessions seen so far; the first
    ``MIN_SEEN`` sessions only set it. (Not the reference level the run measures at
    start: that is timed beside the reference's twin, and a small reference runs
    faster there than beside other models, which would make every session look slow.)
    """

    MIN_SEEN = 5

    def __init__(self, factor: float = SLOW_FACTOR) -> None:
        self.factor = factor
        self.seen: list[float] = []
        #: sessions timed again, per model
        self.retimed: dict[Any, int] = {}

    def calm_ms(self) -> float:
        return _quantile(sorted(self.seen), 0.2)

    def slow(self, stats: dict[str, float]) -> bool:
        """Whether ``stats`` (``time_session`` beside a reference) came from a slow spell;
        every call also adds its reference median to what is seen."""
        ref = stats.get("reference_ms")
        if ref is None:
            return False
        slow = len(self.seen) >= self.MIN_SEEN and ref > self.factor * self.calm_ms()
        self.seen.append(ref)
        return slow

    def retime(self, model: Any, stats: dict[str, float], reference: Any) -> bool:
        """Whether ``model``'s session (``stats``) is to be timed again: it fell in a slow
        spell and has been timed again fewer than ``SLOW_RETRIES`` times. If so, first
        waits for the spell to pass (``wait``)."""
        if not self.slow(stats) or self.retimed.get(model, 0) >= SLOW_RETRIES:
            return False
        self.retimed[model] = self.retimed.get(model, 0) + 1
        self.wait(reference)
        return True

    def wait(self, reference: Any, max_s: float = SPELL_WAIT_S) -> float:
        """Run ``reference`` (twice per check, the second timed, as sessions time it)
        until the median of five checks is calm again, for at most ``max_s``; the
        seconds waited."""
        start = time.perf_counter()
        calm = self.factor * self.calm_ms()
        while time.perf_counter() - start < max_s:
            times = []
            for _ in range(5):
                reference()
                times.append(_timed(reference))
            if statistics.median(times) <= calm:
                break
        return time.perf_counter() - start


def reference_level(
    reference: Any,
    twin: Any,
    seconds: float = REFERENCE_LEVEL_S,
    *,
    max_s: float = REFERENCE_LEVEL_MAX_S,
    stable: float = REFERENCE_LEVEL_STABLE,
    warmup_s: float = REFERENCE_WARMUP_S,
) -> float:
    """The reference's median latency (ms) as ``time_session`` times it: beside a model
    of its own size, ``twin`` (a second session of the same model), in windows of
    ``seconds``, once the machine has settled.

    A freshly booted or idle machine runs its first seconds slow (clocks ramping up,
    caches and pages cold), and a level taken then scales every row of the table by
    the same error (1.4x was seen, in the first second). So the pair first runs for
    ``warmup_s``; then windows are timed until two in a row agree within ``stable`` and
    neither is slower than the fastest window yet by more than ``stable``; the level is
    their mean. After ``max_s`` more, the fastest window's level is taken."""
    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        twin()
        reference()
    windows: list[float] = []
    start = time.perf_counter()
    while True:
        stats = time_session(twin, reference=reference, time_cap_s=seconds, rel_ci=0.0)
        windows.append(stats["reference_ms"])
        if len(windows) >= 2:
            a, b = windows[-2:]
            calm = min(windows) * (1 + stable)
            if abs(a - b) <= stable * min(a, b) and max(a, b) <= calm:
                return (a + b) / 2
        if time.perf_counter() - start >= max_s:
            return min(windows)


def normalise(stats: dict[str, float], level_ms: float) -> dict[str, float]:
    """``stats`` in the reference's units: the quantiles of each run's time over the
    reference run beside it, times ``level_ms``, so the rows of a table share one
    machine state (the one ``level_ms`` was measured in). The measured median stays as
    ``raw_median_ms``; without a reference the stats are returned as they are."""
    out = {k: v for k, v in stats.items() if k != "reference_ms" and not k.startswith("ratio")}
    out["raw_median_ms"] = stats["median_ms"]
    if "ratio_median" in stats:
        for k in ("median", "p10", "p90"):
            out[f"{k}_ms"] = stats[f"ratio_{k}"] * level_ms
    return out


def session_options(threads: int) -> Any:
    """ONNX Runtime session options for timing: ``threads`` intra-op threads, quiet."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def seeded_weights(layout: list[Any], seed: int) -> dict[str, Any]:
    """The weights of a bundle model whose large initializers were left out
    (``layout``: ``[name, dtype, dims]`` each), drawn from ``seed``. A dense kernel's
    time does not depend on the values, only on their shapes and types; floats are
    drawn small and normal-range (no denormals, no NaN), integers over their range."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for name, dtype, dims in layout:
        if dtype == "float32":
            out[name] = rng.uniform(-0.05, 0.05, size=dims).astype(np.float32)
        elif dtype in ("int8", "uint8"):
            info = np.iinfo(dtype)
            out[name] = rng.integers(info.min, info.max, size=dims, endpoint=True, dtype=dtype)
        else:
            raise ValueError(f"weights of {name!r}: dtype {dtype!r} is not seeded")
    return out


def _fresh_options(options: Any) -> Any:
    """A copy of ``options``: external initializers are added to session options, and a
    copy keeps one model's from reaching another's session."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    for attr in (
        "intra_op_num_threads",
        "inter_op_num_threads",
        "log_severity_level",
        "enable_profiling",
        "profile_file_prefix",
    ):
        setattr(so, attr, getattr(options, attr))
    return so


def inference_session(
    data: bytes,
    options: Any,
    *,
    provider: str = "CPUExecutionProvider",
    weights: list[Any] | None = None,
    weights_seed: int = 0,
) -> Any:
    """An ONNX Runtime session of the model ``data``; with ``weights`` (the layout of
    the initializers a bundle left out), those are drawn from ``weights_seed`` and added
    as external initializers, so they are constants to the runtime, as in the export."""
    import onnxruntime as ort

    if not weights:
        return ort.InferenceSession(data, options, providers=[provider])
    options = _fresh_options(options)
    values = seeded_weights(weights, weights_seed)
    ort_values = [ort.OrtValue.ortvalue_from_numpy(v) for v in values.values()]
    options.add_external_initializers(list(values), ort_values)
    sess = ort.InferenceSession(data, options, providers=[provider])
    sess._frontier_weights = ort_values  # must outlive the session
    return sess


def open_session(
    data: bytes,
    options: Any,
    *,
    provider: str = "CPUExecutionProvider",
    batch_size: int = 1,
    rng: Any = None,
    weights: list[Any] | None = None,
    weights_seed: int = 0,
) -> tuple[Any, dict[str, Any]]:
    """A call that runs the ONNX model ``data`` once on seeded random inputs (dynamic
    dimensions at ``batch_size``), and those inputs. ``weights`` and ``weights_seed``:
    as ``inference_session``."""
    import numpy as np

    rng = rng if rng is not None else np.random.default_rng(0)
    sess = inference_session(
        data, options, provider=provider, weights=weights, weights_seed=weights_seed
    )
    feeds = {}
    for inp in sess.get_inputs():
        dims = [d if isinstance(d, int) else batch_size for d in inp.shape]
        if inp.type in ("tensor(int64)", "tensor(int32)"):
            # token ids: 1 to 4 are rows of any vocabulary (BERT's has its five special
            # tokens first), and a dense kernel's time does not depend on which it reads
            dtype = np.int64 if inp.type == "tensor(int64)" else np.int32
            feeds[inp.name] = rng.integers(1, 5, size=dims).astype(dtype)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return (lambda: sess.run(None, feeds)), feeds


def weights_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The ``weights`` and ``weights_seed`` of a bundle entry, where it has them."""
    if not entry.get("weights"):
        return {}
    return {"weights": entry["weights"], "weights_seed": int(entry.get("weights_seed", 0))}


def manifest_path(out: Path) -> Path:
    """Where the runner keeps a copy of the bundle's manifest beside its table."""
    return Path(str(out) + ".manifest.json")


def profiles_path(out: Path) -> Path:
    """Where the per-node kernel times of a table's calibration models go."""
    return Path(str(out) + ".profiles.jsonl")


def profile_nodes(
    model: bytes,
    feeds: dict[str, Any],
    threads: int,
    provider: str,
    runs: int = 30,
    *,
    reference: Any = None,
    level_ms: float = 0.0,
    weights: list[Any] | None = None,
    weights_seed: int = 0,
) -> dict[str, list[Any]]:
    """Each node's median kernel time (us) inside the whole model, from ONNX Runtime's
    profiler: ``{node name: [op type, median us]}``, plus ``"model_run"``.

    With ``reference`` and its ``level_ms`` the times are normalised as ``normalise``
    does: the reference runs (twice, the second timed) after every profiled run.
    ``weights``, ``weights_seed``: as ``inference_session``."""
    so = session_options(threads)
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "profile")
        sess = inference_session(
            model, so, provider=provider, weights=weights, weights_seed=weights_seed
        )
        refs: list[float] = []
        for _ in range(runs):
            sess.run(None, feeds)
            if reference is not None:
                reference()
                refs.append(_timed(reference))
        events = json.loads(Path(sess.end_profiling()).read_text())
    # the first runs warm caches up; keep the later half
    scale = level_ms / statistics.median(refs[len(refs) // 2 :]) if refs else 1.0
    times: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            times.setdefault(node, []).append(float(e["dur"]))
            kinds[node] = e.get("args", {}).get("op_name", "")
        elif name == "model_run":
            times.setdefault("model_run", []).append(float(e["dur"]))
            kinds["model_run"] = ""
    return {
        k: [kinds[k], scale * statistics.median(v[len(v) // 2 :])] for k, v in times.items() if v
    }


def read_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest, checked for format and version."""
    try:
        with zipfile.ZipFile(bundle) as zf:
            manifest: dict[str, Any] = json.loads(zf.read("manifest.json"))
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as err:
        raise ValueError(f"{bundle}: not a readable op bundle zip ({err})") from None
    if manifest.get("format") != BUNDLE_FORMAT:
        raise ValueError(f"{bundle}: not a Frontier op bundle (format {manifest.get('format')!r})")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{bundle}: bundle version {manifest.get('version')!r}; "
            f"this runner reads versions {list(READABLE_VERSIONS)}"
        )
    return manifest


def _done_ids(out: Path) -> set[str]:
    if not out.exists():
        return set()
    with out.open(newline="") as f:
        return {row["model_id"] for row in csv.DictReader(f) if row.get("model_id")}


def _progress(done: int, total: int, start: float, label: str) -> None:
    if not sys.stderr.isatty() and done not in (total,) and done % 50:
        return
    width = 30
    frac = done / max(total, 1)
    eta = (time.perf_counter() - start) / max(frac, 1e-9) * (1 - frac) if done else 0.0
    bar = "#" * int(width * frac) + "-" * (width - int(width * frac))
    end = "\n" if done == total or not sys.stderr.isatty() else "\r"
    print(f"[{bar}] {done}/{total} eta {eta:5.0f}s {label[:40]:<40}", end=end, file=sys.stderr)


def measure_bundle(
    bundle: str | Path,
    out: str | Path,
    *,
    device: str,
    provider: str = "CPUExecutionProvider",
    threads: int = 1,
    batch_size: int = 1,
    time_cap_s: float = 0.5,
    kinds: tuple[str, ...] = ("overhead", "op", "calibration", "validation"),
    reference: bool = True,
    sessions: int = WHOLE_MODEL_SESSIONS,
) -> Path:
    """Measure every model of ``bundle`` and append rows to the CSV ``out``.

    Writes ``out`` (one row per model), ``out`` + ``.meta.json`` (device metadata),
    ``out`` + ``.manifest.json`` (the bundle's manifest: op specs and the ops of each
    whole model, which calibration needs) and, for the calibration models, ``out`` +
    ``.profiles.jsonl`` (each node's kernel time inside the whole model, from ONNX
    Runtime's profiler). ``frontier lut import`` reads them all from beside the CSV.
    Models already in ``out`` are skipped, so an interrupted run resumes.

    Where the bundle names references (an op, and a whole model), every model is timed
    interleaved with the one of its size (``REFERENCE_OF``) and its latencies are
    normalised to that reference's level, measured once at the start
    (``references.ROLE.level_ms`` in the metadata; a resumed run keeps it). A shared
    machine's slow minutes then shift no row against another, nor the validation
    models against the calibration models. The measured medians stay in
    ``raw_median_ms``, and each reference is written to ``out`` + ``.reference-ROLE.onnx``
    so that ``frontier lut validate`` can measure whole models in the table's units.

    Args:
        bundle: the ``.zip`` written by ``frontier lut ops``.
        out: the CSV to write.
        device: the device's name, as the user calls it (``pi4``, ``local-cpu``).
        provider: the ONNX Runtime execution provider.
        threads: intra-op threads.
        batch_size: the batch fed to models with a dynamic batch dimension (the
            validation models); op models are built at the bundle's batch size.
        time_cap_s: the most time spent timing one session of a model.
        kinds: which kinds of model to measure.
        reference: normalise to the bundle's references, where it names them.
        sessions: fresh sessions per whole model (calibration and validation models),
            spread over the run; their row is the median over sessions. A run
            interrupted between a model's sessions times that model again in full.
    """
    if sessions < 1:
        raise ValueError(f"sessions must be at least 1, got {sessions}")
    import numpy as np
    import onnxruntime as ort

    bundle, out = Path(bundle), Path(out)
    manifest = read_manifest(bundle)
    if provider not in ort.get_available_providers():
        raise ValueError(
            f"provider {provider!r} is not available; available: {ort.get_available_providers()}"
        )
    meta = {
        "device": device,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": threads,
        "batch_size": batch_size,
        "onnxruntime": ort.__version__,
        "provider": provider,
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "bundle_version": manifest["version"],
        "bundle_id": manifest.get("bundle_id", ""),
        "time_cap_s": time_cap_s,
        "whole_model_sessions": sessions,
    }
    meta_path = Path(str(out) + ".meta.json")
    fresh = not meta_path.exists()
    if not fresh:
        old = json.loads(meta_path.read_text())
        if old.get("bundle_id") != meta["bundle_id"]:
            raise ValueError(f"{out} holds measurements of another bundle; choose another --out")
        meta = {**old, "date": meta["date"]}
    so = session_options(threads)
    rng = np.random.default_rng(0)

    def session(data: bytes, entry: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return open_session(
            data,
            so,
            provider=provider,
            batch_size=batch_size,
            rng=rng,
            **weights_of(entry),
        )

    by_id = {m["id"]: m for m in manifest["models"]}
    roles = {r: by_id[i] for r, i in (manifest.get("references") or {}).items() if i in by_id}
    refs: dict[str, tuple[Any, float]] = {}
    spells: dict[str, SlowSpells] = {}
    # A resumed table keeps the units its first rows were measured in.
    if reference and roles and (fresh or "references" in meta):
        levels = meta.setdefault("references", {})
        with zipfile.ZipFile(bundle) as zf:
            for role, entry in roles.items():
                data = zf.read(entry["file"])
                ref_run = session(data, entry)[0]
                if role not in levels:
                    level = reference_level(ref_run, session(data, entry)[0])
                    levels[role] = {"key": entry["key"], "level_ms": level, **weights_of(entry)}
                refs[role] = (ref_run, float(levels[role]["level_ms"]))
                spells[role] = SlowSpells()
                Path(f"{out}.reference-{role}.onnx").write_bytes(data)
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    # The result carries what the table is predicted with (op specs, the ops of each
    # whole model), so an import needs nothing but the files beside the CSV.
    manifest_path(out).write_text(json.dumps(manifest))
    done = _done_ids(out)
    wanted = [m for m in manifest["models"] if m["kind"] in kinds]
    todo = {m["id"]: m for m in wanted if m["id"] not in done}
    if len(todo) < len(wanted):
        print(
            f"resuming {out}: {len(wanted) - len(todo)} of {len(wanted)} models already "
            + (f"measured, {len(todo)} to go" if todo else "measured; nothing left to measure"),
            file=sys.stderr,
        )
    # Whole models get several sessions. A shared or throttling device drifts over
    # minutes; visiting in a seeded random order spreads that drift over ops and whole
    # models alike, and a whole model's sessions over the run, instead of biasing one.
    left = {i: sessions if REFERENCE_OF.get(m["kind"]) == "model" else 1 for i, m in todo.items()}
    visits = visit_order(left)
    timed: dict[str, list[dict[str, float]]] = {}
    header = COLUMNS
    if out.exists():
        with out.open(newline="") as f:
            header = next(csv.reader(f), []) or COLUMNS
    new_file = not out.exists()
    start = time.perf_counter()
    with zipfile.ZipFile(bundle) as zf, out.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        if new_file:
            writer.writeheader()
        n = 0
        while n < len(visits):
            model_id = visits[n]
            entry = todo[model_id]
            if n:
                _progress(n, len(visits), start, entry.get("key", model_id))
            n += 1
            if left[model_id] == 0:  # unsupported on an earlier visit
                continue
            left[model_id] -= 1
            row: dict[str, Any] = {
                "model_id": entry["id"],
                "kind": entry["kind"],
                "key": entry.get("key", entry["id"]),
                "op_type": entry.get("op_type", ""),
                "precision": entry.get("precision", ""),
            }
            try:
                data = zf.read(entry["file"])
                run, feeds = session(data, entry)
                role = REFERENCE_OF.get(entry["kind"], "")
                ref_run, level_ms = refs.get(role, (None, 0.0))
                stats = time_session(run, reference=ref_run, time_cap_s=time_cap_s)
                if role in spells and spells[role].retime(model_id, stats, ref_run):
                    left[model_id] += 1  # timed in a slow spell: this visit again
                    visits.insert(n, model_id)
                    continue
                timed.setdefault(model_id, []).append(normalise(stats, level_ms))
                if left[model_id]:
                    continue
                stats = combine_sessions(timed.pop(model_id))
                row.update({k: f"{v:.6g}" for k, v in stats.items()}, status="ok", error="")
                row["runs"] = int(stats["runs"])
                if entry["kind"] == "calibration":
                    nodes = profile_nodes(
                        data,
                        feeds,
                        threads,
                        provider,
                        reference=ref_run,
                        level_ms=level_ms,
                        **weights_of(entry),
                    )
                    with profiles_path(out).open("a") as pf:
                        pf.write(json.dumps({"key": row["key"], "nodes": nodes}) + "\n")
            except Exception as err:  # the provider cannot run it: record, don't crash
                msg = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                left[model_id] = 0
                timed.pop(model_id, None)
                row.update(
                    status="unsupported",
                    median_ms="",
                    p10_ms="",
                    p90_ms="",
                    raw_median_ms="",
                    runs=0,
                    error=msg,
                )
            writer.writerow(row)
            f.flush()
    if visits:
        _progress(len(visits), len(visits), start, "done")
    meta["slow_sessions_retimed"] = int(meta.get("slow_sessions_retimed", 0)) + sum(
        count for spell in spells.values() for count in spell.retimed.values()
    )
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return out


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    """The measuring options, shared by this runner and ``frontier lut measure``."""
    parser.add_argument("bundle", help="the ops.zip bundle")
    parser.add_argument("--device", required=True, help="a name for this device, e.g. pi4")
    parser.add_argument("--out", required=True, help="the CSV to write (resumed if it exists)")
    parser.add_argument("--provider", default="CPUExecutionProvider")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument(
        "--time-cap",
        type=float,
        default=0.5,
        help="seconds of timing per session of a model (default 0.5)",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=WHOLE_MODEL_SESSIONS,
        help="fresh sessions per whole (calibration, validation) model, spread over the "
        f"run; the row is their median (default {WHOLE_MODEL_SESSIONS})",
    )
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="time each model alone, not interleaved with the bundle's reference model",
    )


def summary(out: Path) -> str:
    """One line on a measured table: its rows by status, and where the metadata is."""
    with out.open(newline="") as f:
        statuses = [row.get("status", "") for row in csv.DictReader(f)]
    unsupported = statuses.count("unsupported")
    return (
        f"wrote {out}: {len(statuses)} model{'' if len(statuses) == 1 else 's'}, "
        f"{len(statuses) - unsupported} measured, "
        f"{unsupported} unsupported; keep the files beside it ({out.name}.*) for "
        "`frontier lut import`"
    )


def measure_from_args(args: argparse.Namespace) -> Path:
    """Run ``measure_bundle`` with options parsed by ``add_measure_arguments``."""
    return measure_bundle(
        args.bundle,
        args.out,
        device=args.device,
        provider=args.provider,
        threads=args.threads,
        batch_size=args.batch_size,
        time_cap_s=args.time_cap,
        reference=not args.no_reference,
        sessions=args.sessions,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="frontier-runner", description="Measure a Frontier op bundle on this device."
    )
    add_measure_arguments(parser)
    try:
        print(summary(measure_from_args(parser.parse_args(argv))))
    except (ValueError, OSError, zipfile.BadZipFile, KeyError) as err:
        print(f"runner: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
