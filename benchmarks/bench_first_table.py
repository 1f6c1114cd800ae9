"""A user's own model: how long from `frontier search` to the first finished trial?

Runs ``frontier search CONFIG`` as the README's "Your own model" says (the task module on
``PYTHONPATH``) with a fresh device store, so the search measures its ``local-cpu``
table first, and the baseline cache given (``--cache``: a user's trained model is
usually there already; a fresh folder trains it in the run). It watches the study
journal, stops the search (SIGINT, as Ctrl-C) once the first trial has finished, and
records the wall time to that moment beside what the search printed on its way (ops,
calibration models, the progress lines), each line stamped with the seconds since launch.

Writes one entry per config into ``benchmarks/report-logs/first-table.json``.

Run: python benchmarks/bench_first_table.py [--config benchmarks/own_model/mnasnet.yaml]
     [--pythonpath benchmarks/own_model] [--cache DIR] [--set FIELD=VALUE ...]
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
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def first_trial_s(journal: Path, started: float, proc: subprocess.Popen[str]) -> float | None:
    """Seconds from ``started`` until the journal holds a finished trial (None if the
    search ended first)."""
    from frontier.search import journal_completions

    while proc.poll() is None:
        if journal_completions(journal):
            return time.perf_counter() - started
        time.sleep(1.0)
    return None


#: the lines kept from what the search printed (and every "... models:" progress line)
SAID = ("measuring", "calibration:", "frontier: baseline", "epoch", "table.csv:", "frontier: study")


def _stamp(proc: subprocess.Popen[str], started: float, lines: list[str]) -> None:
    """Each line ``proc`` prints to stderr, as ``[SECONDS s] line`` from ``started``."""
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(f"[{time.perf_counter() - started:.0f} s] {line.rstrip()}")


def run(config: Path, pythonpath: Path, cache: Path, overrides: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="frontier-first-table-") as tmp:
        work = Path(tmp)
        env = {
            **os.environ,
            "PYTHONPATH": str(pythonpath),
            "FRONTIER_DATA_DIR": str(work / "data"),  # a fresh device store
            "FRONTIER_CACHE_DIR": str(cache),
        }
        sets = [a for o in overrides for a in ("--set", o)]
        cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(config), *sets]
        started = time.perf_counter()
        proc = subprocess.Popen(
            [*cmd, "--no-progress"], cwd=work, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines: list[str] = []  # each stamped with the seconds since launch
        reader = threading.Thread(target=_stamp, args=(proc, started, lines), daemon=True)
        reader.start()
        try:
            took = first_trial_s(work / "frontier-optuna.journal", started, proc)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
            reader.join(timeout=10)
    said = [line for line in lines if line.split("] ", 1)[-1].startswith(SAID) or "models:" in line]
    if took is None:  # the search ended before a trial: what it said last says why
        said += [line for line in lines[-5:] if line not in said]
        print("\n".join(lines[-5:]), file=sys.stderr)
    return {
        "config": str(config.relative_to(HERE.parent))
        if config.is_relative_to(HERE.parent)
        else str(config),
        "overrides": overrides,
        "first_trial_s": None if took is None else round(took, 1),
        "said": said[-16:],
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=HERE / "own_model" / "mnasnet.yaml")
    parser.add_argument("--pythonpath", type=Path, default=HERE / "own_model")
    parser.add_argument(
        "--cache", type=Path, help="the baseline cache (default: a fresh one: trains it)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--label", help="the entry's name (default: the config's stem)")
    parser.add_argument("--json", type=Path, default=HERE / "report-logs" / "first-table.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frontier-cache-") as fresh:
        cache = args.cache or Path(fresh)
        result = run(args.config.resolve(), args.pythonpath.resolve(), cache, args.set)
    if result["first_trial_s"] is None:  # ``run`` printed what the search said last
        sys.exit(f"the search ended before its first trial; {args.json} is left as it was")
    result["cache"] = "given" if args.cache else "fresh (the baseline trained in the run)"
    results = json.loads(args.json.read_text()) if args.json.exists() else {}
    results[args.label or args.config.stem] = result
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
