"""``frontier space``, ``sensitivity``, ``plan`` and ``experiments list``: looking at a
config's model and space before searching it."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from frontier.latency_models.runner import at_least

from ..run._setup import plan_latency, task_and_space
from ..study._storage import writable, writable_file
from ._common import CONFIG_HELP, UsageError, load


def add_commands(sub: Any) -> None:
    for add in (
        _space_command,
        _sensitivity_command,
        _plan_command,
        _profile_command,
        _experiments_command,
    ):
        add(sub)


def _profile_command(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="each layer's time inside a model (ONNX Runtime's profiler), beside its MACs, "
        "kernels and precision and a baseline's same layers",
    )
    p.add_argument("model", help="an ONNX file, or a front member's MLflow run id")
    p.add_argument("--baseline", help="an ONNX file (or run id) to compare layer by layer")
    p.add_argument(
        "--threads", type=at_least(1), default=1, help="ONNX Runtime threads (default 1)"
    )
    p.add_argument("--runs", type=at_least(1), default=200, help="profiled runs (default 200)")
    p.add_argument("--out", metavar="DIR", help="also write profile.csv and profile.png here")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument(
        "--device",
        help="for a run id: also each layer's price in this device table (table_ms)",
    )
    p.add_argument("--store", help="the device store (default: $FRONTIER_DATA_DIR)")
    p.add_argument("--tracking-uri", help="MLflow, for run ids (default $MLFLOW_TRACKING_URI)")
    p.set_defaults(func=cmd_profile)


def _table_prices(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    """The layers' table prices on ``args.device`` of the run ``args.model`` and of the
    uncompressed model of its search: the plan's ops rebuilt from the search's config."""
    import tempfile

    from frontier.latency_models import DeviceStore, LatencyModel, priced_layers

    from ..config._config import load_config
    from ..tracking._learning import plan_entries
    from ..tracking._tracking import PLAN_FILE, _client, download, download_text
    from ._common import tracking_uri

    uri = tracking_uri(args)
    lm = LatencyModel(DeviceStore(args.store).load(args.device))
    with tempfile.TemporaryDirectory() as tmp:
        plan = json.loads(download(uri, args.model, Path(tmp))[PLAN_FILE].read_text())
        parent = _client(uri).get_run(args.model).data.tags.get("mlflow.parentRunId", "")
        config = load_config(download_text(uri, parent, "config.json", tmp))
    entries = plan_entries(config, {"model": plan, "baseline": {}})
    return priced_layers(lm, entries["model"]), priced_layers(lm, entries["baseline"])


def _onnx_file(target: str, args: argparse.Namespace, scratch: Path) -> Path:
    """``target`` as an ONNX file: a path, or a trial run's ``model.onnx`` from MLflow."""
    path = Path(target)
    if path.suffix == ".onnx" or path.exists():
        if path.is_dir():
            raise UsageError(f"profile: {path}: is a folder; give an ONNX file or a run id")
        if not path.is_file():
            raise UsageError(f"profile: {path}: no such ONNX file")
        return path
    from ..tracking._tracking import MODEL_FILE, download
    from ._common import tracking_uri

    try:
        return download(tracking_uri(args), target, scratch / target)[MODEL_FILE]
    except Exception as err:
        raise UsageError(
            f"profile: {target!r} is neither an ONNX file nor a trial run with a model "
            f"({type(err).__name__})"
        ) from None


def cmd_profile(args: argparse.Namespace) -> int:
    import tempfile

    import pandas as pd

    from frontier.latency_models import (
        compare_layers,
        plot_layers,
        profile_layers,
        read_onnx,
        resolve_device,
    )

    if args.runs < 10:
        raise UsageError("profile: --runs must be at least 10")
    if args.device and (Path(args.model).suffix == ".onnx" or Path(args.model).exists()):
        raise UsageError("profile: --device needs a run id (the plan's ops come from its search)")
    with tempfile.TemporaryDirectory(prefix="frontier-profile-") as tmp:
        model = _onnx_file(args.model, args, Path(tmp))
        base = _onnx_file(args.baseline, args, Path(tmp)) if args.baseline else None
        for path in (model, base) if base else (model,):
            read_onnx(path)  # refused before anything is printed
        print(f"profiling {model} ({args.runs} runs) ...", file=sys.stderr)
        here = resolve_device(f"local-cpu-{args.threads}t").local  # --threads: a CPU device
        assert here is not None
        mine = profile_layers(model, device=here, runs=args.runs)
        theirs = None
        if base is not None:
            print(f"profiling the baseline {base} ...", file=sys.stderr)
            theirs = profile_layers(base, device=here, runs=args.runs)
    prices, base_prices = _table_prices(args) if args.device else (None, None)
    rows = compare_layers(mine, theirs, prices=prices, base_prices=base_prices)
    frame = pd.DataFrame(rows)
    if args.out:
        out = writable(Path(args.out), "the profile")
        frame.to_csv(out / "profile.csv", index=False)
        plot_layers(rows, out / "profile.png", f"{Path(args.model).name}: layer times")
    if args.format == "csv":
        print(frame.to_csv(index=False), end="")
        return 0
    summary = {"model": mine.summary()}
    if theirs is not None:
        summary["baseline"] = theirs.summary()
        if mine.measured_ms and theirs.measured_ms:
            summary["speedup_measured"] = round(theirs.measured_ms / mine.measured_ms, 3)
    if args.format == "json":
        print(json.dumps({"summary": summary, "layers": rows}, indent=2))
        return 0
    print(frame.to_string(index=False))
    for name, s in summary.items():
        print(f"{name}: {s}" if not isinstance(s, dict) else f"{name}: " + ", ".join(
            f"{k} {v}" for k, v in s.items()))  # fmt: skip
    for name, profiled in (("model", mine), ("baseline", theirs)):
        caution = profiled.caution() if profiled is not None else None
        if caution:
            print(f"note ({name}): {caution}")
    return 0


def _space_command(sub: Any) -> None:
    p = sub.add_parser("space", help="discover and print the search space of a config's model")
    p.add_argument("config", help=CONFIG_HELP)
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_space)


def cmd_space(args: argparse.Namespace) -> int:
    _, _, space = task_and_space(load(args.config))
    if args.format == "json":
        rows = [
            {"name": d.name, "kind": d.kind, "choices": list(d.choices), "detail": d.detail}
            for d in space.dimensions()
        ]
        print(json.dumps(rows, indent=2))
    else:
        print(space.describe())
    return 0


def _sensitivity_command(sub: Any) -> None:
    p = sub.add_parser(
        "sensitivity",
        help="each layer's compression choices one at a time: which layers can be squeezed",
    )
    p.add_argument("config", help=CONFIG_HELP)
    p.add_argument(
        "--rung", default="short", help="the rung to score at (default short, the cheap one)"
    )
    p.add_argument("--seed", type=int, help="override search.seed")
    p.add_argument(
        "--workers",
        type=int,
        help="local worker processes scoring the plans (default: the config's backend.workers)",
    )
    p.add_argument("--out", default="sensitivity", help="directory for the CSV and PNG")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_sensitivity)


def cmd_sensitivity(args: argparse.Namespace) -> int:
    import csv

    from frontier.experiments import cache_dir

    from ..run._sensitivity import plot, sensitivity
    from ..trials._backends import LocalProcesses
    from ..trials._trials import TrialRunner

    config = load(args.config).override({"search.seed": args.seed})
    workers = config.backend.workers if args.workers is None else args.workers
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    out = writable(Path(args.out), "the sensitivity table (--out)")
    writable(cache_dir(), "the sensitivity cache ($FRONTIER_CACHE_DIR)")
    evaluation = TrialRunner(config, driver=True)
    if args.rung not in evaluation.rungs:
        raise UsageError(f"--rung must be one of the config's rungs {evaluation.rungs}")
    rung = args.rung  # by name: every metric at that fidelity, on any worker

    print(f"sensitivity: scoring each layer's choices at the {rung} rung ...", file=sys.stderr)
    last_line_s = [0.0]

    def progress(done: int, total: int, seconds: float) -> None:
        if done in (1, total) or done % 10 == 0 or seconds - last_line_s[0] >= 15:
            last_line_s[0] = seconds
            print(f"sensitivity: {done}/{total} plans ({seconds:.0f} s)", file=sys.stderr)

    backend = None
    if workers > 1:
        backend = LocalProcesses(config.model_dump_json(), evaluation.tables, workers)
    try:
        rows = sensitivity(
            evaluation,
            rung=rung,
            cache=cache_dir() / f"sensitivity-{config.name}.json",
            progress=progress,
            backend=backend,
        )
    finally:
        if backend is not None:
            backend.close()
    with (out / "sensitivity.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    metric = "accuracy" if "accuracy" in evaluation.metrics else evaluation.metrics[0]
    plot(rows, out / "sensitivity.png", metric=metric)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    import pandas as pd

    frame = pd.DataFrame(rows[1:]).sort_values(f"{metric}_delta", ascending=False)
    shown = ["dimension", "choice", metric, f"{metric}_delta"]
    shown += [f"{m}_delta" for m in evaluation.metrics if m != metric]
    print(f"uncompressed at the {args.rung} rung: {metric} {rows[0][metric]:.4f}", end="")
    if metric == "accuracy" and rung != "proxy":
        print(
            f" (the baseline as trained: {evaluation.teacher_accuracy():.4f}; the {rung} rung "
            "fine-tunes every plan briefly, the uncompressed one too: compare the rows "
            "with this line, not with the baseline)"
        )
    else:
        print()
    print(frame[shown].to_string(index=False))
    print(f"wrote {out / 'sensitivity.csv'} and {out / 'sensitivity.png'}")
    return 0


def _plan_command(sub: Any) -> None:
    p = sub.add_parser(
        "plan", help="apply one plan (seeded random, or from JSON) and report its cost"
    )
    p.add_argument("config", help=CONFIG_HELP)
    p.add_argument("--seed", type=int, default=0, help="seed of the random plan (default 0)")
    p.add_argument("--plan", help="a plan JSON file to apply instead of a random one")
    p.add_argument("--export", metavar="PATH", help="also export the compressed model to ONNX")
    p.add_argument(
        "--store",
        help="the device store whose tables price the plan (default: the config's "
        "device_store, else $FRONTIER_DATA_DIR)",
    )
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from frontier.evaluators import measure_accuracy, task_score
    from frontier.spaces import CompressionPlan, apply_plan, export_onnx, model_cost

    config = load(args.config)
    if args.export:
        writable_file(Path(args.export), "the exported model (--export)")
    task, model, space = task_and_space(config)
    plan = CompressionPlan.load(args.plan, space=space) if args.plan else space.sample(args.seed)
    example = task.example_inputs()
    calib = task.calibration_batches()
    compressed = apply_plan(model, plan, example, calibration_data=calib)
    base = model_cost(model, CompressionPlan(), example)
    cost = model_cost(compressed, plan, example)
    val = task.loaders().val  # the split the search scores and chooses on
    report = {
        "plan": plan.to_dict(),
        "baseline": {"params": base.params, "size_bytes": base.size_bytes, "macs": base.macs},
        "compressed": {
            "params": cost.params,
            "size_bytes": cost.size_bytes,
            "macs": cost.macs,
            "bops": cost.bops,
        },
        "latency_ms": plan_latency(config, model, example, space, plan, args.store),
        "accuracy_split": "validation (as the search scores plans)",
        "accuracy_baseline": measure_accuracy(model, val, score=task_score(task)),
        "accuracy_compressed_no_finetune": measure_accuracy(
            compressed, val, score=task_score(task)
        ),
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


def _experiments_command(sub: Any) -> None:
    p = sub.add_parser("experiments", help="built-in experiments")
    esub = p.add_subparsers(dest="action", required=True)
    e = esub.add_parser("list", help="list the built-in experiments")
    e.set_defaults(func=cmd_experiments_list)


def cmd_experiments_list(args: argparse.Namespace) -> int:
    from frontier.experiments import builtin_configs

    configs = builtin_configs()
    width = max(map(len, configs), default=0)
    for name, path in configs.items():
        print(f"{name:<{width}}  {load(str(path)).description}")
    return 0
