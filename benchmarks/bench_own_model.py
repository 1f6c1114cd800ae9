"""A user's own model with the default rungs: does the search find compressed models?

Runs ``frontier search CONFIG`` (default ``benchmarks/own_model/mnasnet.yaml``; also
``mbv3.yaml`` and ``resnet18.yaml``) exactly as docs/tasks.md's "Your own model" says
(the task module on ``PYTHONPATH``, a fresh working directory, the user's baseline cache
and device store), keeps its stderr as ``search.log``, then reads the front back with
``frontier pareto --format json --all``. A working directory that already holds this
search is resumed instead (a finished one completes at once).

Writes ``benchmarks/report-logs/own-model-NAME.json`` (NAME: the config file's stem): the
baseline, the resolved accuracy bound, every front member (rung, accuracy, latency,
size; compressed or not), how many compressed members the full rung measured within the
bound, the promotion notes the search printed, the seconds from launch to the first
finished trial (the baseline cache warm: the user's own training is not Frontier's),
and the wall time.

Run: python benchmarks/bench_own_model.py [--config benchmarks/own_model/mbv3.yaml]
     [--workdir DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "own_model" / "mnasnet.yaml"


def _frontier(args: list[str], cwd: Path, log: Path | None = None) -> str:
    # the task module's folder first; a PYTHONPATH already set (an install elsewhere) stays
    path = [str(HERE / "own_model"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    cmd = [sys.executable, "-m", "frontier.search.cli", *args]
    err = log.open("a") if log else subprocess.PIPE
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    finally:
        if log:
            err.close()  # type: ignore[union-attr]
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}); see {log or 'stderr'}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    parser.add_argument("--json", type=Path, help="default: report-logs/own-model-NAME.json")
    args = parser.parse_args()
    config = args.config.resolve()
    args.json = args.json or HERE / "report-logs" / f"own-model-{config.stem}.json"
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="own-model-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "search.log"
    start, launched = time.perf_counter(), datetime.now()
    journal = workdir / "frontier-optuna.journal"
    resume = ["--resume"] if journal.exists() else []
    _frontier(["search", str(config), "--no-progress", *resume], workdir, log)
    wall_s = time.perf_counter() - start
    first_trial_s = None if resume else _first_trial_s(journal, launched)
    rows = json.loads(_frontier(["pareto", "--format", "json", "--all"], workdir))
    text = log.read_text()
    line = next(s for s in reversed(text.splitlines()) if "frontier: baseline (the uncomp" in s)
    baseline = dict(
        (k, float(v)) for k, v in (p.rsplit(" ", 1) for p in line.split(": ", 2)[2].split(", "))
    )
    bound_line = next(s for s in text.splitlines() if "frontier: constraint accuracy" in s)
    bound = float(bound_line.rsplit(">= ", 1)[1])
    size = baseline["size_bytes"]
    front = [
        {
            "trial": r["trial"],
            "rung": r["rung"],
            "accuracy": r["accuracy"],
            "latency_ms": r["latency_ms@local-cpu"],
            "size_bytes": r["size_bytes"],
            "compressed": r["size_bytes"] < 0.99 * size
            or r["latency_ms@local-cpu"] < 0.99 * baseline["latency_ms@local-cpu"],
        }
        for r in rows
        if r["pareto"]
    ]
    measured = [m for m in front if m["compressed"] and m["rung"] == "full"]
    report = {
        "config": str(config.relative_to(HERE.parent)),
        "baseline": baseline,
        "accuracy_bound": bound,
        "trials": len(rows),
        "front": front,
        "compressed_members": sum(m["compressed"] for m in front),
        "compressed_members_at_full_rung": len(measured),
        "target": "at least 3 compressed members within the accuracy bound",
        "met": len([m for m in front if m["compressed"] and m["accuracy"] >= bound]) >= 3,
        "promotion_notes": [s for s in text.splitlines() if "frontier: promotion:" in s],
        "date": launched.isoformat(timespec="minutes"),
        "first_trial_s": first_trial_s,
        # the user's own training of the baseline (a cold cache), inside first_trial_s
        "baseline_training_s": next(
            (float(m) for m in reversed(re.findall(r"epoch \d+/\d+ \((\d+) s\)", text))),
            0.0,
        ),
        "wall_s": wall_s,
        "workdir": str(workdir),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    keys = ("compressed_members", "met", "first_trial_s", "wall_s")
    print(json.dumps({k: report[k] for k in keys}))


def _first_trial_s(journal: Path, launched: datetime) -> float | None:
    """Seconds from launch to the first trial the study records as finished."""
    import optuna

    from frontier.search import open_storage

    storage = open_storage(str(journal))
    ends = [
        t.datetime_complete
        for s in optuna.get_all_study_summaries(storage)
        for t in optuna.load_study(study_name=s.study_name, storage=storage).trials
        if t.datetime_complete is not None and t.state.name == "COMPLETE"
    ]
    return (min(ends) - launched).total_seconds() if ends else None


if __name__ == "__main__":
    main()
