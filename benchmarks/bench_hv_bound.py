"""The largest hypervolume any front of a task's space can reach, against what the search
methods reached (``search.json``).

A search's hypervolume is measured on losses normalised by the uncompressed baseline
(``search.front._pareto.normalise``: accuracy as ``1 - accuracy / baseline``, costs as
``cost / baseline``) against the reference 1.1 on every axis. No plan can beat the
space's utopia point: the teacher's accuracy (loss 0) with the lowest latency and size
any plan of the space has. Those come from ``--plan``, the space's most compressed plan
(written by hand: every choice at its cheapest), priced as the search prices it (the
stored device table, the size counter). The utopia's hypervolume bounds every front's,
so it bounds the ratio a method can reach against another's median. As a check that
``--plan`` is the cheapest, ``--samples`` seeded random plans of the space are priced
on each latency objective: none should be faster.

Writes ``benchmarks/report-logs/hv-bound-TASK.json``.

Run: python benchmarks/bench_hv_bound.py TASK --plan PLAN.json
     [--search-json benchmarks/report-logs/search.json]
     (text-student: --plan benchmarks/configs/text-student-most-compressed.json)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    from frontier.latency_models import DeviceStore, LatencyModel
    from frontier.search import (
        REFERENCE,
        load_config,
        loss_hypervolume,
        plan_latency,
        task_and_space,
    )
    from frontier.spaces import CompressionPlan, apply_plan, model_cost

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("task", help="a task of search.json (a built-in scenario)")
    parser.add_argument("--plan", required=True, help="the space's most compressed plan (JSON)")
    parser.add_argument("--search-json", default=str(HERE / "report-logs" / "search.json"))
    parser.add_argument("--samples", type=int, default=500, help="random plans priced as a check")
    parser.add_argument("--json", help="default: report-logs/hv-bound-TASK.json")
    args = parser.parse_args()

    tasks = json.loads(Path(args.search_json).read_text())["tasks"]
    entry = next((t for t in tasks if t["task"] == args.task), None)
    if entry is None:
        raise SystemExit(f"{args.search_json}: no task {args.task!r}")
    config = load_config(args.task).override(entry["overrides"])
    task, model, space = task_and_space(config)
    plan = CompressionPlan.load(args.plan, space=space)
    example = task.example_inputs()
    compressed = apply_plan(model, plan, example, calibration_data=task.calibration_batches())
    base_cost = model_cost(model, CompressionPlan(), example)
    cost = model_cost(compressed, plan, example)
    priced = plan_latency(config, model, example, space, plan)
    ratios: dict[str, float] = {}
    sampled: dict[str, float] = {}
    for name in config.metric_names():
        if name == "accuracy":
            continue
        if name.startswith("latency_ms@"):
            device = name.split("@", 1)[1]
            if not isinstance(priced.get(device), dict):
                raise SystemExit(f"{name}: {priced.get(device, 'no table')}")
            p = priced[device]
            ratios[name] = p["compressed_ms"] / p["baseline_ms"]
            lm = LatencyModel(DeviceStore(config.device_store).load(device))
            lm.bind(model, example, space)
            sampled[name] = min(
                lm.predict(model, space.sample(seed)).latency_ms / p["baseline_ms"]
                for seed in range(args.samples)
            )
        elif name in ("size_bytes", "macs"):
            ratios[name] = getattr(cost, name) / getattr(base_cost, name)
        else:
            raise SystemExit(f"{name}: no bound for this objective")
    import numpy as np

    utopia = np.array([[0.0, *ratios.values()]])
    bound = loss_hypervolume(utopia, REFERENCE)
    medians = entry["median"]
    out = {
        "task": args.task,
        "plan": args.plan,
        "cost_ratios": {k: round(v, 4) for k, v in ratios.items()},
        "random_plans": args.samples,
        "random_plans_lowest_ratio": {k: round(v, 4) for k, v in sampled.items()},
        "reference": REFERENCE,
        "hv_bound": round(bound, 4),
        "hv_box": round(REFERENCE ** (1 + len(ratios)), 4),
        "median_hv": {k: round(v, 4) for k, v in medians.items()},
        "share_of_bound": {k: round(v / bound, 3) for k, v in medians.items()},
        "bound_over_random@60": round(bound / medians["random@60"], 3)
        if "random@60" in medians
        else None,
    }
    print(json.dumps(out, indent=1))
    path = Path(args.json or HERE / "report-logs" / f"hv-bound-{args.task}.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
