"""A search under load: wall and CPU time of ``frontier search digits-mcu`` on a machine
other processes keep busy, at several torch thread counts per trial.

A shared machine is rarely idle. With more runnable threads than cores, every
parallel torch op of a trial ends in a barrier that waits for a thread the kernel has
descheduled: the trial's CPU time climbs while its wall time explodes. This runs the
same seeded search (fresh working directory, shared baseline cache and device store, so
only the search is timed) with ``backend.threads_per_trial`` at each value given, on an
idle machine and beside ``--load`` busy-looping processes, and writes
``benchmarks/report-logs/threads.json``.

Run: python benchmarks/bench_threads.py [--trials 40] [--load 6] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _busy() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` busy-looping processes beside the block (a machine others keep busy)."""
    procs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(count)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def _search(trials: int, threads: int, root: Path, env: dict[str, str]) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(dir=root))
    cmd = [
        sys.executable,
        "-m",
        "frontier.search.cli",
        "search",
        "digits-mcu",
        "--trials",
        str(trials),
        "--no-progress",
        "--set",
        f"backend.threads_per_trial={threads}",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--load", type=int, default=6, help="busy processes beside it")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="benchmarks/report-logs/threads.json")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="frontier-bench-threads-"))
    env = {
        **os.environ,
        "FRONTIER_CACHE_DIR": str(root / "cache"),
        "FRONTIER_DATA_DIR": str(root / "data"),
    }
    # warm-up: trains the baseline and measures the local-cpu table once, untimed
    _search(2, 1, root, env)
    rows = []
    for load in (0, args.load):
        with busy_processes(load):
            for threads in args.threads:
                row = {
                    "load": load,
                    "threads_per_trial": threads,
                    **_search(args.trials, threads, root, env),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = {
        "trials": args.trials,
        "cores": os.cpu_count(),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
