"""The device runner: measures every model of an op bundle with ONNX Runtime.

This file imports only onnxruntime, numpy and the standard library, so it runs on a
Raspberry Pi or a Jetson after ``pip install onnxruntime numpy`` with this one file
copied over::

    python runner.py ops.zip --device pi4 --out pi4.csv

An Intel box that deploys with OpenVINO measures with it instead (``pip install
openvino onnx numpy``; ``--precision`` sets its inference precision, f32 by default)::

    python runner.py ops.zip --device nuc --out nuc.csv --runtime openvino

(or ``python -m frontier.latency_models.runner`` / ``frontier lut measure`` where
Frontier is installed). Rerunning with the same ``--out`` skips what the file holds.

One file of over 500 lines on purpose: it is copied to the device alone, so it cannot
import the rest of the package.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

BUNDLE_FORMAT = "frontier-op-bundle"
#: Version 2 stores large weights as seeded external initializers (``weights``);
#: version 3 measures INT8 ops on 8-bit tensors, with the precision boundaries
#: (QuantizeLinear, DequantizeLinear) as ops of their own.
BUNDLE_VERSION = 3
#: Bundle versions this runner measures (older ones price INT8 ops another way: write
#: the bundle again).
READABLE_VERSIONS = (3,)
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
    "baseline_ms",
    "baseline_key",
    "relative",
    # what a backend records beside a whole model's price (``Backend.diagnose``)
    "energy_mj",
    "eager_ms",
    "host_ms",
    # an op model's layout glue (``glue_split``)
    "glue_in_share",
    "glue_out_share",
    "layout",
]
#: Nodes a runtime inserts around a kernel that runs in a layout of its own (ONNX
#: Runtime's NCHWc convolutions and pooling, its NHWC INT8 kernels, OpenVINO's
#: blocked layouts), by the layout they convert into or out of. An op timed alone pays
#: both conversions; inside a chain of kernels in the same layout, a whole model pays
#: them once, where the chain starts and ends.
LAYOUT_GLUE = {
    "ReorderInput": "nchwc",
    "ReorderOutput": "nchwc",
    "Transpose": "channels-last",
    "Reorder": "blocked",
}
#: runs an op model's profile takes (the later half is kept): enough for shares
OP_PROFILE_RUNS = 10
#: runs a calibration model's layer-by-layer profile takes (``Backend.profile``)
CALIBRATION_PROFILE_RUNS = 30

#: The one timing protocol (``time_models``). Every latency Frontier reports (table
#: rows, calibration and validation models, ``lut validate``, ``frontier pick``, the
#: benchmarks) is this: one ONNX Runtime session per model, sequential execution, the
#: table's intra-op threads; ``WARMUP_RUNS`` runs first; then ``ROUNDS`` rounds that
#: visit every model in turn (a seeded order per round), each visit running the model
#: ``ROUND_WARMUP_RUNS`` times untimed (the model before it left its own data in the
#: caches) and then back to back for ``ROUND_S`` seconds (at least ``MIN_ROUND_RUNS``
#: runs, at most ``MAX_ROUND_RUNS``), keeping the median; a model's latency is the
#: median of its round medians. That is what a user's plain loop measures (one warm
#: session, the median of many runs), in milliseconds of the machine as it runs; a
#: slow spell during a run falls on every model a little, because the rounds
#: interleave them, and one slow round of five is outvoted.
PROTOCOL_NAME = "frontier-ort-rounds"
#: Version 2 times every row beside the uncompressed model; version 3 also profiles
#: each op model once for its layout conversions (``glue_split``).
PROTOCOL_VERSION = 3
WARMUP_RUNS = 30
#: Warm-up stops after this many seconds even before ``WARMUP_RUNS`` (a slow model).
WARMUP_MAX_S = 3.0
ROUNDS = 5
ROUND_S = 0.15
MIN_ROUND_RUNS = 5
#: A round of a tiny model ends after this many runs (its median is settled long before
#: 0.15 s of a 10 us model), so a table of small ops measures in seconds, not minutes.
MAX_ROUND_RUNS = 200
ROUND_WARMUP_RUNS = 3
#: Sessions open at once: models are timed in chunks of this many (their rounds
#: interleave inside a chunk), so a bundle of large models does not fill memory.
CHUNK_MODELS = 24


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


def wall_clock_ms(run: Callable[[], Any]) -> float:
    """The protocol's default timer: ``run()``'s wall-clock time in ms, as a user's
    loop times ONNX Runtime's ``session.run`` on a CPU. A device whose work runs
    asynchronously (a GPU) needs a timer that waits for it, passed as ``timer``."""
    t0 = time.perf_counter()
    run()
    return (time.perf_counter() - t0) * 1000.0


def protocol(
    threads: int,
    *,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    provider: str = "",
    timer: str = "",
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """How ``time_models`` timed a table or a measurement, for its metadata; ``timer``
    names a timer other than the wall clock (``wall_clock_ms``), ``warmup_s`` a
    warm-up by time (a GPU's)."""
    return {
        "name": PROTOCOL_NAME,
        "version": PROTOCOL_VERSION,
        "threads": threads,
        "execution": "sequential, one InferenceSession per model",
        **({"provider": provider} if provider else {}),
        **({"timer": timer} if timer else {}),
        "warmup_runs": WARMUP_RUNS,
        **({"warmup_s": warmup_s} if warmup_s else {}),
        "rounds": rounds,
        "round_s": round_s,
        "round_runs": [MIN_ROUND_RUNS, MAX_ROUND_RUNS],
        "round_warmup_runs": ROUND_WARMUP_RUNS,
        "statistic": "median over rounds of each round's median run",
        "drift": "rounds visit every model in a seeded order, so a slow spell falls on "
        "many models a little; values are milliseconds of the machine as it ran",
        "against_baseline": "where a bundle holds the uncompressed model, every chunk "
        "times it in the same rounds; a row of a chunk whose baseline ran more than "
        f"{PHASE_TOLERANCE:.0%} off the baseline's median over the table is its ratio "
        "to it (the median over rounds of the per-round ratio) times that median, so a "
        "device changing speed between chunks moves no speed-up",
    }


def time_models(
    runs: Sequence[Callable[[], Any]],
    *,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    warmup_runs: int = WARMUP_RUNS,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    timer: Callable[[Callable[[], Any]], float] = wall_clock_ms,
    warmup_s: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> list[dict[str, Any]]:
    """Time each of ``runs`` (a call that runs one model once) by the protocol above;
    ``timer`` times one run in ms (``wall_clock_ms``), ``clock`` (seconds) bounds the
    warm-up and each visit (tests pass a fake one with a fake timer). Each model warms up for
    ``warmup_runs`` runs and, with ``warmup_s``, for at least that many seconds (a GPU
    raising its clocks, as ``trtexec --warmUp`` does), ``WARMUP_MAX_S`` at most.

    Returns per model ``median_ms`` (the median of its round medians), ``p10_ms`` and
    ``p90_ms`` over all its timed runs, ``runs``, and ``spread`` (the largest round
    median over the smallest, minus 1: how far one round could be off). ``progress``
    is called with the number of models done after each one's warm-up and rounds."""
    if rounds < 1 or round_s <= 0:
        raise ValueError(f"rounds must be >= 1 and round_s > 0, got {rounds=}, {round_s=}")
    for run in runs:
        start = clock()
        k = 0
        while True:
            run()
            k += 1
            elapsed = clock() - start
            if (k >= warmup_runs and elapsed >= min(warmup_s, WARMUP_MAX_S)) or (
                k > 1 and elapsed > WARMUP_MAX_S
            ):
                break
    order = random.Random(seed)
    medians: list[list[float]] = [[] for _ in runs]
    times: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        visit = list(range(len(runs)))
        order.shuffle(visit)
        for k, i in enumerate(visit):
            run = runs[i]
            for _ in range(ROUND_WARMUP_RUNS):
                run()
            got: list[float] = []
            end = clock() + round_s
            while len(got) < MIN_ROUND_RUNS or (clock() < end and len(got) < MAX_ROUND_RUNS):
                got.append(timer(run))
            medians[i].append(statistics.median(got))
            times[i].extend(got)
            if progress is not None and r == rounds - 1:
                progress(k + 1)
    out = []
    for m, t in zip(medians, times, strict=True):
        s = sorted(t)
        out.append(
            {
                "median_ms": statistics.median(m),
                "p10_ms": _quantile(s, 0.1),
                "p90_ms": _quantile(s, 0.9),
                "runs": float(len(s)),
                "spread": max(m) / min(m) - 1 if min(m) > 0 else 0.0,
                "round_medians": list(m),
            }
        )
    return out


def calibration_measure_s(data: bytes) -> float:
    """Seconds a bundle's measuring spends on one calibration model like ``data`` on one
    CPU thread: opening its session twice (timing and profile), the protocol's warm-up
    and rounds as ``time_models`` runs them, and ``CALIBRATION_PROFILE_RUNS`` profiled
    runs, from the time to open it and a few runs of it here."""
    start = time.perf_counter()
    run, _ = open_session(data, session_options(1))
    run()
    open_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(5):
        run()
    run_s = (time.perf_counter() - start) / 5
    visit_s = max(MIN_ROUND_RUNS * run_s, min(ROUND_S, MAX_ROUND_RUNS * run_s))
    rounds_s = ROUNDS * (ROUND_WARMUP_RUNS * run_s + visit_s)
    return 2 * open_s + (WARMUP_RUNS + CALIBRATION_PROFILE_RUNS) * run_s + rounds_s


#: a chunk whose uncompressed model ran this much off its median over the table ran
#: in another of the device's speeds: its rows are stated against the baseline
#: (``state_against``); closer, they keep their own medians (a ratio to a second noisy
#: median would only add that model's noise to every row of the chunk)
PHASE_TOLERANCE = 0.10


def relative_to(stats: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """``stats`` of a model timed in the same rounds as ``reference`` (``time_models``),
    with ``relative``: the median over rounds of the model's round median over the
    reference's in that round, and ``baseline_ms``: the reference's median. A device
    that changes speed between rounds (a throttling phone, a shared machine's speed
    phases) moves both alike, so the ratio holds where milliseconds do not."""
    ratios = [
        a / b for a, b in zip(stats["round_medians"], reference["round_medians"], strict=True)
    ]
    return {**stats, "relative": statistics.median(ratios), "baseline_ms": reference["median_ms"]}


def restated(stats: Mapping[str, float], ms: float) -> dict[str, float]:
    """``stats``' median restated as ``ms`` (``state_against``), its p10 and p90 scaled
    by the same factor."""
    k = ms / stats["median_ms"]
    return {"median_ms": ms, "p10_ms": stats["p10_ms"] * k, "p90_ms": stats["p90_ms"] * k}


def state_against(median_ms: float, relative: float, baseline_ms: float, anchor_ms: float) -> float:
    """A row's ms against the uncompressed model's median over the table
    (``anchor_ms``): its own median where its chunk ran the baseline within
    ``PHASE_TOLERANCE`` of it, else its ratio to the baseline times ``anchor_ms``."""
    if abs(baseline_ms / anchor_ms - 1) <= PHASE_TOLERANCE:
        return median_ms
    return relative * anchor_ms


def time_against(
    reference: Callable[[], Any], runs: Sequence[Callable[[], Any]], **options: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``time_models`` of ``runs`` with ``reference`` (the uncompressed model) timed in
    the same rounds: the reference's own stats, and each run's ``relative_to`` it."""
    stats = time_models([reference, *runs], **options)
    return stats[0], [relative_to(st, stats[0]) for st in stats[1:]]


def session_options(threads: int) -> Any:
    """ONNX Runtime session options for timing: ``threads`` intra-op threads, quiet."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
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
        if dtype in ("float32", "float16"):
            out[name] = rng.uniform(-0.05, 0.05, size=dims).astype(dtype)
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
        "execution_mode",
        "log_severity_level",
        "enable_profiling",
        "profile_file_prefix",
    ):
        setattr(so, attr, getattr(options, attr))
    return so


def inference_session(
    data: bytes | str,
    options: Any,
    *,
    provider: str = "CPUExecutionProvider",
    weights: list[Any] | None = None,
    weights_seed: int = 0,
) -> Any:
    """An ONNX Runtime session of the model ``data`` (its bytes, or its path); with
    ``weights`` (the layout of the initializers a bundle left out), those are drawn from
    ``weights_seed`` and added as external initializers, so they are constants to the
    runtime, as in the export."""
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
    data: bytes | str,
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
    inputs = [
        (i.name, i.type.removeprefix("tensor(").rstrip(")"), i.shape) for i in sess.get_inputs()
    ]
    feeds = seeded_feeds(inputs, batch_size, rng)
    return (lambda: sess.run(None, feeds)), feeds


#: ONNX Runtime's names of input element types -> numpy's
_FEED_TYPES = {"float": "float32", "float16": "float16", "int64": "int64", "int32": "int32",
               "uint8": "uint8", "int8": "int8"}  # fmt: skip


def seeded_feeds(inputs: list[tuple[str, str, list[Any]]], batch_size: int, rng: Any) -> dict:
    """Seeded inputs for ``inputs`` (name, element type as ONNX Runtime names it or
    numpy does, dimensions; a dimension that is not a number is the batch, at
    ``batch_size``): floats standard normal, token ids and 8-bit tensors drawn over
    their range."""
    import numpy as np

    feeds = {}
    for name, elem, shape in inputs:
        dims = [d if isinstance(d, int) else batch_size for d in shape]
        dtype = np.dtype(_FEED_TYPES.get(elem, elem))
        if dtype in (np.int64, np.int32):
            # token ids: 1 to 4 are rows of any vocabulary (BERT's has its five special
            # tokens first), and a dense kernel's time does not depend on which it reads
            feeds[name] = rng.integers(1, 5, size=dims).astype(dtype)
        elif dtype in (np.uint8, np.int8):
            # an INT8 op inside a chain reads the 8-bit tensor the op before it wrote
            info = np.iinfo(dtype)
            feeds[name] = rng.integers(info.min, info.max, size=dims, endpoint=True).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def time_chunked(
    items: Sequence[Any],
    make_run: Callable[[Any], Callable[[], Any]],
    *,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    reference: Any = None,
    timer: Callable[[Callable[[], Any]], float] = wall_clock_ms,
    warmup_s: float = 0.0,
) -> list[dict[str, Any]]:
    """``time_models`` over ``items`` in chunks of ``CHUNK_MODELS``: each chunk's runs
    are made (``make_run(item)``: a session, a kernel) only when it is timed, so a long
    list never holds more than one chunk in memory; their rounds interleave inside the
    chunk. One stats dict per item, in order; ``progress`` gets (done, total) after
    each chunk.

    With ``reference`` (an item: the uncompressed model), every chunk times it in the
    same rounds (``time_against``) and each item is stated against the reference's
    median over all chunks (``state_against``), so chunks timed in different speeds of
    the device agree."""
    out: list[dict[str, Any]] = []
    anchors: list[float] = []
    for first in range(0, len(items), CHUNK_MODELS):
        runs = [make_run(item) for item in items[first : first + CHUNK_MODELS]]
        timing: dict[str, Any] = {
            "rounds": rounds, "round_s": round_s, "seed": seed + first, "timer": timer,
            "warmup_s": warmup_s,
        }  # fmt: skip
        if reference is None:
            out += time_models(runs, **timing)
        else:
            ref, stats = time_against(make_run(reference), runs, **timing)
            anchors.append(ref["median_ms"])
            out += stats
        if progress is not None:
            progress(len(out), len(items))
    if anchors:
        anchor = statistics.median(anchors)
        for st in out:
            ms = state_against(st["median_ms"], st["relative"], st["baseline_ms"], anchor)
            st.update(restated(st, ms))
    return out


def measure_onnx(
    models: Sequence[bytes | str | Path],
    *,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    reference: bytes | str | Path | None = None,
    backend: Backend | None = None,
    batch_size: int = 1,
) -> list[dict[str, Any]]:
    """Whole ONNX models (bytes or files) timed on this machine by the protocol
    (``time_chunked``, stated against ``reference`` where given), at ``batch_size`` on
    seeded random inputs; one stats dict per model, in order. ``backend`` opens and
    times each (``OrtBackend()``, one CPU thread, by default). ``progress`` gets (models
    done, models) after each chunk."""
    import numpy as np

    backend = backend if backend is not None else OrtBackend()

    def make_run(m: bytes | str | Path) -> Callable[[], Any]:
        data = m if isinstance(m, bytes) else Path(m).read_bytes()
        rng = np.random.default_rng(0)
        return backend.open(data, {}, batch_size=batch_size, rng=rng)[0]

    return time_chunked(
        models,
        make_run,
        rounds=rounds,
        round_s=round_s,
        seed=seed,
        progress=progress,
        reference=reference,
        **timed_by(backend),
    )


def timed_by(backend: Backend) -> dict[str, Any]:
    """``time_models``' timer and warm-up for ``backend`` (its ``warmup_s``, if any)."""
    return {"timer": backend.timer, "warmup_s": float(getattr(backend, "warmup_s", 0.0))}


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


def glue_split(nodes: Mapping[str, Any]) -> dict[str, str]:
    """An op model's layout glue, from its profile (``profile_nodes``' format, in
    execution order): the shares of its kernel time spent converting its input into
    the layout its kernel runs in and its output back (``LAYOUT_GLUE`` nodes before the
    first and after the last other node), and that layout ("" where it has none).
    Shares, not times: the profiler's own cost per node inflates small nodes, so the
    price (the unprofiled median) is split in these proportions."""
    kernels = [(v[0], float(v[1])) for k, v in nodes.items() if k != "model_run"]
    total = sum(us for _, us in kernels)
    core = [i for i, (kind, _) in enumerate(kernels) if kind not in LAYOUT_GLUE]
    if not core or total <= 0:
        return {}
    ins, outs = kernels[: core[0]], kernels[core[-1] + 1 :]
    layouts = sorted({LAYOUT_GLUE[kind] for kind, _ in ins + outs})
    return {
        "glue_in_share": f"{sum(us for _, us in ins) / total:.4g}",
        "glue_out_share": f"{sum(us for _, us in outs) / total:.4g}",
        "layout": "+".join(layouts),
    }


def profile_nodes(
    model: bytes,
    feeds: dict[str, Any],
    threads: int,
    provider: str,
    runs: int = CALIBRATION_PROFILE_RUNS,
    *,
    weights: list[Any] | None = None,
    weights_seed: int = 0,
) -> dict[str, list[Any]]:
    """Each node's median kernel time (us) inside the whole model, from ONNX Runtime's
    profiler: ``{node name: [op type, median us]}``, plus ``"model_run"``.
    ``weights``, ``weights_seed``: as ``inference_session``."""
    so = session_options(threads)
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "profile")
        sess = inference_session(
            model, so, provider=provider, weights=weights, weights_seed=weights_seed
        )
        for _ in range(runs):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
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
    # the first runs warm caches up; keep the later half
    return {k: [kinds[k], statistics.median(v[len(v) // 2 :])] for k, v in times.items() if v}


class Backend(Protocol):
    """What the runner measures a bundle's models with: an ONNX Runtime provider
    (``OrtBackend``), or another engine with its own timer (a GPU's, in
    ``runner_torch``). The loop, the protocol and the files written are the same."""

    provider: str
    #: the threads its models run on, as the table records them (the backend holds the
    #: count: no caller passes one beside it)
    threads: int
    #: the name of ``timer`` in the protocol's metadata ("" for the wall clock)
    timer_name: str
    #: whether its runtime converts layouts around kernels, shown in its profiles as
    #: ``LAYOUT_GLUE`` nodes: its op models are profiled for it (``glue_split``)
    layout_glue: bool

    def describe(self) -> dict[str, Any]:
        """What the table's metadata records of the engine (its name and version)."""
        ...

    def open(
        self, data: bytes, entry: dict[str, Any], *, batch_size: int, rng: Any
    ) -> tuple[Callable[[], Any], dict[str, Any]]:
        """A call that runs the bundle model ``data`` once, and its inputs."""
        ...

    def timer(self, run: Callable[[], Any]) -> float:
        """``run()``'s time in ms."""
        ...

    def profile(
        self,
        data: bytes,
        feeds: dict[str, Any],
        entry: dict[str, Any],
        runs: int = CALIBRATION_PROFILE_RUNS,
    ) -> dict[str, Any]:
        """Each node's kernel time inside the model (``profile_nodes``' format), the
        median of the later half of ``runs``."""
        ...

    def diagnose(
        self, run: Callable[[], Any], data: bytes, entry: dict[str, Any]
    ) -> dict[str, Any]:
        """Columns a whole model's row records beside its price, after it is timed
        (``energy_mj``, ``eager_ms``, ``host_ms``; none on ONNX Runtime's CPU)."""
        ...


class OrtBackend:
    """ONNX Runtime sessions on ``provider`` with ``threads`` intra-op threads, timed
    by the wall clock, profiled by ONNX Runtime's profiler."""

    timer_name = ""
    layout_glue = True

    def __init__(self, provider: str = "CPUExecutionProvider", threads: int = 1) -> None:
        import onnxruntime as ort

        if provider not in ort.get_available_providers():
            raise ValueError(
                f"provider {provider!r} is not available; available: "
                f"{ort.get_available_providers()}"
            )
        self.provider, self.threads = provider, threads
        self._options = session_options(threads)
        self._version = ort.__version__

    def describe(self) -> dict[str, Any]:
        return {"onnxruntime": self._version, "provider": self.provider}

    def open(
        self, data: bytes, entry: dict[str, Any], *, batch_size: int, rng: Any
    ) -> tuple[Callable[[], Any], dict[str, Any]]:
        return open_session(
            data,
            self._options,
            provider=self.provider,
            batch_size=batch_size,
            rng=rng,
            **weights_of(entry),
        )

    def timer(self, run: Callable[[], Any]) -> float:
        return wall_clock_ms(run)

    def profile(
        self,
        data: bytes,
        feeds: dict[str, Any],
        entry: dict[str, Any],
        runs: int = CALIBRATION_PROFILE_RUNS,
    ) -> dict[str, Any]:
        return profile_nodes(data, feeds, self.threads, self.provider, runs, **weights_of(entry))

    def diagnose(
        self, run: Callable[[], Any], data: bytes, entry: dict[str, Any]
    ) -> dict[str, Any]:
        return {}


def filled_model(data: bytes, weights: list[Any] | None = None, weights_seed: int = 0) -> bytes:
    """The bundle model ``data`` with the weights it left out drawn (``seeded_weights``)
    and stored in it, for a runtime that takes no external initializers (OpenVINO).
    Needs the ``onnx`` package."""
    if not weights:
        return data
    import onnx
    from onnx import numpy_helper

    proto = onnx.load_from_string(data)
    values = seeded_weights(weights, weights_seed)
    for tensor in proto.graph.initializer:
        if tensor.name in values:
            tensor.CopyFrom(numpy_helper.from_array(values[tensor.name], tensor.name))
    return bytes(proto.SerializeToString())


#: OpenVINO's inference precision on the CPU, as ``--precision`` names it; its own
#: default on a CPU with BF16 units is bf16, which prices every FP32 layer as BF16
OV_PRECISIONS = ("f32", "bf16", "f16")


class OvBackend:
    """OpenVINO's CPU plugin: each model read from the bundle's ONNX, reshaped to its
    batch, compiled with ``threads`` inference threads, one stream, the latency hint,
    the inference precision ``precision`` (``f32`` by default: OpenVINO's own default
    on a CPU with BF16 units is bf16) and its threads not pinned to cores, and run by
    an infer request whose inputs are set once, timed by the wall clock; profiled by
    OpenVINO's per-node performance counters."""

    timer_name = ""
    #: its Reorder nodes are not yet checked against whole models: op rows as timed
    layout_glue = False

    def __init__(self, threads: int = 1, precision: str = "f32") -> None:
        try:
            import openvino as ov
        except ImportError:
            raise ValueError(
                "the openvino runtime needs the openvino package (pip install openvino, "
                "or Frontier's extra: pip install 'frontier[openvino]')"
            ) from None
        if precision not in OV_PRECISIONS:
            raise ValueError(f"precision must be one of {list(OV_PRECISIONS)}, got {precision!r}")
        self.core = ov.Core()
        self.threads, self.precision = threads, precision
        self.provider = "openvino-CPU"
        self._version = ov.__version__
        self._config = {
            "INFERENCE_NUM_THREADS": threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": precision,
            # each compiled model pins its threads to cores; with a chunk of them alive
            # and visited in turn, that made a ResNet-18 run 27% slower (1.23 ms against
            # 0.97 alone); unpinned, round-robin and alone agree (1.01 / 1.01 ms)
            "ENABLE_CPU_PINNING": False,
        }

    def describe(self) -> dict[str, Any]:
        return {
            "openvino": self._version,
            "provider": self.provider,
            "precision_hint": self.precision,
            "threads": self.threads,
        }

    def _compiled(self, data: bytes, entry: dict[str, Any], batch_size: int, counters: bool) -> Any:
        import numpy as np
        import openvino as ov

        try:
            model = self.core.read_model(
                filled_model(data, **weights_of(entry)), ov.Tensor(np.empty(0, np.uint8))
            )
        except RuntimeError as err:  # its ONNX frontend cannot convert some operator
            # its report ends "Summary:" then "-- ... for: OP-17, com.microsoft.QGemm-1"
            summary = str(err).partition("Summary:")[2].splitlines()
            failed = sorted(
                {op.strip().rsplit("-", 1)[0].removeprefix("com.microsoft.")
                 for line in summary if line.startswith("-- ") and ":" in line
                 for op in line.partition(":")[2].split(",") if op.strip()}
            )  # fmt: skip
            int8 = [op for op in failed if op.startswith("Q") or "Quantize" in op]
            raise ValueError(
                f"OpenVINO cannot convert {', '.join(failed) or 'this model'}"
                + (" (ONNX Runtime's INT8 operators; OpenVINO reads INT8 as QDQ)" if int8 else "")
            ) from None
        model.reshape(
            {
                inp.get_any_name(): [
                    d.get_length() if d.is_static else batch_size for d in inp.get_partial_shape()
                ]
                for inp in model.inputs
            }
        )
        return self.core.compile_model(model, "CPU", {**self._config, "PERF_COUNT": counters})

    def open(
        self, data: bytes, entry: dict[str, Any], *, batch_size: int, rng: Any
    ) -> tuple[Callable[[], Any], dict[str, Any]]:
        compiled = self._compiled(data, entry, batch_size, counters=False)
        request = compiled.create_infer_request()
        inputs = [
            (i.get_any_name(), i.get_element_type().to_dtype().name, list(i.get_shape()))
            for i in compiled.inputs
        ]
        feeds = seeded_feeds(inputs, batch_size, rng)
        _set_inputs(request, feeds)

        def run() -> Any:
            # inputs set once, as OpenVINO's guide to low-overhead inference does: a
            # call with the inputs as arguments costs 12 us more (37 us with copies) on
            # a 22 us model here
            request.infer()
            return request.results

        run.request = request  # type: ignore[attr-defined]
        return run, feeds

    def timer(self, run: Callable[[], Any]) -> float:
        return wall_clock_ms(run)

    def profile(
        self,
        data: bytes,
        feeds: dict[str, Any],
        entry: dict[str, Any],
        runs: int = CALIBRATION_PROFILE_RUNS,
    ) -> dict[str, Any]:
        """Each node's median time (us) from OpenVINO's performance counters, named as
        OpenVINO names it (a convolution whose bias it folded is ``NAME/WithoutBiases``:
        kept under ``NAME``), and ``model_run`` by the wall clock."""
        batch = next(iter(feeds.values())).shape[0] if feeds else 1
        request = self._compiled(data, entry, batch, counters=True).create_infer_request()
        _set_inputs(request, feeds)
        times: dict[str, list[float]] = {"model_run": []}
        kinds: dict[str, str] = {"model_run": ""}
        for _ in range(runs):
            start = time.perf_counter()
            request.infer()
            times["model_run"].append((time.perf_counter() - start) * 1e6)
            for info in request.get_profiling_info():
                us = info.real_time.total_seconds() * 1e6
                if info.node_type in ("Parameter", "Result") and us == 0:
                    continue
                name = info.node_name.removesuffix("/WithoutBiases")
                times.setdefault(name, []).append(us)
                kinds[name] = info.node_type
        return {k: [kinds[k], statistics.median(v[len(v) // 2 :])] for k, v in times.items() if v}

    def diagnose(
        self, run: Callable[[], Any], data: bytes, entry: dict[str, Any]
    ) -> dict[str, Any]:
        return {}


def _set_inputs(request: Any, feeds: dict[str, Any]) -> None:
    """An OpenVINO infer request's inputs, set once to ``feeds`` (shared, not copied)."""
    import openvino as ov

    for name, array in feeds.items():
        request.set_tensor(name, ov.Tensor(array, shared_memory=True))


#: the runtimes ``--runtime`` names, each a backend built from the parsed options
BACKENDS: dict[str, Callable[[argparse.Namespace], Backend]] = {
    "onnxruntime": lambda args: OrtBackend(args.provider, args.threads),
    "openvino": lambda args: OvBackend(args.threads, args.precision),
}


def backend_from_args(args: argparse.Namespace) -> Backend:
    """The backend ``add_measure_arguments``' options name (``BACKENDS``): ONNX
    Runtime's provider or OpenVINO, with ``--threads`` threads."""
    return BACKENDS[args.runtime](args)


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
    batch_size: int | None = None,
    kinds: tuple[str, ...] = ("overhead", "op", "calibration", "validation", "front"),
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    backend: Backend | None = None,
    redo_budget_s: float | None = None,
) -> Path:
    """Measure every model of ``bundle`` by the timing protocol (``time_models``) and
    append rows to the CSV ``out``.

    Writes ``out`` (one row per model), ``out`` + ``.meta.json`` (device metadata and
    the protocol, ``protocol``), ``out`` + ``.manifest.json`` (the bundle's manifest:
    op specs and the ops of each whole model, which calibration needs) and, for the
    calibration models, ``out`` + ``.profiles.jsonl`` (each node's kernel time inside
    the whole model, from ONNX Runtime's profiler). ``frontier lut import`` reads them
    all from beside the CSV. Models are timed in chunks of ``CHUNK_MODELS`` (a seeded
    shuffle of the bundle, ops and whole models apart), each chunk's rows written when
    it is done; models already in ``out`` are skipped, so an interrupted run resumes.

    Args:
        bundle: the ``.zip`` written by ``frontier lut ops`` (or ``lut front``: a
            search's front members, kind ``front``).
        out: the CSV to write.
        device: the device's name, as the user calls it (``pi4``, ``local-cpu``).
        batch_size: the batch fed to models with a dynamic batch dimension (the
            whole models); None (the default) takes the bundle's, the batch its op
            models were built at. Another batch than that is refused for a bundle with
            op models (its table would predict one batch from ops of another); a front
            bundle's whole models may be timed at any.
        kinds: which kinds of model to measure.
        rounds, round_s: the protocol's rounds and seconds per visit.
        backend: what opens, times and profiles a model, on its threads
            (``OrtBackend()``, one CPU thread, by default; ``BACKENDS`` by
            ``--runtime``; ``runner_torch.TorchBackend`` on a GPU).
        redo_budget_s: seconds for timing again the chunks that ran while the device
            drifted beyond its noise band (``_redo_drifted``); None: a quarter of the
            time the pass took.

    After the rest, a sample of whole models is timed again in a pass of its own: the
    table keeps how well the two agree (``noise_pct``, its noise band), and chunks timed
    while the device drifted beyond that band are timed again.
    """
    bundle, out = Path(bundle), Path(out)
    manifest = read_manifest(bundle)
    batch_size = _batch_of(bundle, manifest, batch_size)
    backend = backend if backend is not None else OrtBackend()
    meta = _run_meta(manifest, backend, device, batch_size, rounds, round_s)
    _write_meta(out, meta)
    # The result carries what the table is predicted with (op specs, the ops of each
    # whole model), so an import needs nothing but the files beside the CSV.
    manifest_path(out).write_text(json.dumps(manifest))
    reference = _reference(manifest, kinds)
    kinds = (*kinds, "baseline") if reference is not None else kinds
    chunks, todo = _chunks(out, [m for m in manifest["models"] if m["kind"] in kinds], reference)
    header = COLUMNS
    if out.exists():
        with out.open(newline="") as f:
            header = next(csv.reader(f), []) or COLUMNS
    new_file = not out.exists()
    start = time.perf_counter()
    count = 0
    with zipfile.ZipFile(bundle) as zf:
        damaged = zf.testzip()
        if damaged is not None:
            raise ValueError(
                f"{bundle}: {damaged} fails its checksum; the bundle is damaged (copy it "
                "again from where `frontier lut ops` wrote it)"
            )
        chunk_timer = _ChunkTimer(zf, bundle, out, backend, batch_size, rounds, round_s)
        #: each chunk's baseline median and its models, to find where the device drifted
        ran: list[tuple[float, list[dict[str, Any]]]] = []
        with out.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
            if new_file:
                writer.writeheader()
            for chunk_no, chunk in enumerate(chunks):
                rows, reference = chunk_timer.time(chunk, chunk_no, reference)
                for row in rows:
                    writer.writerow(row)
                f.flush()
                base = _chunk_baseline_ms(rows)
                if base > 0:
                    ran.append((base, chunk))
                count += len(chunk)
                _progress(count, len(todo), start, chunk[-1].get("key", chunk[-1]["id"]))
        if todo and reference is not None:
            noise = _repeat_pass(chunk_timer, out, manifest, reference)
            if noise:
                took_s = time.perf_counter() - start
                budget_s = redo_budget_s if redo_budget_s is not None else 0.25 * took_s
                noise.update(_redo_drifted(chunk_timer, out, ran, reference, noise, budget_s))
                _add_meta(out, noise)
    return out


def _chunk_baseline_ms(rows: list[dict[str, Any]]) -> float:
    """The uncompressed model's median in the rounds a chunk's ``rows`` were timed in
    (0 where it was not timed beside them)."""
    return next((float(r["baseline_ms"]) for r in rows if r.get("baseline_ms")), 0.0)


def _redo_drifted(
    timer: _ChunkTimer,
    out: Path,
    ran: list[tuple[float, list[dict[str, Any]]]],
    reference: dict[str, Any] | None,
    noise: dict[str, Any],
    budget_s: float,
) -> dict[str, Any]:
    """Chunks that ran the uncompressed model further from its median over the table
    than the device's noise band (and ``PHASE_TOLERANCE``) ran while it drifted: say so,
    and time them again, the furthest first, while ``budget_s`` lasts; a chunk's new rows
    replace its old in ``out`` (rewritten once) where its baseline came back closer to
    the median. Returns what the metadata keeps: ``drifted_chunks``, ``redone_chunks``."""
    if reference is None or len(ran) < 3:
        return {}
    anchor = statistics.median(b for b, _ in ran)
    limit = max(noise["noise_pct"] / 100, PHASE_TOLERANCE)
    drifted = sorted(
        ((abs(b / anchor - 1), chunk) for b, chunk in ran if abs(b / anchor - 1) > limit),
        key=lambda d: -d[0],
    )
    if not drifted:
        return {"drifted_chunks": 0}
    print(
        f"{out.name}: the device drifted while this table was built: {len(drifted)} of "
        f"{len(ran)} chunks ran the uncompressed model more than {limit:.0%} off its median "
        f"(up to {drifted[0][0]:.0%}); timing them again within {budget_s:.0f} s",
        file=sys.stderr,
    )
    start, redone, better = time.perf_counter(), 0, []
    for off, chunk in drifted:
        if time.perf_counter() - start > budget_s:
            break
        rows, _ = timer.time(chunk, 20_000 + redone, reference, profile=False)
        base = _chunk_baseline_ms(rows)
        if base > 0 and abs(base / anchor - 1) < off:
            better += rows
            redone += 1
    if better:
        _replace_rows(out, better)
    print(f"{out.name}: {redone} of {len(drifted)} drifted chunks timed again", file=sys.stderr)
    return {"drifted_chunks": len(drifted), "redone_chunks": redone}


def _replace_rows(out: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite ``out`` with ``rows`` in place of the rows of the same models."""
    new = {r["model_id"]: r for r in rows}
    with out.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or COLUMNS)
        # a row timed again keeps what only its first timing profiled
        kept = [{**r, **new[r["model_id"]]} if r["model_id"] in new else r for r in reader]
    tmp = out.with_suffix(out.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
    tmp.replace(out)


#: whole models a table times a second time, in a pass of their own after the rest
REPEAT_MODELS = CHUNK_MODELS


def _repeat_pass(
    timer: _ChunkTimer, out: Path, manifest: dict[str, Any], reference: dict[str, Any]
) -> dict[str, Any]:
    """Time a seeded sample of ``out``'s whole models again, in one chunk after every
    other, and say how well the two passes agree on each model's time relative to the
    uncompressed model (what the table's rows are stated against): ``noise_pct``, the
    90th percentile of their differences in percent, and the share within 5% and 10%.
    Empty where fewer than 4 whole models were measured."""
    import numpy as np

    with out.open(newline="") as f:
        first = {
            r["model_id"]: float(r["relative"])
            for r in csv.DictReader(f)
            if r["kind"] in ("calibration", "validation") and r["status"] == "ok" and r["relative"]
        }
    if len(first) < 4:
        return {}
    ids = random.Random(1).sample(sorted(first), min(REPEAT_MODELS, len(first)))
    by_id = {m["id"]: m for m in manifest["models"]}
    rows, _ = timer.time([by_id[i] for i in ids], 10_000, reference, profile=False)
    diffs = np.array(
        [
            abs(float(r["relative"]) / first[r["model_id"]] - 1)
            for r in rows
            if r.get("status") == "ok" and r.get("relative")
        ]
    )
    if not len(diffs):
        return {}
    noise = {
        "noise_pct": round(float(np.percentile(diffs, 90)) * 100, 2),
        "noise_within_5pct": round(float((diffs <= 0.05).mean()), 3),
        "noise_within_10pct": round(float((diffs <= 0.10).mean()), 3),
        "noise_models": len(diffs),
    }
    print(
        f"{out.name}: {len(diffs)} whole models timed again agree within "
        f"{noise['noise_pct']:.1f}% (90th percentile, relative to the uncompressed model): "
        "differences under that are within this device's noise",
        file=sys.stderr,
    )
    return noise


def _add_meta(out: Path, extra: dict[str, Any]) -> None:
    meta_path = Path(str(out) + ".meta.json")
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, **extra}, indent=2, sort_keys=True))


def _batch_of(bundle: Path, manifest: dict[str, Any], asked: int | None) -> int:
    """The batch to time ``bundle``'s whole models at: the one its op models were built
    at, unless it has none (a front bundle), where ``asked`` (default 1) is taken."""
    built = int(manifest.get("batch_size", 1))
    if asked is None or asked == built:
        return built
    if any(m["kind"] == "op" for m in manifest["models"]):
        raise ValueError(
            f"{bundle}: its op models were built at batch {built}; --batch-size {asked} "
            "would time its whole models at another (leave --batch-size out, or write "
            f"the bundle at batch {asked} with `frontier lut ops --batch-size {asked}`)"
        )
    return asked


def _reference(manifest: dict[str, Any], kinds: tuple[str, ...]) -> dict[str, Any] | None:
    """The uncompressed model, timed in every chunk's rounds: each row is stated against
    it (``relative_to``), so a device changing speed between chunks moves no ratio. A
    front bundle's is the front member whose role says so."""
    return next(
        (
            m
            for m in manifest["models"]
            if m["kind"] == "baseline" or (m["kind"] in kinds and m.get("role") == "baseline")
        ),
        None,
    )


def _run_meta(
    manifest: dict[str, Any],
    backend: Backend,
    device: str,
    batch_size: int,
    rounds: int,
    round_s: float,
) -> dict[str, Any]:
    """A measurement's metadata: the device, this machine, the backend and the protocol."""
    return {
        "device": device,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": backend.threads,
        "batch_size": batch_size,
        "op_batch_size": manifest.get("batch_size", 1),
        **({"half": True} if manifest.get("half") else {}),
        **({"int8_qdq": True} if manifest.get("int8_qdq") else {}),
        **backend.describe(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "bundle_version": manifest["version"],
        "bundle_id": manifest.get("bundle_id", ""),
        "protocol": protocol(
            backend.threads,
            rounds=rounds,
            round_s=round_s,
            provider=backend.provider,
            timer=backend.timer_name,
            warmup_s=float(getattr(backend, "warmup_s", 0.0)),
        ),
    }


def _write_meta(out: Path, meta: dict[str, Any]) -> None:
    """Write ``out``'s metadata; a resumed run must be of the same bundle and protocol."""
    meta_path = Path(str(out) + ".meta.json")
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if old.get("bundle_id") != meta["bundle_id"]:
            raise ValueError(f"{out} holds measurements of another bundle; choose another --out")
        if old.get("protocol") != meta["protocol"]:
            raise ValueError(
                f"{out} was measured with another timing protocol or settings "
                f"({old.get('protocol')}); choose another --out"
            )
        meta = {**old, "date": meta["date"]}
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))


#: what a session of a bundle model holds, in multiples of its seeded weights: the
#: drawn arrays (float64 on their way to float32) and ONNX Runtime's prepacked copy
SESSION_MEMORY_PER_WEIGHT = 3.0
_ITEM_BYTES = {"float32": 4, "float16": 2, "int8": 1, "uint8": 1}


def _weight_bytes(entry: dict[str, Any] | None) -> int:
    """The bytes of the weights a bundle model's session draws (``weights``)."""
    if entry is None:
        return 0
    return sum(
        math.prod(dims) * _ITEM_BYTES.get(dtype, 4) for _, dtype, dims in entry.get("weights", ())
    )


#: the share of the free memory (``free_memory_bytes``) a measurement or a build plans to
#: fill: a fifth left over, as peaks are not all alike (builds took 2.9-3.9x their weights)
MEMORY_SHARE = 0.8


def free_memory_bytes() -> int | None:
    """The memory this machine has free (Linux's ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return kib * 1024


def _fit_memory(
    chunk: list[dict[str, Any]], reference: dict[str, Any] | None, free: int | None
) -> list[list[dict[str, Any]]]:
    """``chunk`` cut, in order, into chunks whose sessions (the uncompressed model's
    among them) fit four fifths of ``free`` bytes at ``SESSION_MEMORY_PER_WEIGHT``: a
    chunk's models are all open at once, and four whole vit_h_14 models (2.5 GB of
    weights each) went past this machine's 24 GB. One model a chunk at least."""
    if free is None:
        return [chunk]
    room = MEMORY_SHARE * free / SESSION_MEMORY_PER_WEIGHT - _weight_bytes(reference)
    out: list[list[dict[str, Any]]] = [[]]
    held = 0
    for entry in chunk:
        size = _weight_bytes(entry)
        if out[-1] and held + size > room:
            out.append([])
            held = 0
        out[-1].append(entry)
        held += size
    return out


def _chunks(
    out: Path, wanted: list[dict[str, Any]], reference: dict[str, Any] | None = None
) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The chunks to time of ``wanted`` (those ``out`` does not hold yet), and those;
    cut smaller where their sessions would not fit the memory free (``_fit_memory``)."""
    done = _done_ids(out)
    todo = [m for m in wanted if m["id"] not in done]
    if len(todo) < len(wanted):
        print(
            f"resuming {out}: {len(wanted) - len(todo)} of {len(wanted)} models already "
            + (f"measured, {len(todo)} to go" if todo else "measured; nothing left to measure"),
            file=sys.stderr,
        )
    # Ops and whole models are timed in chunks of their own kind; a seeded shuffle puts
    # ops of every size (and plans of every kind) in each chunk.
    order = random.Random(0)
    ops = [m for m in todo if m["kind"] in ("overhead", "op")]
    whole = [m for m in todo if m["kind"] not in ("overhead", "op")]
    order.shuffle(ops)
    order.shuffle(whole)
    free = free_memory_bytes()
    chunks = [
        fitted
        for group in (ops, whole)
        for i in range(0, len(group), CHUNK_MODELS)
        for fitted in _fit_memory(group[i : i + CHUNK_MODELS], reference, free)
    ]
    return chunks, todo


class _ChunkTimer:
    """Times one chunk of a bundle's models at a time, beside the uncompressed model,
    and profiles its calibration models (into ``out``'s ``.profiles.jsonl``)."""

    def __init__(
        self,
        zf: zipfile.ZipFile,
        bundle: Path,
        out: Path,
        backend: Backend,
        batch_size: int,
        rounds: int,
        round_s: float,
    ) -> None:
        self.zf, self.bundle, self.out, self.backend = zf, bundle, out, backend
        self.batch_size, self.rounds, self.round_s = batch_size, rounds, round_s

    def _open(self, entry: dict[str, Any], data: bytes) -> tuple[Any, Any]:
        import numpy as np

        rng = np.random.default_rng(0)
        return self.backend.open(data, entry, batch_size=self.batch_size, rng=rng)

    def time(
        self,
        chunk: list[dict[str, Any]],
        chunk_no: int,
        reference: dict[str, Any] | None,
        *,
        profile: bool = True,
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The CSV rows of ``chunk``; and the reference, None from here on where the
        uncompressed model does not run on this device. ``profile``: profile its
        calibration models (once per table)."""
        runs, timed, rows = [], [], []
        for entry in chunk:
            row: dict[str, Any] = {
                "model_id": entry["id"],
                "kind": entry["kind"],
                "key": entry.get("key", entry["id"]),
                "op_type": entry.get("op_type", ""),
                "precision": entry.get("precision", ""),
            }
            rows.append(row)
            if entry.get("build_error"):  # Frontier could not write this op's model
                row.update(status="unsupported", median_ms="", p10_ms="", p90_ms="")
                row.update(raw_median_ms="", runs=0, error=entry["build_error"])
                continue
            data = _member(self.zf, self.bundle, entry["file"])
            try:
                run, feeds = self._open(entry, data)
                run()  # a provider that cannot run it fails here, not mid-timing
            except Exception as err:  # the provider cannot run it: record, don't crash
                if type(err).__name__ == "InvalidProtobuf" or (
                    type(err).__name__ == "InvalidGraph" and not _parses(data)
                ):
                    raise _damaged(self.bundle, entry["file"]) from None
                msg = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                row.update(status="unsupported", median_ms="", p10_ms="", p90_ms="")
                row.update(raw_median_ms="", runs=0, error=msg)
                continue
            runs.append(run)
            timed.append((row, entry, data, feeds))
        timing: dict[str, Any] = {"rounds": self.rounds, "round_s": self.round_s, "seed": chunk_no}
        ref_run = None
        if reference is not None and runs:
            ref_data = _member(self.zf, self.bundle, reference["file"])
            try:
                ref_run, _ = self._open(reference, ref_data)
            except Exception as err:
                if type(err).__name__ in ("InvalidProtobuf", "InvalidGraph"):
                    raise _damaged(self.bundle, reference["file"]) from None
                print(f"the uncompressed model does not run here ({err}); rows are "
                      "timed without it", file=sys.stderr)  # fmt: skip
                reference = None
        if ref_run is not None:
            _, stats = time_against(ref_run, runs, **timing, **timed_by(self.backend))
        else:
            stats = time_models(runs, **timing, **timed_by(self.backend))
        for (row, entry, data, feeds), run, st in zip(timed, runs, stats, strict=True):
            self._record(row, entry, data, feeds, run, st, reference, profile)
        return rows, reference

    def _record(
        self,
        row: dict[str, Any],
        entry: dict[str, Any],
        data: bytes,
        feeds: Any,
        run: Any,
        st: dict[str, Any],
        reference: dict[str, Any] | None,
        profile: bool = True,
    ) -> None:
        """Fill ``row`` from its timing ``st``, with the whole model's diagnostics and
        the calibration model's profile."""
        row.update({k: f"{v:.6g}" for k, v in st.items() if k.endswith("_ms")})
        if entry["kind"] not in ("overhead", "op"):
            extra = self.backend.diagnose(run, data, entry)
            row.update({k: f"{v:.6g}" for k, v in extra.items()})
        if reference is not None:
            row["baseline_key"] = reference["key"]
            row["relative"] = f"{st['relative']:.6g}"
        row.update(status="ok", error="", runs=int(st["runs"]))
        row["raw_median_ms"] = row["median_ms"]
        if entry["kind"] == "op" and profile and self.backend.layout_glue:
            try:  # a kernel's layout glue; an op the profiler cannot run keeps its price
                row.update(glue_split(self.backend.profile(data, feeds, entry, OP_PROFILE_RUNS)))
            except Exception as err:  # the price stands without it
                print(f"{row['key']}: not profiled ({err})", file=sys.stderr)
        if entry["kind"] == "calibration" and profile:
            nodes = self.backend.profile(data, feeds, entry)
            with profiles_path(self.out).open("a") as pf:
                pf.write(json.dumps({"key": row["key"], "nodes": nodes}) + "\n")


def _parses(data: bytes) -> bool:
    """Whether ``data`` reads as an ONNX model with a graph: one the runtime rejects as
    invalid is then an op it cannot take (recorded), not a damaged file. Without the
    onnx package to tell, it counts as damaged."""
    try:
        import onnx

        return len(onnx.load_from_string(data).graph.node) > 0
    except Exception:
        return False


def _damaged(bundle: Path, member: str) -> ValueError:
    return ValueError(
        f"{bundle}: {member} is not a valid ONNX model (the bundle is damaged; copy it "
        "again from where `frontier lut ops` wrote it)"
    )


def at_least(minimum: float, kind: type = int) -> Any:
    """An argparse ``type``: a number (``kind``) no smaller than ``minimum``, or the
    option's error naming the rule and the value (exit 2, no traceback)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be {'a whole number' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


#: ``--batch-size`` of both runners
BATCH_SIZE_HELP = (
    "the batch whole models are fed (default: the bundle's, as its op models were built; "
    "only a front bundle takes another)"
)


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    """The measuring options, shared by this runner and ``frontier lut measure``."""
    parser.add_argument("bundle", help="the ops.zip bundle")
    parser.add_argument("--device", required=True, help="a name for this device, e.g. pi4")
    parser.add_argument("--out", required=True, help="the CSV to write (resumed if it exists)")
    parser.add_argument(
        "--runtime",
        choices=tuple(BACKENDS),
        default="onnxruntime",
        help="what runs each model: ONNX Runtime (default) or OpenVINO (needs the "
        "openvino and onnx packages)",
    )
    parser.add_argument("--provider", default="CPUExecutionProvider",
                        help="ONNX Runtime's execution provider")  # fmt: skip
    parser.add_argument(
        "--precision",
        choices=OV_PRECISIONS,
        default="f32",
        help="OpenVINO's inference precision (default f32; OpenVINO's own default on a "
        "CPU with BF16 units is bf16)",
    )
    parser.add_argument("--threads", type=at_least(1), default=1)
    parser.add_argument("--batch-size", type=at_least(1), default=None, help=BATCH_SIZE_HELP)
    parser.add_argument(
        "--rounds",
        type=at_least(1),
        default=ROUNDS,
        help=f"rounds of the timing protocol: each visits every model (default {ROUNDS})",
    )
    parser.add_argument(
        "--round-s",
        type=at_least(0.001, float),
        default=ROUND_S,
        help=f"seconds each round times a model, back to back (default {ROUND_S})",
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
        batch_size=args.batch_size,
        rounds=args.rounds,
        round_s=args.round_s,
        backend=backend_from_args(args),
    )


#: what a bad bundle or output path raises; the message names the file
ERRORS = (ValueError, OSError, zipfile.BadZipFile, KeyError)


def _member(zf: zipfile.ZipFile, bundle: Path, name: str) -> bytes:
    """One file of the bundle; a damaged or missing member is a ``ValueError`` naming
    it."""
    try:
        return zf.read(name)
    except (KeyError, zipfile.BadZipFile, OSError, EOFError) as err:
        raise ValueError(f"{bundle}: cannot read {name} ({err}); the bundle is damaged") from None


def report_measure(measure: Callable[[], Path]) -> int:
    """A runner's command line around ``measure`` (a ``measure_bundle`` call): its
    summary line, or a one-line error and exit status 2 for a bad bundle or path."""
    try:
        print(summary(measure()))
    except ERRORS as err:
        print(f"runner: error: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="frontier-runner", description="Measure a Frontier op bundle on this device."
    )
    add_measure_arguments(parser)
    args = parser.parse_args(argv)
    return report_measure(lambda: measure_from_args(args))


if __name__ == "__main__":
    sys.exit(main())
