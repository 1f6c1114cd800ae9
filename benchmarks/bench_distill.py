"""How one plan's accuracy recovers with distillation steps: the curve a rung length is
chosen from.

Builds an experiment's task, teacher and space (no latency tables, no search), applies
one plan, distils it from the teacher's cached soft targets with the plan's temperature
and alpha, and scores the validation split every ``--every`` steps, then the test split.
The optimizer restarts at each checkpoint; the data order follows the checkpoint's seed.

Run: python benchmarks/bench_distill.py text-student --plan PLAN.json [--steps 1800]
    [--every 300] [--lr 1e-4] [--batch-size 32] [--measure] [--json OUT.json]

With ``--measure``, the distilled student and the teacher are exported to ONNX (INT8
where the plan quantises) and their latency measured side by side by the timing
protocol (ONNX Runtime, 1 thread, batch 1, rounds that alternate the two models),
with the student's size as its cost model counts it beside the teacher's.

``PLAN.json`` holds a plan as ``frontier pick`` writes it (``plan.json``);
``benchmarks/report-logs/plan-text-halved.json`` is the halved text student of REPORT.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="experiment name or config path")
    parser.add_argument("--plan", required=True, type=Path, help="a plan JSON file")
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--every", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--measure", action="store_true", help="measure ONNX latency too")
    parser.add_argument("--json", type=Path, default=None, help="write the curve here")
    args = parser.parse_args()
    if args.steps < 1 or args.every < 1:
        sys.exit("--steps and --every must be >= 1")

    from frontier.evaluators import Candidate, EvalSetup, distill, measure_accuracy
    from frontier.experiments import build_task
    from frontier.search import load_config
    from frontier.spaces import CompressionPlan, discover

    torch.set_num_threads(args.threads)
    config = load_config(args.experiment)
    task = build_task(config.task.name, **config.task.options)
    teacher = task.baseline()
    example = task.example_inputs()
    space = discover(teacher, example, config.space)
    try:
        data = json.loads(args.plan.read_text())
        plan = CompressionPlan.from_dict(data.get("plan", data), space=space)
    except (OSError, ValueError, AttributeError) as err:
        sys.exit(f"{args.plan}: {err}")
    setup = EvalSetup(task=task, teacher=teacher, seed=config.search.seed)
    student = copy.deepcopy(setup.compressed(Candidate(plan)))
    temperature = plan.distill.temperature if plan.distill else 1.0
    alpha = plan.distill.alpha if plan.distill else 0.0
    loaders = task.loaders(batch_size=args.batch_size)
    curve: list[dict[str, float]] = []
    start, done = time.perf_counter(), 0
    while done < args.steps:
        chunk = min(args.every, args.steps - done)
        distill(
            student,
            setup.soft_teacher,
            loaders,
            steps=chunk,
            temperature=temperature,
            alpha=alpha,
            lr=args.lr,
            seed=done,
        )
        done += chunk
        acc = measure_accuracy(student, loaders.val, task.metric)
        curve.append({"steps": done, "val": acc, "elapsed_s": time.perf_counter() - start})
        print(f"step {done}: validation {acc:.4f} ({curve[-1]['elapsed_s']:.0f} s)", flush=True)
    test = measure_accuracy(student, loaders.test, task.metric)
    teacher_test = measure_accuracy(teacher, loaders.test, task.metric)
    print(f"test {test:.4f} (teacher {teacher_test:.4f}, {test / teacher_test:.1%} of it)")
    measured: dict[str, float] = {}
    if args.measure:
        measured = _measure(teacher, student, plan, example, setup, config)
        print(
            f"latency {measured['student_latency_ms']:.2f} ms against the teacher's "
            f"{measured['teacher_latency_ms']:.2f} ms "
            f"({measured['teacher_latency_ms'] / measured['student_latency_ms']:.2f}x); size "
            f"{measured['student_size_bytes'] / 1e6:.1f} MB against "
            f"{measured['teacher_size_bytes'] / 1e6:.1f} MB "
            f"({measured['teacher_size_bytes'] / measured['student_size_bytes']:.2f}x)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "experiment": config.name,
                    **measured,
                    "plan": plan.to_dict(),
                    "lr": args.lr,
                    "batch_size": args.batch_size,
                    "curve": curve,
                    "test": test,
                    "teacher_test": teacher_test,
                },
                indent=2,
            )
            + "\n"
        )


def _measure(
    teacher: Any, student: Any, plan: Any, example: Any, setup: Any, config: Any
) -> dict[str, float]:
    """Both models exported and measured side by side (as ``bench_scenarios`` measures a
    pick beside its baseline); sizes from the cost model."""
    import tempfile
    import warnings

    from bench_scenarios import measure_side_by_side

    from frontier.spaces import CompressionPlan, export_onnx, model_cost

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths = [Path(tmp) / "teacher.onnx", Path(tmp) / "student.onnx"]
        export_onnx(teacher, CompressionPlan(), example, paths[0])
        export_onnx(student, plan, example, paths[1], calibration_data=setup.calibration())
        latency = measure_side_by_side(paths, config.device_store, "local-cpu")
    return {
        "teacher_latency_ms": latency[0],
        "student_latency_ms": latency[1],
        "teacher_size_bytes": float(model_cost(teacher, CompressionPlan(), example).size_bytes),
        "student_size_bytes": float(model_cost(student, plan, example).size_bytes),
    }


if __name__ == "__main__":
    main()
