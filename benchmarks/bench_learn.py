"""Does a table that learnt one search's measured front predict the next search's better?

Issue "measured fronts", item 1: the front measured at the end of a search joins the
device table's calibration (``tracking.learn_front``). This measures what that changes.

For each seed, ``frontier search CONFIG --seed S --trials N --no-learn`` runs in a folder
of its own against one fresh device store (so every search prices with the same,
fixed ``local-cpu`` table, measured by the first one), and its front is measured at the
end by the timing protocol (``latency_measured_ms@local-cpu``). Then, offline, for each
ordered pair of searches (A, B): a copy of the table learns A's measured front
(``latency_models.learn``), and both tables predict B's front members; the error
against B's measurements, before and after, and the table's cross-validated error
before and after. "A = B" rows show the in-sample effect (a table predicting the very
models it learnt).

Run: python benchmarks/bench_learn.py [--config multi-device] [--seeds 0 1 2] [--trials 60]
     [--work DIR] [--json benchmarks/report-logs/learn.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEVICE = "local-cpu"


def _search(config: str, seed: int, trials: int, folder: Path, data: Path) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    cli = Path(sys.executable).with_name("frontier")
    env = {**os.environ, "FRONTIER_DATA_DIR": str(data)}
    args = [str(cli), "search", config, "--seed", str(seed), "--trials", str(trials)]
    t0 = time.perf_counter()
    subprocess.run([*args, "--no-learn", "--no-progress"], cwd=folder, env=env, check=True)
    return time.perf_counter() - t0


def _front(folder: Path) -> list[dict[str, Any]]:
    """Each front member's plan, predicted and measured latency."""
    import mlflow

    from frontier.search import query_front

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    _, frame = query_front(uri)
    mlflow.set_tracking_uri(uri)
    out = []
    for _, row in frame.iterrows():
        measured = row.get(f"latency_measured_ms@{DEVICE}")
        if measured is None or measured != measured:
            continue
        plan = mlflow.artifacts.load_text(f"runs:/{row['run_id']}/plan.json")
        out.append(
            {
                "trial": int(row["trial"]),
                "plan": json.loads(plan),
                "predicted_ms": float(row[f"latency_ms@{DEVICE}"]),
                "measured_ms": float(measured),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="multi-device")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--work", help="keep the searches and the store here")
    parser.add_argument("--json", default=str(HERE / "report-logs" / "learn.json"))
    args = parser.parse_args()

    from frontier.latency_models import DeviceStore, LatencyModel, error_summary, learn
    from frontier.search import load_config, plan_entries

    work = Path(args.work or tempfile.mkdtemp(prefix="frontier-learn-"))
    data = work / "data"
    seconds, fronts = {}, {}
    for seed in args.seeds:
        folder = work / f"seed{seed}"
        if not (folder / "mlflow.db").exists():
            seconds[seed] = round(_search(args.config, seed, args.trials, folder, data), 1)
        fronts[seed] = _front(folder)
        print(f"seed {seed}: {len(fronts[seed])} front members measured", flush=True)
    config = load_config(args.config)
    store = DeviceStore(data)
    base = LatencyModel(store.load(DEVICE))
    entries = {}
    for seed, members in fronts.items():
        found = plan_entries(config, {str(m["trial"]): m["plan"] for m in members})
        entries[seed] = [{**found[str(m["trial"])], "median_ms": m["measured_ms"]} for m in members]

    def predict(lm: LatencyModel, seed: int) -> list[float]:
        return [
            lm.predict_ops([lm.spec_of(k) for k in e["op_keys"]]).latency_ms for e in entries[seed]
        ]

    rows = []
    for a in args.seeds:
        copy = Path(tempfile.mkdtemp(prefix="frontier-learnt-"))
        shutil.copytree(data / "devices", copy / "devices")
        learnt_store = DeviceStore(copy)
        got = learn(learnt_store, DEVICE, entries[a])
        learnt = LatencyModel(learnt_store.load(DEVICE))
        for b in args.seeds:
            measured = [e["median_ms"] for e in entries[b]]
            rows.append(
                {
                    "learnt_from": a,
                    "predicting": b,
                    "members": len(measured),
                    "before": error_summary(predict(base, b), measured),
                    "after": error_summary(predict(learnt, b), measured),
                    "cv_mape_before": got.cv_mape_before,
                    "cv_mape_after": got.cv_mape_after,
                    "calibration_models_after": got.calibration_models,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        shutil.rmtree(copy, ignore_errors=True)
    out = {
        "config": args.config,
        "trials": args.trials,
        "seeds": args.seeds,
        "search_s": seconds,
        "calibration_models_before": len(base.table.whole_models("calibration")),
        "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
