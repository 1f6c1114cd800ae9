"""The built-in scenarios at their default budgets, each answered as its question asks:
search, pick the front member the question wants, measure it again.

For each scenario: run the search in a fresh working directory (the baseline cache and
the device store are the user's, so trained baselines and measured tables are reused;
the first run pays for them and the wall time says so); pick the most accurate
complete, feasible trial at the highest rung (ties: the lowest latency), or what the
question asks for instead (``PICK``: for ``text-student`` the lowest table latency x
size, the smallest, fastest student; for ``efficientnet-lite0-cpu`` the fastest within
its 1-point constraint); take its ONNX
from MLflow (or export it again, seeded, when it is not a front member); measure its
accuracy with ONNX Runtime on the split its rung scored and its latency beside the FP32
model's, one thread, batch 1, both timed in the same run.

Writes ``benchmarks/report-logs/scenarios.json``: a list of objects, one per scenario
(a rerun replaces that scenario's object, the others stay), with ``scenario``,
``accuracy_kind`` ("real" or "proxy"), ``baseline`` and ``picked`` (``accuracy``,
``macs``, ``size_bytes``, ``latency_ms``; ``picked`` also ``latency_measured_ms``;
``baseline`` ``latency_measured_ms`` too; ``text-student`` also ``teacher_accuracy``),
the targets and whether they were met, ``rungs``: per rung, the complete and feasible
trials that ended there, ``candidates``: every top-rung feasible trial
with its figures and plan, ``time_s``: the search's own accounting (evaluation,
sampler proposals in all and their median, job exports, sensitivity, the whole loop),
and, where the question asks for the fast or small end, ``promotion_coverage``: every
trial cheaper than the pick by the question's cost, its first-rung accuracy and whether
promotion measured it higher (did the top rung see that end of the front?).

Run: python benchmarks/bench_scenarios.py [--scenarios NAME ...]   (default: mobilenetv2-flops40
     resnet50-edge text-student efficientnet-lite0-cpu)
     [--set KEY=VALUE ...] [--json benchmarks/report-logs/scenarios.json]
     [--work DIR [--resume]]   (keep each scenario's folder, DIR/NAME; --resume continues
     the stopped search in DIR, one scenario, as ``frontier search --resume`` would)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent

#: scenario -> its targets, as (what, check on the scenario's row)
TARGETS: dict[str, list[tuple[str, Any]]] = {
    "mobilenetv2-flops40": [
        ("MACs <= 60% of baseline", lambda b, p: p["macs"] <= 0.6 * b["macs"]),
        ("accuracy loss <= 1.0 point", lambda b, p: b["accuracy"] - p["accuracy"] <= 0.010),
        (
            "measured latency >= 1.3x faster",
            lambda b, p: b["latency_measured_ms"] >= 1.3 * p["latency_measured_ms"],
        ),
    ],
    "resnet50-edge": [
        ("size <= 50% of baseline", lambda b, p: p["size_bytes"] <= 0.5 * b["size_bytes"]),
        (
            "measured latency <= 70% of baseline",
            lambda b, p: p["latency_measured_ms"] <= 0.7 * b["latency_measured_ms"],
        ),
        ("accuracy loss < 2 points", lambda b, p: b["accuracy"] - p["accuracy"] < 0.020),
    ],
    "text-student": [
        ("accuracy >= 95% of the teacher's", lambda b, p: p["accuracy"] >= 0.95 * b["accuracy"]),
        (
            "measured latency >= 3x lower",
            lambda b, p: b["latency_measured_ms"] >= 3 * p["latency_measured_ms"],
        ),
        ("size >= 4x smaller", lambda b, p: b["size_bytes"] >= 4 * p["size_bytes"]),
    ],
    "efficientnet-lite0-cpu": [
        ("accuracy loss <= 1.0 point", lambda b, p: b["accuracy"] - p["accuracy"] <= 0.010),
        (
            "measured latency >= 1.3x faster",
            lambda b, p: b["latency_measured_ms"] >= 1.3 * p["latency_measured_ms"],
        ),
    ],
}

#: what each scenario's question asks for among the feasible members, when not the
#: most accurate: "latency" (the fastest by the table) or "latency x size" (the
#: smallest, fastest: the best speed-up times shrink over the baseline, both counted
#: alike)
PICK = {"text-student": "latency x size", "efficientnet-lite0-cpu": "latency"}
#: scenarios whose accuracy is judged against the teacher's (reported as such)
RELATIVE = {"text-student"}


RUNGS = ["proxy", "short", "full"]


def _latency_key(frame: Any) -> str:
    return next(c for c in frame.columns if c.startswith("latency_ms@"))


def pick(trials: Any, rule: str = "accuracy") -> Any:
    """The complete, feasible trial at the highest rung reached that ``rule`` asks for:
    the most accurate ("accuracy"; ties: the lowest latency), the fastest by the table
    ("latency"; ties: the more accurate) or the lowest table latency x size ("latency x
    size"; ties: the faster); None when no trial qualifies.

    The product weighs a 2x speed-up and a 2x shrink alike, so neither objective wins
    alone: the fastest member with FP32 embeddings loses to one 30% slower and 3x
    smaller."""
    top = top_rung(trials)
    if top is None:
        return None
    key = _latency_key(top)
    if rule == "latency x size":
        order = top.assign(_cost=top[key] * top.size_bytes).sort_values(["_cost", key])
    elif rule == "latency":
        order = top.sort_values([key, "accuracy"], ascending=[True, False])
    else:
        order = top.sort_values(["accuracy", key], ascending=[False, True])
    return order.iloc[0]


def top_rung(trials: Any) -> Any:
    """The complete, feasible trials at the highest rung any of them reached (None when
    there is none)."""
    pool = trials[(trials.state == "complete") & trials.feasible]
    if pool.empty:
        return None
    highest = max(pool.rung, key=RUNGS.index)
    return pool[pool.rung == highest]


def rung_counts(trials: Any) -> dict[str, dict[str, int]]:
    """How far the trials went: per rung, how many complete trials ended there and how
    many of those were feasible (a scenario with one feasible member at the top rung
    says its front is thin there)."""
    done = trials[trials.state == "complete"]
    return {
        str(rung): {"complete": len(g), "feasible": int(g.feasible.sum())}
        for rung, g in sorted(done.groupby("rung"), key=lambda kv: RUNGS.index(kv[0]))
    }


def promotion_coverage(result: Any, config: Any, rule: str, latency: str) -> dict[str, Any]:
    """Did the top rung see the end of the front the question asks for? The table's
    cost of a plan (latency, or latency x size) is the same at every rung; only accuracy
    moves. So every trial cheaper than the pick by the question's cost is listed with
    its first-rung accuracy, whether it went up a rung and what it scored there: a
    cheaper plan that never went up, with a first-rung accuracy as close to the bound
    as the pick's was, is a chance the promotion left unmeasured. (For "the most
    accurate", the end is accuracy itself, which promotion follows by design.)"""
    if rule == "accuracy":
        return {}
    base = result.study.user_attrs["frontier.baseline"]
    bounds = [c.resolve(base) for c in config.parsed_constraints() if c.objective == "accuracy"]

    def cost(v: dict[str, float]) -> float:
        return v[latency] * (v["size_bytes"] if rule == "latency x size" else 1.0)

    rows = []
    for t in result.study.trials:
        first = t.user_attrs.get("values")
        if t.state.name != "COMPLETE" or not first or latency not in first:
            continue
        above = result.study.user_attrs.get(f"frontier.rungs.{t.number}", {})
        top = above[max(above, key=int)] if above else None
        rows.append(
            {
                "trial": t.number,
                "cost": cost(first),
                "accuracy_first_rung": first.get("accuracy"),
                "accuracy_top_rung": None if top is None else top.get("accuracy"),
                "went_up": top is not None,
                "gap_first_rung": min(
                    (-c.violation(first["accuracy"]) for c in bounds), default=None
                ),
            }
        )
    chosen = pick(result.trials, rule)
    if chosen is None or not rows:
        return {"trials": len(rows)}
    mine = next(r for r in rows if r["trial"] == int(chosen.trial))
    cheaper = sorted((r for r in rows if r["cost"] < mine["cost"]), key=lambda r: r["cost"])
    gap = mine["gap_first_rung"]
    return {
        "by": rule,
        "pick_gap_first_rung": gap,
        "cheaper_than_pick": len(cheaper),
        "cheaper_went_up": sum(r["went_up"] for r in cheaper),
        "cheaper_left_below_as_close_as_pick": sum(
            not r["went_up"] and gap is not None and r["gap_first_rung"] >= gap for r in cheaper
        ),
        "cheaper_left_below_within_2_points": sum(
            not r["went_up"] and r["gap_first_rung"] is not None and r["gap_first_rung"] >= -0.02
            for r in cheaper
        ),
        "cheaper": cheaper[:20],
    }


def candidates(result: Any, latency: str) -> list[dict[str, Any]]:
    """What the pick chose from, kept with the figures (the study's directory is
    temporary): each top-rung feasible trial's accuracy, table latency, size and plan,
    so any of them can be distilled and measured again (``bench_distill.py --plan``)."""
    top = top_rung(result.trials)
    if top is None:
        return []
    return [
        {
            "trial": int(r.trial),
            "rung": r.rung,
            "accuracy": float(r.accuracy),
            "latency_ms": float(r[latency]),
            "size_bytes": float(r.size_bytes) if "size_bytes" in r else None,
            "plan": result.study.trials[int(r.trial)].user_attrs["plan"],
        }
        for _, r in top.sort_values(latency).iterrows()
    ]


def onnx_accuracy(path: Path, x: Any, y: Any) -> float:
    """Top-1 accuracy of an ONNX model over (x, y), one image at a time."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    preds = [
        int(np.argmax(session.run(None, {name: x[i : i + 1].numpy()})[0])) for i in range(len(x))
    ]
    return float(np.mean(np.array(preds) == y.numpy()))


def measure_side_by_side(paths: list[Path], store: Any, device: str) -> list[float]:
    """Whole-model latency (ms) of each ONNX file, measured side by side on a ``local-cpu``
    device's threads by the timing protocol."""
    from frontier.latency_models import LocalDevice, local_device, measure_models

    return list(measure_models(paths, device=local_device(device) or LocalDevice(device)))


@contextlib.contextmanager
def in_folder(work: Path) -> Any:
    """Run a scenario's search in ``work``: its study, MLflow store and models land
    there, and what reads them back (``mlflow.db`` by a relative URI) finds them."""
    cwd = Path.cwd()
    os.chdir(work)
    try:
        yield work
    finally:
        os.chdir(cwd)


def run_scenario(
    name: str, overrides: dict[str, Any], work: Path, resume: bool = False
) -> dict[str, Any]:
    from frontier.search import TrialRunner, front_frame, load_config, run
    from frontier.search.cli import main as cli
    from frontier.spaces import CompressionPlan, export_onnx

    config = load_config(name).override(overrides)
    start = time.perf_counter()
    with in_folder(work):
        result = run(config, progress=False, resume=resume)
        search_s = time.perf_counter() - start
        evaluation = TrialRunner(config)
        latency = next(m for m in config.metric_names() if m.startswith("latency_ms@"))
        device = latency.partition("@")[2]
        trained = list(evaluation.rungs) != ["proxy"]
        base = dict(result.study.user_attrs.get("frontier.baseline", {}))
        rule = PICK.get(name, "accuracy")
        row = pick(result.trials, rule)
        out: dict[str, Any] = {
            "scenario": name,
            "accuracy_kind": "real" if trained else "proxy",
            "overrides": overrides,
            "trials": len(result.trials),
            "failed": int((result.trials.state == "failed").sum()),
            "search_s": round(search_s, 1),
            "hypervolume": result.hypervolume,
            "rungs": rung_counts(result.trials),
        }
        with contextlib.suppress(Exception):  # where the time went, from the parent run
            metrics = _parent(result).data.metrics
            out["time_s"] = {k: round(v, 1) for k, v in sorted(metrics.items()) if k.endswith("_s")}
        teacher_path = work / "baseline.onnx"
        export_onnx(evaluation.teacher, CompressionPlan(), evaluation.example, teacher_path)
        splits = evaluation.task.splits() if hasattr(evaluation.task, "splits") else None
        baseline = {
            "accuracy": base.get("accuracy"),
            "accuracy_val": base.get("accuracy"),  # what the search compared plans with
            "macs": base.get("macs"),
            "size_bytes": base.get("size_bytes"),
            "latency_ms": base.get(latency),
        }
        if splits is not None and trained:
            baseline["accuracy_split"] = "test"
            baseline["accuracy"] = baseline["accuracy_test"] = onnx_accuracy(
                teacher_path, *splits["test"]
            )
            if name in RELATIVE:  # the question is relative to the teacher's accuracy
                out["teacher_accuracy"] = baseline["accuracy"]
        if row is None:
            out["baseline"] = baseline
            out["picked"] = None
            out["note"] = "no complete, feasible trial"
            return out
        plan = result.study.trials[int(row.trial)].user_attrs["plan"]
        rung_index = evaluation.rungs.index(row.rung)
        picked_path = work / "picked.onnx"
        try:  # a front member's ONNX is in MLflow
            members = front_frame("sqlite:///mlflow.db", _parent(result), members_only=False)
            run_id = str(members[members.trial == int(row.trial)].run_id.iloc[0])
            with contextlib.redirect_stdout(io.StringIO()):
                cli(["pick", run_id, "--export", str(picked_path)])
            source = "mlflow"
        except Exception:
            evaluation.export(plan, rung_index, picked_path)
            source = "exported again"
        measured = measure_side_by_side([teacher_path, picked_path], config.device_store, device)
        baseline["latency_measured_ms"] = measured[0]
        # and as a user checks a number: a plain ONNX Runtime loop (bench_latency_trust)
        from bench_latency_trust import plain_loop_ms

        baseline["latency_plain_loop_ms"] = plain_loop_ms(teacher_path)
        picked = {
            "trial": int(row.trial),
            "rung": row.rung,
            # the validation accuracy the search chose it by; "accuracy" becomes the test
            # split's below where the task has one (reported, never used to choose)
            "accuracy": float(row.accuracy),
            "accuracy_val": float(row.accuracy),
            "accuracy_split": "val",
            "macs": float(row.macs) if "macs" in row else None,
            "size_bytes": float(row.size_bytes) if "size_bytes" in row else None,
            "latency_ms": float(row[latency]),
            "latency_measured_ms": measured[1],
            "latency_plain_loop_ms": plain_loop_ms(picked_path),
            "onnx_from": source,
            "plan": plan,
        }
        if splits is not None and trained:
            picked["onnx_accuracy_val"] = onnx_accuracy(picked_path, *splits["val"])
            picked["accuracy"] = picked["accuracy_test"] = onnx_accuracy(
                picked_path, *splits["test"]
            )
            picked["accuracy_split"] = "test"
        out["baseline"], out["picked"] = baseline, picked
        out["candidates"] = candidates(result, latency)
        with contextlib.suppress(Exception):  # evidence for the report, never the run's end
            out["promotion_coverage"] = promotion_coverage(result, config, rule, latency)
        out["pick_rule"] = {
            "accuracy": "the most accurate",
            "latency": "the fastest by the table",
            "latency x size": "the lowest table latency x size",
        }[rule]
        out["targets"] = {
            what: bool(check(baseline, picked)) for what, check in TARGETS.get(name, [])
        }
        return out
        print(f"[bench_scenarios] {name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)


def _parent(result: Any) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri="sqlite:///mlflow.db").get_run(result.mlflow_run_id)


def merge(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``path``'s rows with these rows' scenarios replaced (order kept, new ones last)."""
    old = json.loads(path.read_text()) if path.exists() else []
    fresh = {r["scenario"]: r for r in rows}
    merged = [fresh.pop(r["scenario"], r) for r in old]
    return merged + list(fresh.values())


def main() -> None:
    from frontier.search import parse_overrides as _settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["mobilenetv2-flops40", "resnet50-edge", "text-student", "efficientnet-lite0-cpu"],
    )
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--json", default=str(HERE / "report-logs" / "scenarios.json"))
    parser.add_argument(
        "--work",
        help="run in this folder and keep it (its study, MLflow store), not a temporary one",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the study in --work (a run stopped part way); search_s and wall_s "
        "are then this part's alone",
    )
    args = parser.parse_args()
    if args.resume and (not args.work or len(args.scenarios) != 1):
        parser.error("--resume needs --work and one scenario")
    overrides = _settings(args.set)
    out = Path(args.json)
    for name in args.scenarios:
        with contextlib.ExitStack() as stack:
            if args.work:
                work = Path(args.work) / ("" if args.resume else name)
                work.mkdir(parents=True, exist_ok=True)
            else:
                tmp = tempfile.TemporaryDirectory(prefix=f"frontier-{name}-")
                work = Path(stack.enter_context(tmp))
            start = time.perf_counter()
            row = run_scenario(name, overrides, work, resume=args.resume)
            row["wall_s"] = round(time.perf_counter() - start, 1)
            if args.resume:
                row["resumed"] = True
        print(json.dumps(row, default=str)[:2000], flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(merge(out, [row]), indent=2, default=str) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
