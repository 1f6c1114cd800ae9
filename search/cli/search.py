"""``frontier search``: run a compression search from a config, locally or on Ray."""

from __future__ import annotations

import argparse
from typing import Any

from frontier.latency_models.runner import at_least

from ..config._config import parse_overrides
from ..config._registries import backend_names
from ..run._engine import Search
from ._common import CONFIG_HELP, UsageError, add_tracking_uri, load


def add_commands(sub: Any) -> None:
    p = sub.add_parser("search", help="run a compression search (Optuna; local or Ray)")
    p.add_argument("config", help=CONFIG_HELP)
    p.add_argument("--trials", type=at_least(1), help="trial budget (default: the config's)")
    p.add_argument("--backend", choices=backend_names(), help="where trials run")
    p.add_argument("--address", help="Ray cluster address (implies --backend ray)")
    p.add_argument("--workers", type=at_least(1), help="local worker processes (default 1)")
    p.add_argument("--resume", action="store_true", help="continue this config's last search")
    p.add_argument(
        "--new",
        action="store_true",
        help="start a new study even where this config's last one stopped short of its "
        "trials (refused without it)",
    )
    p.add_argument("--seed", type=int, help="override search.seed")
    add_tracking_uri(p, env=False)
    p.add_argument("--storage", help="Optuna storage (a journal file path or a database URL)")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="a line per generation instead of a progress bar",
    )
    p.add_argument(
        "--no-learn",
        action="store_true",
        help="keep the device tables fixed: the measured front does not join their "
        "calibration (tracking.learn_front: false)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a config field, e.g. --set task.options.root=/data/imagenet "
        "(repeatable; values read as YAML)",
    )
    p.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    config = load(args.config).override(
        {
            **parse_overrides(args.set),
            "tracking.uri": args.tracking_uri,
            "storage": args.storage,
            "search.seed": args.seed,
            "tracking.learn_front": False if args.no_learn else None,
        }
    )
    if config.pipeline is not None:
        return search_pipeline(config, args)
    search = Search(
        config,
        trials=args.trials,
        backend=args.backend,
        address=args.address,
        workers=args.workers,
        resume=args.resume,
        new=args.new,
        progress="lines" if args.no_progress else True,
    )
    result = search.run()
    failed = int((result.trials["state"] == "failed").sum()) if not result.trials.empty else 0
    front = result.pareto.drop(columns=["run_id"], errors="ignore")
    print(front.to_string(index=False) if not front.empty else "(no feasible model)")
    experiment = config.tracking.experiment or config.name
    print(
        f"\nfront: {len(result.pareto)} models, hypervolume {result.hypervolume:.4f}, "
        f"{len(result.trials)} trials ({failed} failed{_skipped(result.study)}); "
        f"MLflow run {result.mlflow_run_id}\n"
        f"next: frontier pareto --experiment {experiment}   |   "
        f"frontier pick --experiment {experiment} {_pick_hint(search.objectives, result.pareto)} "
        "--export picked/"
    )
    for line in search.report().lines(args.config):
        print(line)
    return 0


def _pick_hint(objectives: list[Any], front: Any) -> str:
    """``pick``'s options as the README shows them: the best of the second objective
    among members that keep the first at least at the front's median (``--best
    size_bytes --where "accuracy >= 0.97"``); the first objective alone where there is
    one, or no front."""
    first = objectives[0]
    if len(objectives) < 2 or front.empty or first.name not in front:
        return f"--best {first.name}"
    median = float(front[first.name].median())
    op = ">=" if first.direction == "maximize" else "<="
    return f'--best {objectives[1].name} --where "{first.name} {op} {median:.4g}"'


def _skipped(study: Any) -> str:
    """What else the study holds beside the trials counted: plans refused as repeats
    (Optuna's PRUNED, so trial numbers run past the budget) and trials a killed run left
    (failed there, run again here)."""
    from optuna.trial import TrialState

    from ..study._storage import INTERRUPTED_ATTR
    from ..trials._samplers import DUPLICATE_ATTR

    repeats = sum(
        1
        for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
        if DUPLICATE_ATTR in t.user_attrs
    )
    interrupted = len(study.user_attrs.get(INTERRUPTED_ATTR, []))
    said = ""
    if repeats:
        said += f"; {repeats} repeated plans skipped, recorded as PRUNED in the study"
    if interrupted:
        said += f"; {interrupted} interrupted by a stop and run again"
    return said


def search_pipeline(config: Any, args: argparse.Namespace) -> int:
    """``frontier search`` of a pipeline config: the joint search, in this process."""
    from pathlib import Path

    from ..pipeline._search import PipelineSearch

    for flag, value in (("--backend", args.backend), ("--address", args.address)):
        if value and value != "local":
            raise UsageError(f"{flag}: a pipeline search runs in this process for now")
    if args.workers and args.workers > 1:
        raise UsageError("--workers: a pipeline search runs in this process for now")
    storage = config.storage or f"{config.name}.pipeline.journal"
    if Path(storage).exists() and not args.resume:
        raise UsageError(
            f"{storage}: a pipeline search named {config.name!r} is stored there; --resume "
            "continues it, or remove the file (or set another name) to start again"
        )
    search = PipelineSearch(config, storage=storage)
    result = search.run(trials=args.trials)
    names = [o.name for o in result.objectives]
    stages = search.stage_names
    print(
        "trial  "
        + "  ".join(f"{n:>16}" for n in names)
        + "  "
        + "  ".join(f"{s + '.accuracy':>16}" for s in stages)
        + "  placement"
    )
    rows = [result.baseline, *sorted(result.front, key=lambda t: t.values[names[0]])]
    for t in rows:
        label = "base" if t.number < 0 else str(t.number)
        print(
            f"{label:>5}  "
            + "  ".join(f"{t.values[n]:>16.5g}" for n in names)
            + "  "
            + "  ".join(f"{t.values[s + '.accuracy']:>16.4f}" for s in stages)
            + "  "
            + ", ".join(f"{s} on {d}" for s, d in t.placement.items())
        )
    if result.measured:
        print("\nmeasured here, frame by frame (ms a frame; speed-up over the uncompressed):")
        for m in result.measured:
            label = "base" if m.number < 0 else str(m.number)
            print(
                f"{label:>5}  predicted {m.predicted_ms:.4g}, measured {m.measured_ms:.4g}; "
                f"{m.speedup_predicted:.2f}x predicted, {m.speedup_measured:.2f}x measured"
            )
    failed = sum(t.state == "failed" for t in result.trials)
    print(
        f"\nfront: {len(result.front)} pipelines, hypervolume {result.hypervolume:.4f}, "
        f"{len(result.trials)} trials ({failed} failed); stage plans scored: "
        + ", ".join(f"{s} {n}" for s, n in result.evaluations.items())
        + f"\nstudy: {storage} (--resume continues it)"
    )
    return 0
