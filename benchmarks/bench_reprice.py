"""Were two scenario runs' fronts apart, or only their tables? Each logged run's
top-rung feasible trials priced again on one device table, and their hypervolumes
compared there.

A scenario's hypervolume normalises each trial's table latency by the baseline's on the
table the run measured, so two runs on two tables compare their tables as much as their
searches. This reads the ``scenarios.json`` row of a scenario as each given git revision
logged it (its ``candidates``: every top-rung feasible trial, with its plan and validation
accuracy), prices every plan and the uncompressed model on the one table the store holds
for the scenario's space (``TrialRunner``'s latency and size evaluators; nothing is
trained or timed), and computes the hypervolume as the search does (accuracy against the
teacher's validation accuracy, latency and size, where an objective, against the
baseline's).

Per run: the hypervolume as logged, recomputed from the logged figures (a check: it must
match), and priced on the one table; the median ratio of the re-priced to the logged
latency.

Run: python benchmarks/bench_reprice.py --scenario text-student --rev REV [--rev REV ...]
     [--json benchmarks/report-logs/reprice-text-student.json]
     (the table: $FRONTIER_DATA_DIR's device store; a space it has no bundle for is
     measured first, as a search would)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
LOG = "benchmarks/report-logs/scenarios.json"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=HERE.parent, check=True, capture_output=True, text=True
    ).stdout


def logged_row(rev: str, scenario: str) -> dict[str, Any]:
    """The scenario's row of ``scenarios.json`` as commit ``rev`` holds it."""
    for row in json.loads(_git("show", f"{rev}:{LOG}")):
        if row["scenario"] == scenario:
            return dict(row)
    raise SystemExit(f"{LOG} at {rev} has no {scenario!r} row")


def hypervolume_of(
    rows: list[tuple[float, float, float]], objectives: list[Any], base: list[float]
) -> float:
    from frontier.search import hypervolume

    if not rows:
        return 0.0
    return float(hypervolume(np.array(rows, dtype=float), objectives, base))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="text-student")
    parser.add_argument("--rev", action="append", required=True, help="a git revision")
    parser.add_argument("--json", help="default: report-logs/reprice-SCENARIO.json")
    args = parser.parse_args()

    from frontier.search import TrialRunner, load_config

    rows = {rev: logged_row(rev, args.scenario) for rev in args.rev}
    config = load_config(args.scenario)
    print(f"building {args.scenario}'s task and table ...", file=sys.stderr)
    runner = TrialRunner(config)
    objectives = runner.objectives()
    names = [o.name for o in objectives]
    latency = next(n for n in names if n.startswith("latency_ms"))
    if names[0] != "accuracy" or not set(names[1:]) <= {latency, "size_bytes"}:
        raise SystemExit(
            f"{args.scenario}: objectives {names}, expected accuracy, latency (and size)"
        )
    #: each objective's key in a logged row (a candidate's, the baseline's)
    logged_key = {"accuracy": "accuracy", latency: "latency_ms", "size_bytes": "size_bytes"}
    device = latency.split("@", 1)[1]
    estimate = runner.setup.latency[device].predict(runner.teacher, runner.plan({}))
    base_costs = runner.evaluate(runner.plan({}), 0, [latency, "size_bytes"]).values
    runs = []
    for rev, row in rows.items():
        logged = [tuple(c[logged_key[n]] for n in names) for c in row["candidates"]]
        b = row["baseline"]
        logged_base = [b.get("accuracy_val", b["accuracy"])]
        logged_base += [b[logged_key[n]] for n in names[1:]]
        priced, sizes = [], []
        for c in row["candidates"]:
            v = runner.evaluate(runner.plan(c["plan"]), 0, [latency, "size_bytes"]).values
            priced.append((c["accuracy"], *(v[n] for n in names[1:])))
            sizes.append((v["size_bytes"], c["size_bytes"]))
        base = [logged_base[0], *(base_costs[n] for n in names[1:])]
        at = names.index(latency)
        ratio = [p[at] / q[at] for p, q in zip(priced, logged, strict=True)]
        run = {
            "rev": rev,
            "logged": _git("log", "-1", "--format=%cI", rev).strip(),
            "note": (row.get("note") or "")[:120],
            "trials": row["trials"],
            "candidates": len(logged),
            "hypervolume_logged": row["hypervolume"],
            "hypervolume_recomputed": hypervolume_of(logged, objectives, logged_base),
            "hypervolume_one_table": hypervolume_of(priced, objectives, base),
            "baseline_latency_ms_logged": b["latency_ms"],
            "latency_one_table_vs_logged_median": float(np.median(ratio)) if ratio else None,
            "size_changed": any(abs(now - then) > 0.5 for now, then in sizes),
        }
        runs.append(run)
        print(
            f"{rev}: {run['candidates']} top-rung feasible trials; hypervolume logged "
            f"{run['hypervolume_logged']:.4f} (recomputed {run['hypervolume_recomputed']:.4f}), "
            f"on one table {run['hypervolume_one_table']:.4f}"
        )
    out = {
        "scenario": args.scenario,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "table": {
            "device": device,
            "bundle": estimate.bundle_id,
            "measured": runner.tables[device].bundle_meta(estimate.bundle_id).date,
            "baseline_latency_ms": base_costs[latency],
            # measured front members the table has learnt (``tracking.learn_front``),
            # every space's: a run's own front joins the table when it ends
            "learned_models": runner.tables[device].meta.get("learned_models", 0),
        },
        "runs": runs,
    }
    path = Path(args.json or HERE / "report-logs" / f"reprice-{args.scenario}.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
