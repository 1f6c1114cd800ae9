"""The latency table at the corners of a space: uniform plans predicted and measured.

``frontier lut validate`` checks the table on seeded random plans, which mix FP32 and
INT8 layers about evenly. A search's picks often sit at the corners instead (every
layer INT8, every layer pruned alike), where the table's calibration saw no plan. This
prices each uniform plan, every prune ratio of the space with all layers FP32 and with
all layers at 8-bit weights and activations, plus any ``--plan`` files, with the
device's table and measures the same ONNX file here, as ``lut validate`` measures
(the timing protocol, on the table's threads). The table's calibration set holds these
plans; ``bench_latency_trust.py`` reports them beside held-out random plans.

Run: python benchmarks/bench_lut_corners.py EXPERIMENT [--device local-cpu]
     [--plan PLAN.json ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    from frontier.latency_models import (
        DeviceStore,
        LatencyModel,
        corner_plans,
        ensure_local_table,
        local_device,
        measure_plans,
    )
    from frontier.search import load_config, task_and_space
    from frontier.spaces import CompressionPlan

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="experiment name or config path")
    parser.add_argument("--device", default="local-cpu")
    parser.add_argument("--plan", type=Path, action="append", default=[], help="plan JSON")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()

    if local_device(args.device) is None:
        parser.error(f"--device {args.device}: only a local device can be measured here")
    config = load_config(args.experiment)
    task, model, space = task_and_space(config)
    example, calibration = task.example_inputs(), task.calibration_batches()
    table = ensure_local_table(
        model,
        example,
        space,
        store=DeviceStore(config.device_store),
        name=args.device,
        calibration_data=calibration,
    )
    latency = LatencyModel(table)
    latency.bind(model, example, space)
    plans = corner_plans(space)
    for path in args.plan:
        data = json.loads(path.read_text())
        plans.append((path.name, CompressionPlan.from_dict(data.get("plan", data))))
    measured = measure_plans(
        model,
        [plan for _, plan in plans],
        example,
        table,
        calibration_data=calibration,
        label="corner models",
    )
    rows = []
    for (label, plan), ms in zip(plans, measured, strict=True):
        p = latency.predict(model, plan)
        rows.append(
            {
                "plan": label,
                "predicted_ms": round(p.latency_ms, 4),
                "sum_ms": round(p.sum_ms, 4),
                "measured_ms": round(ms, 4),
                "error": round(p.latency_ms / ms - 1, 4),
            }
        )
    width = max(len(r["plan"]) for r in rows)
    print(f"{'plan':<{width}}  predicted ms  measured ms   error")
    for r in rows:
        print(
            f"{r['plan']:<{width}}  {r['predicted_ms']:12.3f}  {r['measured_ms']:11.3f}"
            f"  {r['error']:+6.1%}"
        )
    if args.json:
        args.json.write_text(json.dumps({"experiment": config.name, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
