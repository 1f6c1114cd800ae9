"""The ``frontier`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def _version() -> str:
    try:
        return version("frontier")
    except PackageNotFoundError:
        return "unknown"


def _load(target: str) -> Any:
    from ._config import load_config

    return load_config(target)


def _task_and_space(config: Any) -> tuple[Any, Any, Any]:
    from frontier.experiments import build_task
    from frontier.spaces import discover

    task = build_task(config.task.name, **config.task.options)
    model = task.baseline()
    example = task.example_inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        space = discover(model, example, config.space.options())
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return task, model, space


def cmd_space(args: argparse.Namespace) -> int:
    config = _load(args.config)
    _, _, space = _task_and_space(config)
    if args.format == "json":
        rows = [
            {"name": d.name, "kind": d.kind, "choices": list(d.choices), "detail": d.detail}
            for d in space.dimensions()
        ]
        print(json.dumps(rows, indent=2))
    else:
        print(space.describe())
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from frontier.experiments import evaluate
    from frontier.spaces import CompressionPlan, apply_plan, export_onnx, model_cost

    config = _load(args.config)
    task, model, space = _task_and_space(config)
    if args.plan:
        plan = CompressionPlan.from_json(Path(args.plan).read_text(), space=space)
    else:
        plan = space.sample(args.seed)
    example = task.example_inputs()
    calib = task.calibration_batches()
    compressed = apply_plan(model, plan, example, calibration_data=calib)
    base = model_cost(model, CompressionPlan(), example)
    cost = model_cost(compressed, plan, example)
    test = task.loaders().test
    report = {
        "plan": plan.to_dict(),
        "baseline": {"params": base.params, "size_bytes": base.size_bytes, "macs": base.macs},
        "compressed": {
            "params": cost.params,
            "size_bytes": cost.size_bytes,
            "macs": cost.macs,
            "bops": cost.bops,
        },
        "accuracy_baseline": evaluate(model, test),
        "accuracy_compressed_no_finetune": evaluate(compressed, test),
    }
    if args.export:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the note below says the same
            result = export_onnx(compressed, plan, example, args.export, calibration_data=calib)
        report["export"] = {
            "path": str(result.path),
            "precision": result.precision,
            "note": result.note,
        }
    print(json.dumps(report, indent=2))
    return 0


def cmd_experiments_list(args: argparse.Namespace) -> int:
    from frontier.experiments import builtin_configs

    from ._config import load_config

    for name, path in builtin_configs().items():
        print(f"{name:<20} {load_config(path).description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="frontier",
        description="Hardware-aware compression search for PyTorch models.",
    )
    parser.add_argument("--version", action="version", version=f"frontier {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("space", help="discover and print the search space of a config's model")
    p.add_argument("config", help="a config file, or a built-in experiment name")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_space)

    p = sub.add_parser(
        "plan", help="apply one plan (seeded random, or from JSON) and report its cost"
    )
    p.add_argument("config", help="a config file, or a built-in experiment name")
    p.add_argument("--seed", type=int, default=0, help="seed of the random plan (default 0)")
    p.add_argument("--plan", help="a plan JSON file to apply instead of a random one")
    p.add_argument("--export", metavar="PATH", help="also export the compressed model to ONNX")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("experiments", help="built-in experiments")
    esub = p.add_subparsers(dest="action", required=True)
    e = esub.add_parser("list", help="list the built-in experiments")
    e.set_defaults(func=cmd_experiments_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    from frontier.experiments import TaskError
    from frontier.spaces import PlanError, SpaceError

    from ._config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (ConfigError, TaskError, PlanError, SpaceError) as err:
        print(f"frontier: error: {err}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
