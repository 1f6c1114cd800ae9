"""Where does a fresh table's error come from? Its residuals broken down by what the
plans hold, on spaces of torchvision models no scenario uses.

For each model (untrained: latency does not depend on weight values; 96x96 inputs, a
space of prune 0/0.25/0.5 and INT8 or FP32 per layer) and each of ``--tables`` fresh
tables (each built by the search's first-use path, ``ensure_local_table``, in an empty
store), prices seeded random plans and the 6 corners twice:

- ``isolated``: each op at its row's price, as it runs alone (the table with its layout
  columns blanked: how tables priced before they recorded layout glue);
- ``chain``: each op at its price inside the chain (``OpPricer.chain_ms``: the layout
  conversions a run of kernels in one layout pays once, not around each op).

Both through the table's default calibration, and the plain sum of ops beside it. Each
plan is then timed by a plain ONNX Runtime loop (one warm session, 1 thread, round-robin
rounds over every plan, the median of round medians), in two passes: the second pass is
the ceiling (does the measurement repeat itself within 10%?).

Each plan's residual (prediction / plain loop - 1) is then broken down by: the share of
groups pruned, the share of layers in INT8, the number of precision boundaries, the share
of convolution channel counts that are not a multiple of 8, and the plan group (fast,
slow, heavily pruned, all-INT8, mixed precision); a least-squares line of the residual on
the first four says which of them the op sum misses.

Run: python benchmarks/bench_residuals.py [MODEL ...] [--tables 3] [--first 1] [--samples 20]
     [--json benchmarks/report-logs/residuals.json]
Writes one entry per model and table (others already in the JSON are kept).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from report_sections import residuals_section

HERE = Path(__file__).parent
MODELS = ["mnasnet0_5", "shufflenet_v2_x0_5", "regnet_x_400mf"]
SIZE = 96
ROUNDS = 5
VISIT_S = 0.06


def build(name: str) -> tuple[Any, Any, Any, Any]:
    """An untrained torchvision ``name`` (10 classes), its example input, space and a
    calibration batch."""
    import torch
    import torchvision

    from frontier.spaces import SpaceOptions, discover

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10).eval()
    x = torch.randn(1, 3, SIZE, SIZE)
    options = SpaceOptions(prune_ratios=(0.0, 0.25, 0.5), weight_bits=(8, 32), act_bits=(8, 32))
    space = discover(model, x, options)
    calibration = [(torch.randn(8, 3, SIZE, SIZE), torch.zeros(8, dtype=torch.long))]
    return model, x, space, calibration


def plain_loop(files: list[Path], base: int, seed: int) -> list[float]:
    """A user's plain loop, fair to every model on a machine that changes speed: one warm
    ONNX Runtime session each, 1 thread; ``ROUNDS`` rounds visiting the models in a
    seeded order, each visit timing the uncompressed model (``files[base]``) and then
    the model, each 10 warm runs and then back-to-back runs for ``VISIT_S``, the median.
    A model's latency is its median ratio to the uncompressed model over the rounds
    times the uncompressed model's median: a slow spell falls on both sides of a ratio."""
    import random

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    rng = np.random.default_rng(0)
    sessions = []
    for f in files:
        s = ort.InferenceSession(str(f), options, providers=["CPUExecutionProvider"])
        feeds = {
            i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
                np.float32
            )
            for i in s.get_inputs()
        }
        sessions.append((s, feeds))

    def visit(i: int) -> float:
        s, feeds = sessions[i]
        for _ in range(10):
            s.run(None, feeds)
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < VISIT_S or len(times) < 5:
            t0 = time.perf_counter()
            s.run(None, feeds)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    ratios: list[list[float]] = [[] for _ in files]
    bases: list[float] = []
    order = list(range(len(files)))
    shuffle = random.Random(seed)
    for _ in range(ROUNDS):
        shuffle.shuffle(order)
        for i in order:
            b = visit(base)
            bases.append(b)
            ratios[i].append(visit(i) / b)
    anchor = statistics.median(bases)
    return [statistics.median(r) * anchor for r in ratios]


def features(plan: Any, space: Any, specs: list[Any]) -> dict[str, float]:
    """What a plan holds: the share of groups pruned, of layers in INT8, its precision
    boundaries, and the share of its convolutions whose channel counts are not a
    multiple of 8 (the vector width ONNX Runtime's kernels block channels by)."""
    pruned = [plan.prune.get(g.name, 0.0) for g in space.groups]
    int8 = [plan.weight_bits.get(q.name, 32) == 8 for q in space.layers]
    boundaries = sum(s.op_type in ("QuantizeLinear", "DequantizeLinear") for s in specs)
    convs = [s for s in specs if s.op_type == "Conv"]
    odd = [s.input_shapes[0][1] % 8 != 0 or s.output_shape[1] % 8 != 0 for s in convs]
    return {
        "share_pruned": float(np.mean([r > 0 for r in pruned])) if pruned else 0.0,
        "share_int8": float(np.mean(int8)) if int8 else 0.0,
        "boundaries": float(boundaries),
        "share_odd_channels": float(np.mean(odd)) if odd else 0.0,
    }


def groups(row: dict[str, Any], base_again_ms: float) -> list[str]:
    """The plan groups the issue names that ``row`` falls in. Fast and slow are judged
    by the second pass (``plain_again_ms``, against the uncompressed model's second
    pass), the residuals against the first: a plan judged fast by the pass its error is
    measured against lands there partly by that pass's own error, which reads as a bias
    of the table (fast plans priced slow, slow plans fast)."""
    out = [
        "fast"
        if row["plain_again_ms"] < 0.8 * base_again_ms
        else "slow"
        if row["plain_again_ms"] > base_again_ms
        else "middle"
    ]
    if row["share_pruned"] >= 0.75:
        out.append("heavily pruned")
    if row["share_int8"] == 1.0:
        out.append("all-INT8")
    elif row["share_int8"] > 0:
        out.append("mixed precision")
    return out


def blank_layouts(store: Path) -> Path:
    """A copy of ``store`` whose table records no layout glue: how it priced before."""
    import shutil

    copy = store.parent / (store.name + "-isolated")
    shutil.copytree(store, copy)
    for table in copy.glob("devices/*/table.csv"):
        with table.open(newline="") as f:
            reader = csv.DictReader(f)
            header, rows = list(reader.fieldnames or []), list(reader)
        for r in rows:
            r["glue_in_share"] = r["glue_out_share"] = r["layout"] = ""
        with table.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
    return copy


def summary(pred: list[float], meas: list[float]) -> dict[str, Any]:
    err = np.asarray(pred) / np.asarray(meas) - 1
    return {
        "within_10pct": round(float((np.abs(err) <= 0.10).mean()), 4),
        "mape": round(float(np.abs(err).mean()), 4),
        "median_error": round(float(np.median(err)), 4),
    }


@contextmanager
def without_flexible() -> Iterator[None]:
    """The table's cross-validation without the calibrations with an intercept of their
    own (``flexible``: the affine lines, offered since 2026-12-01): how the same fresh
    table priced before them."""
    from frontier.latency_models import CALIBRATIONS

    saved = {n: c for n, c in CALIBRATIONS.items() if c.flexible}
    for name in saved:
        del CALIBRATIONS[name]
    try:
        yield
    finally:
        CALIBRATIONS.update(saved)


def run_table(name: str, samples: int, table_no: int) -> dict[str, Any]:
    from frontier.latency_models import (
        VALIDATION_SEED0,
        DeviceStore,
        LatencyModel,
        corner_plans,
        ensure_local_table,
        quiet_root_logger,
        whole_model_bytes,
    )

    model, x, space, calibration = build(name)
    plans = [
        (f"seed {VALIDATION_SEED0 + i}", space.sample(VALIDATION_SEED0 + i)) for i in range(samples)
    ]
    plans += list(corner_plans(space))
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        start = time.perf_counter()
        table = ensure_local_table(
            model, x, space, store=DeviceStore(store), calibration_data=calibration
        )
        table_s = time.perf_counter() - start
        old = ensure_local_table(
            model, x, space, store=DeviceStore(blank_layouts(store)), calibration_data=calibration
        )
        predictors, bases = {}, {}
        base_plan = dict(plans)["prune 0, fp32"]
        for label, t in (("chain", table), ("isolated", old)):
            for calibrated in (True, False):
                lm = LatencyModel(t, calibrate=calibrated)
                lm.bind(model, x, space)
                key = f"{label}{'' if calibrated else ' sum'}"
                predictors[key] = [
                    lm.predict(model, p, as_measured=False).latency_ms for _, p in plans
                ]
                # speed-ups are stated against the uncompressed model as the table measured it
                bases[key] = lm.predict(model, base_plan).latency_ms
        # the same calibration, anchored on the measured uncompressed model
        # (``OwnCalibration.anchor_factor``): paired with "chain" on one table and loop
        lm = LatencyModel(table, anchor=True)
        lm.bind(model, x, space)
        predictors["chain, anchored"] = [
            lm.predict(model, p, as_measured=False).latency_ms for _, p in plans
        ]
        bases["chain, anchored"] = lm.predict(model, base_plan).latency_ms
        with without_flexible():
            lm = LatencyModel(table)
            lm.bind(model, x, space)
            predictors["chain, before"] = [
                lm.predict(model, p, as_measured=False).latency_ms for _, p in plans
            ]
            bases["chain, before"] = lm.predict(model, base_plan).latency_ms
            before = lm.method
        method = LatencyModel(table)
        method.bind(model, x, space)
        method.choose_calibration()
        chosen = method.method
        cv = {k: round(v, 4) for k, v in method.method_cv.items()}
        files = []
        for i, (_, plan) in enumerate(plans):
            with quiet_root_logger():
                data = whole_model_bytes(model, plan, x, calibration)
            files.append(Path(tmp) / f"{i}.onnx")
            files[-1].write_bytes(data)
        print(f"{name} table {table_no}: {len(files)} plans exported; timing", file=sys.stderr)
        base = next(i for i, (label, _) in enumerate(plans) if label == "prune 0, fp32")
        first = plain_loop(files, base, seed=0)
        second = plain_loop(files, base, seed=1)
    rows = []
    for i, (label, plan) in enumerate(plans):
        # the plan's ops, as the table prices them
        specs = [s for c in method.predict(model, plan).ops if (s := method.spec_of(c.key))]
        row = {"plan": label, "plain_ms": round(first[i], 5), "plain_again_ms": round(second[i], 5)}
        row.update({f"{k}_ms": round(v[i], 5) for k, v in predictors.items()})
        row.update(features(plan, space, specs))
        rows.append(row)
    for row in rows:
        row["groups"] = groups(row, second[base])
    randoms = [r for r in rows if r["plan"].startswith("seed")]
    corners = [r for r in rows if not r["plan"].startswith("seed")]
    out: dict[str, Any] = {
        "model": name,
        "table": table_no,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "table_s": round(table_s, 1),
        "calibration": chosen,
        # the uncompressed model as the table measured it (each speed-up's numerator)
        "table_base_ms": round(bases["chain"], 5),
        "calibration_before": before,
        "cv_mape": cv,
        "ceiling": summary(
            [r["plain_again_ms"] for r in randoms], [r["plain_ms"] for r in randoms]
        ),
        "speedup_ceiling": summary(
            [second[base] / r["plain_again_ms"] for r in randoms],
            [first[base] / r["plain_ms"] for r in randoms],
        ),
        "rows": rows,
    }
    for row in rows:
        row["speedup"] = round(first[base] / row["plain_ms"], 4)
    for key in predictors:
        col = f"{key}_ms"
        speed_pred = [bases[key] / r[col] for r in randoms]
        speed_meas = [r["speedup"] for r in randoms]
        # the breakdown is of speed-up errors: a machine's change of speed between the
        # table and the loop moves every plan's ms alike, and no speed-up
        res = np.array([r["speedup"] / (bases[key] / r[col]) - 1 for r in rows])
        x = np.array(
            [
                [r["share_pruned"], r["share_int8"], r["boundaries"], r["share_odd_channels"], 1.0]
                for r in rows
            ]
        )
        coef, *_ = np.linalg.lstsq(x, res, rcond=None)
        by_group: dict[str, list[float]] = {}
        for r, e in zip(rows, res, strict=True):
            for g in r["groups"]:
                by_group.setdefault(g, []).append(float(e))
        out[key] = {
            "random": summary([r[col] for r in randoms], [r["plain_ms"] for r in randoms]),
            "corners_within_10pct": sum(abs(r[col] / r["plain_ms"] - 1) <= 0.10 for r in corners),
            "corner_speedups_within_10pct": sum(
                abs(r["speedup"] / (bases[key] / r[col]) - 1) <= 0.10 for r in corners
            ),
            "speedups": summary(speed_pred, speed_meas),
            "group_median_error": {
                g: round(statistics.median(v), 4) for g, v in sorted(by_group.items())
            },
            "residual_line": dict(
                zip(
                    ["share_pruned", "share_int8", "boundaries", "share_odd_channels", "const"],
                    (round(float(c), 4) for c in coef),
                    strict=True,
                )
            ),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "models", nargs="*", default=MODELS, help=f"torchvision models (default: {MODELS})"
    )
    parser.add_argument("--tables", type=int, default=3, help="fresh tables per model")
    parser.add_argument(
        "--first", type=int, default=1, help="number the tables from this (adds to a model's)"
    )
    parser.add_argument("--samples", type=int, default=20, help="seeded random plans")
    parser.add_argument("--json", type=Path, default=HERE / "report-logs" / "residuals.json")
    args = parser.parse_args()
    results = json.loads(args.json.read_text()) if args.json.exists() else {}
    for name in args.models:
        for t in range(args.first, args.first + args.tables):
            entry = run_table(name, args.samples, t)
            results[f"{name} #{t}"] = entry
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))
            print("\n".join(residuals_section({f"{name} #{t}": entry})), file=sys.stderr)
    print("\n".join(residuals_section(results)))


if __name__ == "__main__":
    main()
