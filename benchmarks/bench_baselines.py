"""The Fashion-MNIST baselines: train each model of the ``fashion-mnist`` task with its
default recipe (or load it from the cache) and record test accuracy and training time.

Targets (issue "Real workloads"): test accuracy >= 92% each, training <= 20 minutes each
on this 2-core CPU. Writes ``benchmarks/report-logs/baselines.json``; the trained models
land in the baseline cache (``$FRONTIER_CACHE_DIR``), where searches find them.

Run: python benchmarks/bench_baselines.py [--models mobilenet_v2 resnet18 resnet50]
     [--epochs N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    from frontier.experiments import build_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2", "resnet18", "resnet50"])
    parser.add_argument("--epochs", type=int, help="override the recipe's epochs")
    parser.add_argument("--out", default="benchmarks/report-logs/baselines.json")
    args = parser.parse_args()
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.exists() else {}
    for name in args.models:
        options = {"model": name, **({"epochs": args.epochs} if args.epochs else {})}
        task = build_task("fashion-mnist", **options)
        task.baseline()
        figures = json.loads(task.cache_path().with_suffix(".json").read_text())
        rows[name] = figures
        print(json.dumps({name: figures}), flush=True)
        out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
