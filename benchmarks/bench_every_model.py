"""A table for every model: each torchvision classification model's space builds and runs.

For every classification model torchvision lists (random weights, 10 classes, nothing is
downloaded), at 96x96, batch 1: discover its space (prune 0/0.5, INT8 or FP32 per layer,
round_to 8), enumerate the distinct ops any plan can produce (timed, wall and CPU: the
target is within a minute; it is mostly one thread of Python, so its CPU seconds are
about what a quiet machine's wall clock shows, and a run beside other work is still
judged fairly), write its bundle (every op model and ``--whole`` seeded whole compressed
models) and run each model once through the runner (one round, a short visit), then
count the rows that did not run and say why.

Each model runs in a child process under ``--timeout-s`` and ``--max-rss-gb`` (the
proportional set sizes of its processes summed; 16 GB of this machine's 24: swin_t
reached 23 GB), so one model that hangs or runs out of memory is recorded as such and
the others go on. The four largest (regnet_y_128gf, vit_h_14, vit_l_16, vit_l_32) need
17-22 GB: run them alone with ``--max-rss-gb 23``. Results are kept per model in
``benchmarks/report-logs/every-model.json``; a rerun skips the models already there
(``--models NAME ...`` runs those again), so the list can be worked through over
several runs. A model that does not take a 96x96 input (the ViTs' fixed patch grid) is tried at
224x224, and the entry says so.

Targets (issue 68): every op model and whole model builds and runs; the op enumeration
within 60 s (``report_sections.ENUMERATE_TARGET_S``).

Run: python benchmarks/bench_every_model.py [--models NAME ...] [--limit N]
     [--timeout-s 900] [--whole 3] [--json benchmarks/report-logs/every-model.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: the input every model is tried at: what a small edge model sees
SIZE = 96
#: the size a model that refuses ``SIZE`` is tried at (the ViTs' fixed patch grid)
FALLBACK_SIZE = 224


def all_models() -> list[str]:
    """Every classification model torchvision lists (not detection, segmentation, video,
    optical flow or quantized ones: those live in submodules)."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def _at(out: dict[str, Any], stage: str) -> None:
    """Record and announce (for a parent that stops this child) the stage under way."""
    out["stage"] = stage
    print(f"stage: {stage}", flush=True)


def one(name: str, whole: int, out: dict[str, Any]) -> None:
    """Discover, enumerate, write and run ``name``'s bundle in this process, filling
    ``out`` as it goes (``stage``: the step under way)."""
    import csv
    import warnings
    from collections import Counter

    import torch
    import torchvision

    from frontier.latency_models import measure_bundle, shape_mismatches, space_ops, write_bundle
    from frontier.spaces import SpaceOptions, discover

    _at(out, "model")
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, num_classes=10).eval()
    for size in (SIZE, FALLBACK_SIZE):
        x = torch.randn(1, 3, size, size)
        try:
            with torch.no_grad():
                model(x)
            break
        except Exception as e:  # a model that does not take the input
            out.setdefault("input_error", f"{type(e).__name__}: {e}"[:300])
    else:
        out.update(status="input", error=out["input_error"])
        return
    out["size"] = size
    options = SpaceOptions(
        prune_ratios=(0.0, 0.5), weight_bits=(8, 32), act_bits=(8, 32), round_to=8
    )
    _at(out, "discover")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        space = discover(model, x, options)
        out["discover_s"] = time.perf_counter() - start
    out["layers"] = len(space.layers)
    out["left_out"] = sum("left out" in str(w.message) for w in caught)
    _at(out, "enumerate")
    start, cpu = time.perf_counter(), time.process_time()
    found = space_ops(model, x, space)
    out["enumerate_s"] = time.perf_counter() - start
    out["enumerate_cpu_s"] = time.process_time() - cpu
    out["ops"] = len(found.ops)
    # op tensors whose shapes at the uncompressed plan are not the exported graph's
    wrong = [line for t in found.templates.values() for line in shape_mismatches(t)]
    out["shape_mismatches"] = len(wrong)
    out["shape_mismatch_examples"] = wrong[:3]
    tmp = Path(tempfile.mkdtemp(prefix="every-model-"))
    _at(out, "bundle")
    start = time.perf_counter()
    write_bundle(tmp / "ops.zip", model=model, example_inputs=x, space=space, ops=found,
                 calibration=0, validation=whole, calibration_data=[x])  # fmt: skip
    out["bundle_s"] = time.perf_counter() - start
    # the runner is a device's own process: this one gives back what building took
    # (vit_h_14's held 11.7 GB after its bundle, and went past 23 GB timing it)
    del model, space, found
    _give_back_memory()
    _at(out, "run")
    start = time.perf_counter()
    measure_bundle(tmp / "ops.zip", tmp / "t.csv", device="every-model", rounds=1, round_s=0.001)
    out["run_s"] = time.perf_counter() - start
    with open(tmp / "t.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    bad = [r for r in rows if r["status"] != "ok"]
    out["rows"] = len(rows)
    out["rows_by_kind"] = dict(Counter(r["kind"] for r in rows))
    out["not_ok"] = len(bad)
    out["not_ok_by"] = dict(Counter(f"{r['kind']} {r['op_type']} {r['status']}" for r in bad))
    out["errors"] = sorted({f"{r['op_type']} {r['precision']}: {r['error'][:160]}" for r in bad})[
        :5
    ]
    out["status"] = "ok" if not bad and not wrong else "not ok"
    del out["stage"]


def _give_back_memory() -> None:
    """Free what is unreachable and hand glibc's freed heap back to the system."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _group_rss_gb(pid: int) -> float:
    """Memory of process ``pid`` and its descendants, in GB: the sum of their
    proportional set sizes, so pages a forked worker shares with its parent count once
    (summed resident sizes counted a fork of a 10 GB parent as 20 GB)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += _pss_bytes(p.pid)
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def _pss_bytes(pid: int) -> int:
    """Process ``pid``'s proportional set size (Linux's ``smaps_rollup``), or its
    resident size where the kernel gives no rollup."""
    import psutil

    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except PermissionError:
        pass
    return int(psutil.Process(pid).memory_info().rss)


def run_child(
    name: str, whole: int, timeout_s: float, log: Path, max_rss_gb: float
) -> dict[str, Any]:
    """``one(name)`` in a child process, its output in ``log``: a hang, a crash or a
    memory kill is a result too; a child holding more than ``max_rss_gb`` is stopped
    before it takes the machine's memory (and everything else running) with it."""
    result = log.with_suffix(".json")
    start = time.perf_counter()
    command = [sys.executable, __file__, "--one", name, "--whole", str(whole), "--out", str(result)]
    peak_gb = 0.0
    with log.open("w") as f:
        # its own process group: a timeout stops the bundle's build workers too
        child = subprocess.Popen(
            command, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while (rc := child.poll()) is None:
                elapsed = time.perf_counter() - start
                peak_gb = max(peak_gb, _group_rss_gb(child.pid))
                if elapsed > timeout_s or peak_gb > max_rss_gb:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
                    stage = _stage(log)
                    if elapsed > timeout_s:
                        error = f"over {timeout_s:.0f} s ({stage}, {peak_gb:.1f} GB)"
                        return {"model": name, "status": "timeout", "error": error}
                    error = f"over {max_rss_gb:.0f} GB at {elapsed:.0f} s ({stage})"
                    return {"model": name, "status": "memory", "error": error}
                time.sleep(1.0)
        except BaseException:  # Ctrl-C or a kill of this run: its model goes too
            os.killpg(child.pid, signal.SIGKILL)
            raise
    wall_s = time.perf_counter() - start
    if rc != 0 or not result.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        error = " | ".join(tail)[-400:]
        return {"model": name, "status": "crashed", "rc": rc, "error": error, "wall_s": wall_s}
    return {**json.loads(result.read_text()), "wall_s": wall_s, "peak_rss_gb": round(peak_gb, 1)}


def _stage(log: Path) -> str:
    """The last stage the child announced in ``log`` (``stage: NAME`` lines)."""
    stages = [
        ln[7:] for ln in log.read_text(errors="replace").splitlines() if ln.startswith("stage: ")
    ]
    return f"during {stages[-1]}" if stages else "stage not announced"


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds to run_child's kill
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", help="these models (run again if logged)")
    parser.add_argument("--limit", type=int, help="at most this many models not yet logged")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument(
        "--max-rss-gb", type=float, default=16.0, help="stop a model's child holding more"
    )
    parser.add_argument("--whole", type=int, default=3, help="seeded whole models per model")
    parser.add_argument("--json", type=Path, default=HERE / "report-logs" / "every-model.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        found: dict[str, Any] = {"model": args.one}
        try:
            one(args.one, args.whole, found)
        except Exception as e:  # the stage it stopped at, and why, is the result
            message = str(e).strip().splitlines()
            found["status"] = f"failed at {found.get('stage', 'start')}"
            found["error"] = f"{type(e).__name__}: {message[0] if message else ''}"[:300]
        args.out.write_text(json.dumps(found))
        return
    logged: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    models = logged.setdefault("models", {})
    todo = args.models or [m for m in all_models() if m not in models][: args.limit]
    logs = Path(tempfile.mkdtemp(prefix="every-model-logs-"))
    print(f"{len(todo)} models, logs in {logs}", flush=True)
    for i, name in enumerate(todo, 1):
        entry = run_child(name, args.whole, args.timeout_s, logs / f"{name}.log", args.max_rss_gb)
        entry["date"] = time.strftime("%Y-%m-%d")
        models[name] = entry
        logged["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs"
        logged["whole"] = args.whole
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(logged, indent=1, sort_keys=True) + "\n")
        said = entry["status"]
        if "enumerate_s" in entry:
            said += (
                f" at {entry['size']}x{entry['size']}"
                f", {entry['ops']} ops enumerated in {entry['enumerate_cpu_s']:.1f} CPU s"
            )
        if "rows" in entry:  # a model that stopped before its rows ran has none
            said += f", {entry['not_ok']} of {entry['rows']} rows not ok"
        if entry.get("error"):
            said += f": {entry['error'][:120]}"
        print(f"[{i}/{len(todo)}] {name}: {said} ({entry.get('wall_s', 0):.0f} s)", flush=True)


if __name__ == "__main__":
    main()
