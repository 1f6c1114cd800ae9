"""Held-out devices on a lent GPU machine: its CPU, and its GPU.

Issue "latency a user can trust", item 5: a device nobody tuned for, measured the way a
user would measure a new device (the op bundle, the device runner there, the import
here). The GPU machine is lent for minutes and runs what it is given, so this runs in
three steps:

1. ``prepare DIR`` (here) writes into DIR, with ``frontier lut ops``, the op bundles of
   two spaces, the digits CNN's (multi-device) and ``mobilenetv2-flops40``'s: each in
   full and few-shot (50 ops, 10 calibration models), both with the same 50 seeded
   validation plans; and each space without INT8 (``quantize`` at 32 bits) for the GPU.
   It also writes ``measure.sh``, what the GPU machine runs.
2. ``bash DIR/measure.sh`` (there, from the repository root, ``$OUT`` set) runs the
   device runner (``runner.py``: onnxruntime and numpy, 1 thread) on the machine's CPU
   for the four mixed bundles, and ``runner_torch.py`` (eager PyTorch, CUDA events) on
   its GPU for the two FP32 bundles; four processes at once, each pinned to a core of
   its own. ``plain`` then times 20 validation models of each device with a plain loop
   (ONNX Runtime on the CPU; PyTorch with ``torch.cuda.synchronize`` on the GPU).
   Everything lands in ``$OUT/results.tgz``.
3. ``report DIR RESULTS.tgz`` (here) measures the two full bundles on this machine
   (``local-cpu``: the base of the few-shot tables), imports every table and writes
   ``report-logs/remote-devices.json``: per device and space, the full table's error
   on its own validation plans, the few-shot table's (from ``local-cpu``) beside
   ``local-cpu``'s table as it is and scaled by one factor, the same plans measured in
   two runs there (the ceiling), and the protocol against the plain loop.

Whole models, the same way: ``pack OUT.zip KEY=FILE.onnx ...`` (here) bundles a
scenario's baseline and picks (weights stripped, drawn from a seed there), as
``frontier lut front`` bundles a search's front with its baseline;
``benchmarks/remote_models.sh DIR b1 b2`` (there) times each bundle on the machine's
CPU (protocol and plain loop, twice) and GPU (CUDA events and a synchronised loop);
``models-report --bundles ... --results lease1.tgz ...`` (here, on an idle machine)
times them here too and writes ``report-logs/remote-models.json``.

Run: python benchmarks/bench_remote_device.py prepare .dev/remote
     (then measure.sh on the GPU machine)
     python benchmarks/bench_remote_device.py report .dev/remote results.tgz [more.tgz]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPACES = {"digits": "multi-device", "mbv2": "mobilenetv2-flops40"}
CPU, GPU = "gpu-host-cpu", "gpu-cuda"
#: seconds after which measure.sh stops every step still running (rows so far are kept:
#: the runners write each chunk as it is done) and packs what it has
DEADLINE_S = 470

MEASURE_SH = """#!/bin/bash
# Runs on the GPU machine from the repository root; $OUT receives results.tgz.
D={dir}
R=/tmp/frontier-remote
mkdir -p $R
export PYTHONUNBUFFERED=1
{{ date -u; nvidia-smi -L; lscpu; python3 -c 'import onnxruntime, torch, numpy, onnx
print("onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers())
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
}} > $R/machine.txt 2>&1
END=$((SECONDS + ${{DEADLINE_S:-{deadline}}}))
left() {{ echo $(( END - SECONDS > 1 ? END - SECONDS : 1 )); }}
pin() {{ if taskset -c $1 true 2>/dev/null; then taskset -c "$@"; else shift; "$@"; fi; }}
# RUNNER_ARGS and TORCH_DEVICE are for a dry run elsewhere (short rounds, the CPU)
cpu() {{ pin $1 timeout $(left) python3 latency_models/runner.py $D/$2.zip \
  --device {cpu} --out $R/{cpu}-$2.csv ${{RUNNER_ARGS:-}}; }}
gpu() {{ pin $1 timeout $(left) python3 latency_models/runner_torch.py $D/$2.zip \
  --device {gpu} --out $R/{gpu}-$2.csv --torch-device ${{TORCH_DEVICE:-cuda}} ${{RUNNER_ARGS:-}}; }}
plain() {{ pin $1 timeout $(left) python3 benchmarks/bench_remote_device.py plain \
  $D/$2.zip --engine $3 --out $R/plain-$4-$2.json; }}
# One step at a time, on one core: measured side by side, concurrent runners moved the
# same plans' latency by 19-24% (MAPE) between two runs on this machine's CPU.
STEPS=${{STEPS:-"cpu:digits-full cpu:digits-few cpu:mbv2-full cpu:mbv2-few ort:digits-full
  ort:mbv2-full gpu:digits-fp32 gpu:mbv2-fp32 cuda:digits-fp32 cuda:mbv2-fp32"}}
for step in $STEPS; do
  b=${{step#*:}}
  case ${{step%%:*}} in
    cpu) cpu 2 $b;;
    gpu) gpu 2 $b;;
    ort) plain 2 $b ort {cpu};;
    cuda) plain 2 $b cuda {gpu};;
  esac > $R/log-$step.txt 2>&1
done
tail -n 2 $R/log-*.txt
tar czf $OUT/results.tgz -C $R .
"""


def _frontier(*args: str) -> None:
    cli = Path(sys.executable).with_name("frontier")
    subprocess.run([str(cli), *args], check=True, cwd=ROOT)


def prepare(folder: Path) -> None:
    """Bundles and measure.sh into ``folder`` (a path under the repository)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    for short, config in SPACES.items():
        path = ROOT / "experiments" / "configs" / f"{config}.yaml"
        fp32 = yaml.safe_load(path.read_text())
        fp32["name"] = f"{config}-fp32"
        fp32["space"]["techniques"]["quantize"] = {"weight_bits": [32], "act_bits": [32]}
        (folder / f"{short}-fp32.yaml").write_text(yaml.safe_dump(fp32, sort_keys=False))
        for kind, source, extra in (
            ("full", config, []),
            ("few", config, ["--few-shot", "50"]),
            ("fp32", str(folder / f"{short}-fp32.yaml"), []),
        ):
            bundle = folder / f"{short}-{kind}.zip"
            if not bundle.exists():
                _frontier("lut", "ops", source, "--out", str(bundle), "--validation", "50", *extra)
    script = MEASURE_SH.format(
        dir=folder.resolve().relative_to(ROOT), deadline=DEADLINE_S, cpu=CPU, gpu=GPU
    )
    (folder / "measure.sh").write_text(script)
    size = sum(p.stat().st_size for p in folder.glob("*.zip"))
    print(f"wrote {folder}: bundles {size / 2**20:.1f} MiB and measure.sh")


def pack(out: Path, models: list[str]) -> None:
    """Whole ONNX models (``KEY=FILE`` each: a scenario's baseline first, then its picks,
    exported by ``frontier plan --export``) as a ``lut front`` bundle for the runners:
    the first is its baseline, the weights are stripped (drawn from a seed there)."""
    from frontier.latency_models import write_front_bundle

    pairs = [item.partition("=")[::2] for item in models]
    (base_key, base_file), rest = pairs[0], pairs[1:]
    write_front_bundle(
        out,
        [(key, Path(file).read_bytes()) for key, file in rest],
        device="any",
        source={"parent": base_key},
        baseline=(Path(base_file).read_bytes(), {}),
    )
    print(f"wrote {out}: {len(pairs)} models, {out.stat().st_size / 2**20:.1f} MiB")


def _plain_loop(
    bundle: Path,
    entries: list[dict[str, Any]],
    open_run: Callable[[bytes, dict[str, Any]], Callable[[], Any]],
    sync: Callable[[], Any] = lambda: None,
) -> list[float]:
    """A user's check of each model: 30 warm-up runs, then the median of up to 300 runs
    or 1 s back to back, each timed by the wall clock around ``run()`` and ``sync()``."""
    import time
    import zipfile

    out = []
    with zipfile.ZipFile(bundle) as zf:
        for entry in entries:
            try:
                run = open_run(zf.read(entry["file"]), entry)
            except Exception as err:  # a model this engine cannot run (INT8 on the GPU)
                print(f"{entry['id']}: not timed ({err})", file=sys.stderr)
                out.append(float("nan"))
                continue
            # PLAIN_WARMUP_S: warm up for that long too (does the machine ramp up?)
            warm_until = time.perf_counter() + float(os.environ.get("PLAIN_WARMUP_S", 0))
            k = 0
            while k < 30 or time.perf_counter() < warm_until:
                run()
                k += 1
            sync()
            times: list[float] = []
            end = time.perf_counter() + 1.0
            while len(times) < 300 and time.perf_counter() < end:
                t0 = time.perf_counter()
                run()
                sync()
                times.append((time.perf_counter() - t0) * 1000.0)
            out.append(statistics.median(times))
    return out


def _plain_ort(bundle: Path, entries: list[dict[str, Any]]) -> list[float]:
    """On a CPU: one ONNX Runtime session a model, 1 thread."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "latency_models"))
    import runner

    def open_run(data: bytes, entry: dict[str, Any]) -> Callable[[], Any]:
        so = runner.session_options(1)
        rng = np.random.default_rng(0)
        return runner.open_session(data, so, rng=rng, **runner.weights_of(entry))[0]

    return _plain_loop(bundle, entries, open_run)


def _plain_cuda(bundle: Path, entries: list[dict[str, Any]]) -> list[float]:
    """On a GPU: the PyTorch model, each run followed by ``torch.cuda.synchronize()``."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "latency_models"))
    import runner_torch

    device = os.environ.get("TORCH_DEVICE", "cuda")  # cpu: a dry run elsewhere
    backend = runner_torch.TorchBackend(device)

    def open_run(data: bytes, entry: dict[str, Any]) -> Callable[[], Any]:
        return backend.open(data, entry, batch_size=1, rng=np.random.default_rng(0))[0]

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    return _plain_loop(bundle, entries, open_run, sync)


def plain(bundle: Path, engine: str, out: Path, count: int = 20, kind: str = "validation") -> None:
    """The plain-loop check of ``count`` models of ``kind`` in ``bundle``."""
    import zipfile

    with zipfile.ZipFile(bundle) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    entries = [m for m in manifest["models"] if m["kind"] == kind][:count]
    times = (_plain_ort if engine == "ort" else _plain_cuda)(bundle, entries)
    out.write_text(json.dumps({m["key"]: t for m, t in zip(entries, times, strict=True)}))
    timed = [t for t in times if t == t]  # NaN: not timed
    median = statistics.median(timed) if timed else float("nan")
    print(f"plain {engine} {bundle.name}: {len(times)} models, median {median:.4f} ms")


def _between_runs(runs: list[Path]) -> dict[str, Any]:
    """The same validation models measured in two runs (two leases of the machine):
    each table's rows of the last run that has it against an earlier run's."""
    import csv

    from frontier.latency_models import error_summary

    def rows(path: Path) -> dict[str, float]:
        with path.open(newline="") as f:
            return {
                r["key"]: float(r["median_ms"])
                for r in csv.DictReader(f)
                if r["kind"] == "validation" and r["status"] == "ok"
            }

    out = {}
    for later in reversed(runs):
        for csv_path in sorted(later.glob("*.csv")):
            earlier = [
                r / csv_path.name for r in runs if r != later and (r / csv_path.name).exists()
            ]
            if earlier and csv_path.name not in out:
                a, b = rows(csv_path), rows(earlier[0])
                keys = [k for k in a if k in b]
                out[csv_path.name] = {
                    "runs": [earlier[0].parent.name, later.name],
                    **error_summary([a[k] for k in keys], [b[k] for k in keys]),
                    "median_ratio": round(statistics.median(a[k] / b[k] for k in keys), 4),
                }
    return out


def report(folder: Path, results: list[Path], out: Path, spaces: list[str]) -> None:
    """Import the device's tables beside ``local-cpu`` measured here; write ``out``.
    ``results``: measure.sh's results.tgz of one run or more, later ones first-class
    (a step rerun alone replaces that step's files)."""
    import numpy as np

    from frontier.latency_models import (
        DeviceStore,
        LatencyModel,
        error_summary,
        measure_bundle,
    )

    work = folder.with_name(folder.name + "-work")  # outside what travels to the device
    got = work / "results"
    got.mkdir(parents=True, exist_ok=True)
    runs = []
    for k, tgz in enumerate(results):  # a later run's files replace an earlier one's
        runs.append(work / f"run{k + 1}")
        for into in (got, runs[-1]):
            with tarfile.open(tgz) as tar:
                tar.extractall(into, filter="data")
    store = DeviceStore(work / "store")
    figures: dict[str, Any] = {
        "machine": (got / "machine.txt").read_text().strip().splitlines(),
        "runs": [str(r) for r in results],
        "between_runs": _between_runs(runs),
        "spaces": {},
    }

    def whole(lm: LatencyModel, kind: str) -> dict[int, tuple[Any, float]]:
        found = {}
        for row in lm.table.whole_models(kind):
            entry = lm.table.models[row.key]
            found[entry["seed"]] = ([lm.spec_of(k) for k in entry["op_keys"]], row.median_ms)
        return found

    def own(name: str) -> dict[str, Any]:
        lm = LatencyModel(store.load(name))
        val = whole(lm, "validation")
        pred = [lm.predict_ops(s).latency_ms for s, _ in val.values()]
        return {
            "validation": error_summary(pred, [m for _, m in val.values()]),
            "cross_validated": lm.quality().get("calibration", {}),
            "median_validation_ms": statistics.median(m for _, m in val.values()),
            "corners_ms": corners(lm),
        }

    def corners(lm: LatencyModel) -> dict[str, float]:
        """Measured latency of the uniform plans (every layer at one prune ratio and
        one bit width: the calibration set's first models), first measurement each."""
        found: dict[str, float] = {}
        for row in lm.table.whole_models("calibration"):
            plan = lm.table.models[row.key].get("plan", {})
            ratios = set(plan.get("prune", {}).values()) or {0.0}
            bits = set(plan.get("weight_bits", {}).values()) or {32}
            if len(ratios) == 1 and len(bits) == 1:
                label = f"prune {ratios.pop():g}, {'INT8' if bits.pop() == 8 else 'FP32'}"
                found.setdefault(label, row.median_ms)
        return dict(sorted(found.items()))

    for short in spaces:
        local = f"local-cpu-{short}"
        base_csv = work / f"local-cpu-{short}-full.csv"
        if not base_csv.exists():
            measure_bundle(folder / f"{short}-full.zip", base_csv, device="local-cpu")
        store.import_table(base_csv, name=local)
        space: dict[str, Any] = {"local-cpu (this machine)": own(local)}
        full = got / f"{CPU}-{short}-full.csv"
        if full.exists():
            name = f"{CPU}-{short}"
            store.import_table(full, name=name)
            space[f"{CPU} full table"] = own(name)
            few = got / f"{CPU}-{short}-few.csv"
            if few.exists():
                fs = f"{CPU}-{short}-few-shot"
                table = store.import_table(few, name=fs, few_shot_from=local)
                lm, base = LatencyModel(table), LatencyModel(store.load(local))
                val, cal = whole(lm, "validation"), whole(lm, "calibration")
                as_is = [base.predict_ops(s).latency_ms for s, _ in val.values()]
                measured = [m for _, m in val.values()]
                scale = float(
                    np.median([m / base.predict_ops(s).latency_ms for s, m in cal.values()])
                )
                other = whole(LatencyModel(store.load(name)), "validation")
                seeds = [s for s in val if s in other]
                space[f"{CPU} few-shot from local-cpu"] = {
                    "few_shot": lm.quality()["stored_validation"],
                    "local_cpu_table_as_is": error_summary(as_is, measured),
                    "local_cpu_scaled_once": {
                        "scale": round(scale, 4),
                        **error_summary([scale * p for p in as_is], measured),
                    },
                    "two_runs_agree": error_summary(
                        [val[s][1] for s in seeds], [other[s][1] for s in seeds]
                    ),
                }
        gpu = got / f"{GPU}-{short}-fp32.csv"
        if gpu.exists():
            name = f"{GPU}-{short}"
            store.import_table(gpu, name=name, allow_degraded=True)
            space[f"{GPU} full table (FP32 space)"] = own(name)
        for device, bundle in ((CPU, f"{short}-full"), (GPU, f"{short}-fp32")):
            plain_json = got / f"plain-{device}-{bundle}.json"
            table = f"{device}-{short}"
            if plain_json.exists() and store.has(table):
                loop = json.loads(plain_json.read_text())
                lm = LatencyModel(store.load(table))
                rows = {r.key: r.median_ms for r in lm.table.whole_models("validation")}
                keys = [k for k in loop if k in rows]
                ratios = [rows[k] / loop[k] for k in keys]
                space[f"{device} protocol vs plain loop"] = {
                    "models": len(keys),
                    "median_ratio": round(statistics.median(ratios), 4),
                    "within_5pct": round(float(np.mean([abs(r - 1) <= 0.05 for r in ratios])), 3),
                }
        figures["spaces"][SPACES[short]] = space
        print(json.dumps({SPACES[short]: space}, indent=1), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    print(f"wrote {out}")


#: result files of ``models.sh`` runs: (file name pattern, device, method)
MODEL_SERIES = (
    ("cpu-{b}.csv", CPU, "protocol"),
    ("cpuA-{b}.csv", CPU, "protocol"),
    ("cpuB-{b}.csv", CPU, "protocol"),
    ("plain-cpu-{b}.json", CPU, "plain loop"),
    ("plainA-cpu-{b}.json", CPU, "plain loop"),
    ("plainB-cpu-{b}.json", CPU, "plain loop, 2 s warm-up"),
    ("cuda-{b}.csv", GPU, "CUDA events"),
    ("plain-cuda-{b}.json", GPU, "plain loop, synchronised"),
)


def _series_ms(path: Path) -> dict[str, float]:
    """A runner CSV's or a plain loop's ms by model key (timed models only)."""
    import csv

    if path.suffix == ".json":
        return {k: v for k, v in json.loads(path.read_text()).items() if v == v}
    with path.open(newline="") as f:
        return {r["key"]: float(r["median_ms"]) for r in csv.DictReader(f) if r["status"] == "ok"}


def models_report(
    bundles: list[Path],
    results: list[Path],
    labels: dict[str, str],
    out: Path,
    local_repeats: int = 3,
) -> None:
    """Whole models (``pack`` and ``lut front`` bundles) measured on a lent machine's
    CPU and GPU in one lease or more (``results``: each lease's results.tgz), and here
    (``local-cpu``: the protocol and a plain loop, ``local_repeats`` times: this machine
    is shared, and one series can catch a slow spell) into ``out``. Each bundle's
    reference (its baseline) makes every series a set of speed-ups measured side by
    side."""
    import tempfile
    import zipfile

    from frontier.latency_models import measure_bundle

    series: list[dict[str, Any]] = []
    reference: dict[str, str] = {}
    machine: list[str] = []
    with tempfile.TemporaryDirectory(prefix="frontier-models-") as tmp:
        for bundle in bundles:
            b = bundle.stem
            with zipfile.ZipFile(bundle) as zf:
                models = json.loads(zf.read("manifest.json"))["models"]
            base = [m["key"] for m in models if m.get("role") == "baseline"]
            reference[b] = base[0] if base else models[0]["key"]
            for r in range(local_repeats):
                csv_path = Path(tmp) / f"local-{b}-{r}.csv"
                measure_bundle(bundle, csv_path, device="local-cpu")
                series.append({"lease": "here", "bundle": b, "device": "local-cpu",
                               "method": "protocol", "ms": _series_ms(csv_path)})  # fmt: skip
                loop = Path(tmp) / f"local-plain-{b}-{r}.json"
                plain(bundle, "ort", loop, count=len(models), kind="front")
                series.append({"lease": "here", "bundle": b, "device": "local-cpu",
                               "method": "plain loop", "ms": _series_ms(loop)})  # fmt: skip
        for k, tgz in enumerate(results):
            got = Path(tmp) / f"lease{k + 1}"
            with tarfile.open(tgz) as tar:
                tar.extractall(got, filter="data")
            machine = machine or (got / "machine.txt").read_text().strip().splitlines()
            for bundle in bundles:
                for pattern, device, method in MODEL_SERIES:
                    path = got / pattern.format(b=bundle.stem)
                    if path.exists():
                        series.append({"lease": f"lease {k + 1}", "bundle": bundle.stem,
                                       "device": device, "method": method,
                                       "ms": _series_ms(path)})  # fmt: skip
    figures = {"machine": machine, "reference": reference, "labels": labels, "series": series}
    out.write_text(json.dumps(figures, indent=1))
    print(f"wrote {out}: {len(series)} series")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("dir")
    p = sub.add_parser("pack")
    p.add_argument("out")
    p.add_argument("models", nargs="+", help="KEY=FILE.onnx each")
    p = sub.add_parser("plain")
    p.add_argument("bundle")
    p.add_argument("--engine", choices=["ort", "cuda"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--kind", default="validation", help="which models: validation, front")
    p = sub.add_parser("models-report")
    p.add_argument("--bundles", nargs="+", required=True)
    p.add_argument("--results", nargs="+", required=True, help="each lease's results.tgz")
    p.add_argument("--label", nargs="*", default=[], help="KEY=LABEL each")
    p.add_argument("--json", default=str(HERE / "report-logs" / "remote-models.json"))
    p.add_argument("--local-repeats", type=int, default=3)
    p = sub.add_parser("report")
    p.add_argument("dir")
    p.add_argument("results", nargs="+", help="results.tgz of each run, oldest first")
    p.add_argument("--json", default=str(HERE / "report-logs" / "remote-devices.json"))
    p.add_argument("--spaces", nargs="+", choices=list(SPACES), default=list(SPACES))
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(Path(args.dir))
    elif args.step == "pack":
        pack(Path(args.out), args.models)
    elif args.step == "plain":
        plain(Path(args.bundle), args.engine, Path(args.out), kind=args.kind)
    elif args.step == "models-report":
        labels = dict(item.partition("=")[::2] for item in args.label)
        bundles = [Path(b) for b in args.bundles]
        results = [Path(r) for r in args.results]
        models_report(bundles, results, labels, Path(args.json), args.local_repeats)
    else:
        report(Path(args.dir), [Path(r) for r in args.results], Path(args.json), args.spaces)


if __name__ == "__main__":
    main()
