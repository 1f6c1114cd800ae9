"""A baseline the search trains: seconds a training step at one thread against the
threads the driver now gives it (the cores its trials will share).

A search trains its task's baseline in the driver, before any trial, when the cache is
cold: on a newcomer's first run of ``resnet50-edge`` that is the longest step. This
builds a Fashion-MNIST scenario's untrained model and times training steps as the
baseline's recipe runs them (SGD with Nesterov momentum, channels-last, the recipe's
batch size, real training images), at 1 thread and at the driver's threads in turn,
``--repeats`` times each, on an idle machine and beside ``--load`` busy-looping
processes. Writes ``benchmarks/report-logs/baseline-threads.json``.

Run: python benchmarks/bench_baseline_threads.py [--scenario resnet50-edge ...]
     [--steps 4] [--repeats 3] [--load 2]  (default: resnet50-edge and mobilenetv2-flops40)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_threads import busy_processes

HERE = Path(__file__).resolve().parent


def _step_s(model: Any, opt: Any, x: Any, y: Any, steps: int) -> float:
    from torch import nn

    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def measure(model: Any, x: Any, y: Any, counts: list[int], steps: int, repeats: int) -> dict:
    """Seconds a step at each thread count, alternated ``repeats`` times (medians)."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
    _step_s(model, opt, x, y, 1)  # warm up allocators and kernels
    seen: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(repeats):
        for n in counts:
            torch.set_num_threads(n)
            seen[n].append(_step_s(model, opt, x, y, steps))
    return {
        str(n): {
            "step_s_median": round(statistics.median(v), 3),
            "step_s": [round(s, 3) for s in v],
        }
        for n, v in seen.items()
    }


def scenario(name: str, steps: int, repeats: int, load: int) -> dict[str, Any]:
    """One scenario's baseline model, timed idle and beside ``load`` busy processes."""
    import torch

    from frontier.experiments import build_task
    from frontier.search import load_config, search_threads

    config = load_config(name)
    driver = search_threads(config)
    if driver is None or driver == 1:
        raise SystemExit(
            f"{name}: the driver trains on {driver} thread(s) here; nothing to compare"
        )
    task = build_task(config.task.name, **config.task.options)
    model = task.untrained().to(memory_format=torch.channels_last)
    x, y = task.splits()["train"]
    batch = task.recipe.batch_size
    counts = [1, driver]
    print(
        f"{name}: {type(model).__name__}, batch {batch} of {tuple(x.shape[1:])}, "
        f"{steps} steps per timing, threads {counts}",
        file=sys.stderr,
    )
    out: dict[str, Any] = {
        "scenario": name,
        "batch": batch,
        "steps_per_baseline": task.recipe.epochs * -(-len(x) // batch),
        "driver_threads": driver,
    }
    x, y = x[:batch].contiguous(memory_format=torch.channels_last), y[:batch]
    out["idle"] = measure(model, x, y, counts, steps, repeats)
    print(f"idle: {out['idle']}", file=sys.stderr)
    if load:
        with busy_processes(load):
            out[f"beside_{load}_busy"] = measure(model, x, y, counts, steps, repeats)
        print(f"beside {load} busy: {out[f'beside_{load}_busy']}", file=sys.stderr)
    idle = out["idle"]
    ratio = idle["1"]["step_s_median"] / idle[str(driver)]["step_s_median"]
    out["idle_speedup"] = round(ratio, 2)
    out["baseline_minutes_idle"] = {
        n: round(v["step_s_median"] * out["steps_per_baseline"] / 60, 1) for n, v in idle.items()
    }
    print(f"{name} idle: {driver} threads {ratio:.2f}x faster a step than 1")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="repeatable")
    parser.add_argument("--steps", type=int, default=4, help="training steps per timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=int, default=2, help="busy processes beside it")
    parser.add_argument("--json", default=str(HERE / "report-logs" / "baseline-threads.json"))
    args = parser.parse_args()
    names = args.scenario or ["resnet50-edge", "mobilenetv2-flops40"]
    out = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip(),
        "steps_per_timing": args.steps,
        "repeats": args.repeats,
        "runs": [scenario(n, args.steps, args.repeats, args.load) for n in names],
    }
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
