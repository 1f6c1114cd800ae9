"""Does the latency a table predicts match what the model runs at, as a user measures it?

For each space (a built-in experiment): measures its ``local-cpu`` table here from
scratch (the timing protocol, ``runner.time_models``), then prices and measures

- 50 seeded random plans (the seeds ``frontier lut validate`` uses, none of them in
  the table's calibration set),
- the corner plans (every prune ratio applied to every layer, all FP32 and all INT8;
  the table's calibration set holds these, so they check the fit where searches go),
- the scenario's last pick (``report-logs/scenarios.json``), where there is one,

with the protocol twice (the second pass in another order: the repeatability ceiling),
each pass timing the uncompressed model in every chunk's rounds (so each plan's speed-up
over it is measured as the table states it, and compared with the predicted one), and
with a plain ONNX Runtime loop written here as a user would write it (one
session, 1 thread, 30 warm-up runs, then 300 runs or 1 s back to back, the median).
``--budget-s S`` measures the table with ``local_table.calibration_budget_s: S``.

Latency does not depend on weight values, so the models are built untrained (the
ImageNet weights for Lite0, MiniLM's for the text teacher): nothing is trained; and INT8
activation ranges are calibrated on one batch of 8.

Each space's table is measured in a store of its own (``--store DIR/SPACE``), so it is
calibrated on its own space's whole models.

``--device local-openvino`` checks OpenVINO's table the same way, against a plain
OpenVINO loop (one compiled model per plan, 1 thread, latency hint, f32), its INT8
layers exported in QDQ format as OpenVINO reads them, and times every plan's ONNX
Runtime twin (INT8 in QOperator format) with a plain ONNX Runtime loop too: the
speed-ups of the same plans on each runtime, side by side.

Run: python benchmarks/bench_latency_trust.py [SPACE ...] [--samples 50]
     [--store DIR] [--json benchmarks/report-logs/latency-trust.json]
     [--device local-openvino]
Writes one entry per space into the JSON (others already there are kept).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SPACES = [
    "digits-cnn",
    "efficientnet-lite0-cpu",
    "mobilenetv2-flops40",
    "resnet50-edge",
    "text-student",
]
HERE = Path(__file__).parent
SCENARIOS = HERE / "report-logs" / "scenarios.json"


def plain_openvino_ms(
    path: Path, *, warmup: int = 30, runs: int = 300, max_s: float = 1.0
) -> float:
    """What a user of OpenVINO checking a number writes: the ONNX file compiled for the
    CPU with one thread, one stream, the latency hint and FP32 inference precision, an
    infer request with its inputs set, warmed up, then the median of back-to-back runs."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    shapes = {
        i.get_any_name(): [d.get_length() if d.is_static else 1 for d in i.get_partial_shape()]
        for i in model.inputs
    }
    model.reshape(shapes)
    compiled = core.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32", "ENABLE_CPU_PINNING": False,
    })  # fmt: skip
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    feeds = {
        i.get_any_name(): (
            rng.integers(1, 5, size=list(i.get_shape())).astype(np.int64)
            if "i64" in str(i.get_element_type())
            else rng.standard_normal(list(i.get_shape())).astype(np.float32)
        )
        for i in compiled.inputs
    }
    for name, array in feeds.items():  # set once, as OpenVINO's performance guide does
        request.set_tensor(name, ov.Tensor(array))
    for _ in range(warmup):
        request.infer()
    times = []
    start = time.perf_counter()
    while len(times) < runs and time.perf_counter() - start < max_s:
        t0 = time.perf_counter()
        request.infer()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def plain_loop_ms(path: Path, *, warmup: int = 30, runs: int = 300, max_s: float = 1.0) -> float:
    """What a user checking a number writes: one session, one thread, warm up, then the
    median of back-to-back runs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in inp.shape]
        if "int" in inp.type:
            feeds[inp.name] = rng.integers(1, 5, size=dims).astype(np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    start = time.perf_counter()
    while len(times) < runs and time.perf_counter() - start < max_s:
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def untrained_tasks() -> None:
    """Build the tasks' models without training them (latency does not depend on the
    weights' values)."""
    from frontier.experiments import skip_training

    skip_training()


def agreement(a: list[float], b: list[float]) -> dict[str, Any]:
    """How far ``a`` is from ``b`` (both ms): the largest relative gap, the share within
    5% and the median gap."""
    gap = np.abs(np.asarray(a) / np.asarray(b) - 1)
    return {
        "max_gap": round(float(gap.max()), 4),
        "within_5pct": round(float((gap <= 0.05).mean()), 4),
        "median_gap": round(float(np.median(gap)), 4),
    }


def scenario_pick(name: str) -> dict[str, Any] | None:
    if not SCENARIOS.exists():
        return None
    for row in json.loads(SCENARIOS.read_text()):
        if row.get("scenario") == name and row.get("picked", {}).get("plan"):
            return dict(row["picked"]["plan"])
    return None


def run_space(
    name: str,
    samples: int,
    store_dir: Path,
    budget_s: float | None = None,
    device_name: str = "local-cpu",
) -> dict[str, Any]:
    from frontier.latency_models import (
        VALIDATION_SEED0,
        DeviceStore,
        LatencyModel,
        corner_plans,
        ensure_local_table,
        error_summary,
        local_device,
        measure_models,
        quiet_root_logger,
        whole_model_bytes,
    )
    from frontier.search import load_config as _load
    from frontier.search import task_and_space as _task_and_space
    from frontier.spaces import CompressionPlan

    config = _load(name)
    task, model, space = _task_and_space(config)
    # INT8 activation ranges do not move latency: one small batch calibrates them
    example, calibration = task.example_inputs(), task.calibration_batches(batches=1, batch_size=8)
    start = time.perf_counter()
    device = local_device(device_name)
    if device is None:
        raise SystemExit(f"{device_name}: not a device of this machine")
    openvino = device.kind == "openvino"
    table = ensure_local_table(
        model,
        example,
        space,
        store=DeviceStore(store_dir),
        name=device_name,
        calibration_data=calibration,
        calibration_budget_s=budget_s,
    )
    table_s = time.perf_counter() - start
    latency = LatencyModel(table)
    latency.bind(model, example, space)
    plans: list[tuple[str, str, CompressionPlan]] = [
        ("random", f"seed {VALIDATION_SEED0 + i}", space.sample(VALIDATION_SEED0 + i))
        for i in range(samples)
    ]
    plans += [("corner", label, plan) for label, plan in corner_plans(space)]
    pick = scenario_pick(config.name)
    if pick is not None:
        plans.append(("pick", "the scenario's last pick", CompressionPlan.from_dict(pick)))
    predicted = [latency.predict(model, plan).latency_ms for _, _, plan in plans]
    with tempfile.TemporaryDirectory() as tmp:
        files, twins = [], []  # as the device runs them; ONNX Runtime's where they differ
        for i, (_, _, plan) in enumerate(plans):
            with quiet_root_logger():
                data = whole_model_bytes(model, plan, example, calibration, qdq=device.int8_qdq)
                twin = whole_model_bytes(model, plan, example, calibration) if openvino else b""
            files.append(Path(tmp) / f"{i}.onnx")
            files[-1].write_bytes(data)
            twins.append(Path(tmp) / f"{i}-ort.onnx")
            twins[-1].write_bytes(twin or data)
        print(f"{name}: {len(files)} models exported; measuring", file=sys.stderr)
        # each chunk times the uncompressed model in its rounds: rows and speed-ups
        # are stated against it, as tables are (runner.relative_to)
        base_file = files[next(i for i, p in enumerate(plans) if p[1] == "prune 0, fp32")]
        kw = {"device": device, "reference": base_file}
        first = measure_models(files, label=f"{name} pass 1", seed=0, **kw)
        plain = [(plain_openvino_ms if openvino else plain_loop_ms)(f) for f in files]
        # the same files as ONNX Runtime runs them: which compression pays on which runtime
        other = [plain_loop_ms(f) for f in twins] if openvino else plain
        second = measure_models(files, label=f"{name} pass 2", seed=1, **kw)
    base_index = next(i for i, p in enumerate(plans) if p[1] == "prune 0, fp32")
    rows = [
        {
            "set": kind,
            "plan": label,
            "predicted_ms": round(p, 5),
            "measured_ms": round(m, 5),
            "measured_again_ms": round(m2, 5),
            "plain_loop_ms": round(u, 5),
            "error": round(p / m - 1, 4),
            # over the uncompressed model: predicted, and measured in the same rounds
            "predicted_speedup": round(predicted[base_index] / p, 4),
            "measured_speedup": round(first[base_index] / m, 4),
            "measured_speedup_again": round(second[base_index] / m2, 4),
            **(
                {
                    "plain_onnxruntime_ms": round(o, 5),
                    "plain_speedup": round(plain[base_index] / u, 4),
                    "plain_onnxruntime_speedup": round(other[base_index] / o, 4),
                }
                if openvino
                else {}
            ),
        }
        for (kind, label, _), p, m, m2, u, o in zip(
            plans, predicted, first, second, plain, other, strict=True
        )
    ]

    def summary(kind: str) -> dict[str, Any]:
        chosen = [r for r in rows if r["set"] == kind]
        if not chosen:
            return {}
        pred = [r["predicted_ms"] for r in chosen]
        meas = [r["measured_ms"] for r in chosen]
        again = [r["measured_again_ms"] for r in chosen]
        speedups = [r["predicted_speedup"] for r in chosen]
        measured_speedups = [r["measured_speedup"] for r in chosen]
        return {
            **error_summary(pred, meas),
            "repeatability": error_summary(again, meas),
            "protocol_vs_plain_loop": agreement(meas, [r["plain_loop_ms"] for r in chosen]),
            "speedups": error_summary(speedups, measured_speedups),
            "speedups_repeatability": error_summary(
                [r["measured_speedup_again"] for r in chosen], measured_speedups
            ),
        }

    quality = latency.quality()
    return {
        "space": config.name,
        "device": device_name,
        "table_ops": len(table.ops()),
        "calibration_models": len(table.whole_models("calibration")),
        "table_s": round(table_s, 1),
        "calibration": quality["calibration"],
        "cv_mape": latency.method_cv.get(latency.method or "", None),
        "protocol": table.meta.get("protocol"),
        "random": summary("random"),
        "corners": summary("corner"),
        "pick": summary("pick"),
        "baseline": rows[base_index],
        "baseline_price_error": rows[base_index]["error"],
        "calibration_budget_s": budget_s,
        "rows": rows,
    }


def markdown(results: dict[str, Any]) -> str:
    """The REPORT table of ``latency-trust.json``."""

    def cell(s: dict[str, Any]) -> str:
        if not s:
            return "-"
        rep = s["repeatability"]
        tau = f" / tau {s['kendall_tau']:.2f}" if s["kendall_tau"] is not None else ""
        return (
            f"{s['within_10pct']:.0%} / {s['mape']:.1%}{tau} "
            f"(ceiling {rep['within_10pct']:.0%} / {rep['mape']:.1%})"
        )

    def speedups(r: dict[str, Any]) -> str:
        s = r["random"].get("speedups")
        if not s:
            return "-"
        return f"{s['within_10pct']:.0%} / {s['mape']:.1%}, base {r['baseline_price_error']:+.1%}"

    lines = [
        "| space | table: ops, calibration models, s | CV MAPE | random plans | corners | "
        "last pick | random speed-ups, baseline price | protocol / plain loop: median, "
        "max gap |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        gaps = [abs(row["measured_ms"] / row["plain_loop_ms"] - 1) for row in r["rows"]]
        cv = f"{r['cv_mape']:.1%}" if r.get("cv_mape") is not None else "-"
        lines.append(
            f"| {name} | {r['table_ops']}, {r['calibration_models']}, {r['table_s']:.0f} | {cv} | "
            f"{cell(r['random'])} | {cell(r['corners'])} | {cell(r['pick'])} | "
            f"{speedups(r)} | {float(np.median(gaps)):.1%}, {max(gaps):.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "spaces", nargs="*", default=SPACES, help=f"experiments or config files (default: {SPACES})"
    )
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument(
        "--store", type=Path, help="device stores, one folder per space (default: fresh ones)"
    )
    parser.add_argument("--json", type=Path, default=HERE / "report-logs" / "latency-trust.json")
    parser.add_argument(
        "--report", action="store_true", help="print the REPORT table of --json and stop"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="local_table.calibration_budget_s for the table (default 0: none, the full count)",
    )
    parser.add_argument(
        "--device",
        default="local-cpu",
        help="the device of this machine to check (default local-cpu; local-openvino "
        "checks OpenVINO against a plain OpenVINO loop, and times ONNX Runtime beside it)",
    )
    args = parser.parse_args()
    if args.report:
        print(markdown(json.loads(args.json.read_text())))
        return
    untrained_tasks()
    results = json.loads(args.json.read_text()) if args.json.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp)
        for name in args.spaces:
            start = time.perf_counter()
            # a store per space: each table is calibrated on its own space's models
            budget = args.budget_s or None
            result = run_space(name, args.samples, store / Path(name).stem, budget, args.device)
            result["wall_s"] = round(time.perf_counter() - start, 1)
            name = (
                result["space"]
                if args.device == "local-cpu"
                else f"{result['space']}@{args.device}"
            )
            results[name] = result
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))
            for part in ("random", "corners", "pick"):
                s = result[part]
                if s:
                    print(
                        f"{name} {part}: {s['within_10pct']:.0%} within 10%, MAPE "
                        f"{s['mape']:.1%}, tau {s['kendall_tau']}; repeat "
                        f"{s['repeatability']['within_10pct']:.0%} / "
                        f"{s['repeatability']['mape']:.1%}; protocol vs plain loop max gap "
                        f"{s['protocol_vs_plain_loop']['max_gap']:.1%}",
                        flush=True,
                    )
            print(
                f"{name}: table CV MAPE {result['cv_mape']}; random speed-ups "
                f"{result['random']['speedups']['within_10pct']:.0%} within 10%; the "
                f"uncompressed model priced {result['baseline_price_error']:+.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
