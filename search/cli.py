"""The ``frontier`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
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
    from frontier.experiments import build_task, task_baseline
    from frontier.spaces import discover

    task = build_task(config.task.name, **config.task.options)
    model, example = task_baseline(task, config.task.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        space = discover(model, example, config.space)
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

    from ._storage import writable

    config = _load(args.config)
    if args.export:
        writable(Path(args.export).parent, "the exported model (--export)")
    task, model, space = _task_and_space(config)
    plan = CompressionPlan.load(args.plan, space=space) if args.plan else space.sample(args.seed)
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


def cmd_sensitivity(args: argparse.Namespace) -> int:
    import csv

    from frontier.experiments import cache_dir

    from ._evaluation import Evaluation
    from ._sensitivity import plot, sensitivity
    from ._storage import writable

    config = _load(args.config).override({"search.seed": args.seed})
    out = writable(Path(args.out), "the sensitivity table (--out)")
    writable(cache_dir(), "the sensitivity cache ($FRONTIER_CACHE_DIR)")
    evaluation = Evaluation(config)
    if args.rung not in evaluation.rungs:
        raise UsageError(f"--rung must be one of the config's rungs {evaluation.rungs}")
    rung = evaluation.rungs.index(args.rung)

    def progress(done: int, total: int, seconds: float) -> None:
        if done == total or done % 10 == 0:
            print(f"sensitivity: {done}/{total} plans ({seconds:.0f} s)", file=sys.stderr)

    rows = sensitivity(
        evaluation,
        rung=rung,
        cache=cache_dir() / f"sensitivity-{config.name}.json",
        progress=progress,
    )
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
    print(f"uncompressed at the {args.rung} rung: {metric} {rows[0][metric]:.4f}")
    print(frame[shown].to_string(index=False))
    print(f"wrote {out / 'sensitivity.csv'} and {out / 'sensitivity.png'}")
    return 0


def cmd_experiments_list(args: argparse.Namespace) -> int:
    from frontier.experiments import builtin_configs

    from ._config import load_config

    configs = builtin_configs()
    width = max(map(len, configs), default=0)
    for name, path in configs.items():
        print(f"{name:<{width}}  {load_config(path).description}")
    return 0


def _store(args: argparse.Namespace) -> Any:
    from frontier.latency_models import DeviceStore

    return DeviceStore(args.store)


def cmd_lut_ops(args: argparse.Namespace) -> int:
    from frontier.latency_models import quiet_root_logger, write_bundle

    config = _load(args.config)
    task, model, space = _task_and_space(config)
    with quiet_root_logger(), _usage_errors():
        manifest = write_bundle(
            args.out,
            model=model,
            example_inputs=task.example_inputs(),
            space=space,
            validation=args.validation,
            calibration=args.calibration,
            calibration_data=task.calibration_batches(),
            name=config.name,
            few_shot=args.few_shot,
        )
    calibration = sum(m["kind"] == "calibration" for m in manifest["models"])
    ops = f"{manifest['op_count']} ops"
    if args.few_shot:
        ops = f"{manifest['op_count']} of the space's {manifest['space_op_count']} ops (few-shot)"
    print(
        f"wrote {args.out}: {ops}, {calibration} calibration and "
        f"{args.validation} validation models (bundle {manifest['bundle_id']}, "
        f"{Path(args.out).stat().st_size / 2**20:.1f} MiB)"
    )
    return 0


def cmd_lut_measure(args: argparse.Namespace) -> int:
    from frontier.latency_models import TableError
    from frontier.latency_models.runner import ERRORS, measure_from_args, summary

    try:
        print(summary(measure_from_args(args)))
    except ERRORS as err:
        raise TableError(str(err)) from None
    return 0


def cmd_lut_import(args: argparse.Namespace) -> int:
    from frontier.latency_models import DeviceMeta, LatencyModel, read_manifest

    meta = DeviceMeta(
        active_power_w=args.power_w,
        transfer_gbps=args.transfer_gbps,
        unsupported_ops=tuple(args.unsupported),
    )
    from frontier.latency_models import TableError

    try:
        manifest = read_manifest(Path(args.bundle)) if args.bundle else None
    except ValueError as err:
        raise TableError(str(err)) from None
    store = _store(args)
    table = store.import_table(
        args.table,
        name=args.name,
        meta=meta,
        manifest=manifest,
        merge=args.merge,
        allow_degraded=args.allow_degraded,
        few_shot_from=args.few_shot_from,
    )
    s = table.summary()
    quality = LatencyModel(table).quality()
    calibration = quality["calibration"]
    print(
        f"imported {args.name}: {s['ops']} ops ({s['ops_ok']} measured), "
        f"{s['calibration_models']} calibration models, into {store.root}\n"
        f"calibration: {calibration['method']} from {calibration['models']} models"
        + (
            f" (cross-validated MAPE {calibration['cv_mape'][calibration['method']]:.1%})"
            if calibration["method"] in calibration["cv_mape"]
            else ""
        )
    )
    if quality["stored_validation"]:
        v = quality["stored_validation"]
        print(
            f"validation models measured on the device: {v['samples']}, "
            f"{v['within_10pct']:.0%} predicted within +/-10%, MAPE {v['mape']:.1%}"
        )
    for warning in quality["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0


@contextmanager
def _usage_errors() -> Iterator[None]:
    """A ValueError of the library below becomes a usage error: one line, exit 2."""
    try:
        yield
    except ValueError as err:
        raise UsageError(str(err)) from None


def cmd_lut_list(args: argparse.Namespace) -> int:
    store = _store(args)
    names = store.names()
    if not names:
        print(f"no device tables in {store.root}")
    for name in names:
        s = store.load(name).summary()
        print(f"{name:<16} {s['ops']:>6} ops  {s['provider'] or '?':<22} {s['cpu'] or ''}")
    return 0


def cmd_lut_show(args: argparse.Namespace) -> int:
    from frontier.latency_models import LatencyModel

    table = _store(args).load(args.name)
    summary = table.summary()
    summary["fallbacks"] = LatencyModel(table, calibrate=False).fallback_summary()
    summary["quality"] = LatencyModel(table).quality()
    print(json.dumps(summary, indent=2))
    for warning in summary["quality"]["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0


def cmd_lut_validate(args: argparse.Namespace) -> int:
    from frontier.latency_models import LatencyModel, ensure_local_table, local_threads, validate

    config = _load(args.config)
    task, model, space = _task_and_space(config)
    store = _store(args)
    example = task.example_inputs()
    if local_threads(args.device) is not None:
        table = ensure_local_table(
            model,
            example,
            space,
            store=store,
            name=args.device,
            calibration_data=task.calibration_batches(),
        )
    else:
        table = store.load(args.device)
    latency = LatencyModel(table)
    with _usage_errors():
        report = validate(
            latency,
            model=model,
            example_inputs=example,
            space=space,
            samples=args.samples,
            out_dir=args.out,
            measure=args.measure,
            calibration_data=task.calibration_batches(),
        )
    if store.has(table.name):
        store.record(table.name, validation=report.summary())
    print(json.dumps(report.to_dict(), indent=2))
    for warning in latency.quality()["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0


def _tracking_uri(args: argparse.Namespace) -> str:
    import os

    from ._tracking import check_tracking_uri

    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    return check_tracking_uri(str(uri))


def cmd_search(args: argparse.Namespace) -> int:
    from ._engine import Search

    config = _load(args.config).override(
        {
            **_settings(args.set),
            "tracking.uri": args.tracking_uri,
            "storage": args.storage,
            "search.seed": args.seed,
        }
    )
    search = Search(
        config,
        trials=args.trials,
        backend=args.backend,
        address=args.address,
        workers=args.workers,
        resume=args.resume,
        progress="lines" if args.no_progress else True,
    )
    result = search.run()
    failed = int((result.trials["state"] == "failed").sum()) if not result.trials.empty else 0
    front = result.pareto.drop(columns=["run_id"], errors="ignore")
    print(front.to_string(index=False) if not front.empty else "(no feasible model)")
    experiment = config.tracking.experiment or config.name
    print(
        f"\nfront: {len(result.pareto)} models, hypervolume {result.hypervolume:.4f}, "
        f"{len(result.trials)} trials ({failed} failed); MLflow run {result.mlflow_run_id}\n"
        f"next: frontier pareto --experiment {experiment}   |   "
        f"frontier pick --experiment {experiment} --best {config.objectives[0].name} "
        "--export picked/"
    )
    saved = search.summary
    if "promotion_saved_s" in saved:
        top = max(search.timing.rung_s)
        print(
            f"promotion: {saved['rung0_evaluations']:.0f} trials, "
            f"{saved[f'rung{top}_evaluations']:.0f} measured at the {search.evaluation.rungs[top]} "
            f"rung; every trial there would have taken about {saved['top_rung_only_s']:.0f} s "
            f"of evaluation, this search's took {saved['evaluation_s']:.0f} s "
            f"(saved about {saved['promotion_saved_s']:.0f} s)"
        )
    miss = search.front.closest_miss()
    if miss:
        print(f"no plan met the constraints {[str(c) for c in search.constraints]}; {miss}")
    for note in search.evaluation.notes:
        print(f"note: {note}")
    return 0


def _settings(items: list[str] | None) -> dict[str, Any]:
    """``--set field=value`` pairs as overrides; values are read as YAML (numbers,
    lists, null), so ``--set search.fidelity.rungs=[proxy,short]`` works."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected FIELD=VALUE, e.g. search.trials=50")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise UsageError(f"--set {item!r}: the value is not valid YAML ({err})") from None
    return out


def _where(text: str | None) -> list[Any]:
    import re

    from ._config import Constraint

    if not text:
        return []
    parts = [p for p in re.split(r",|\band\b", text) if p.strip()]
    try:
        return [Constraint.parse(p) for p in parts]
    except ValueError as err:
        raise UsageError(f"--where: {err}") from None


_INFO_COLUMNS = ("run_id", "trial", "rung", "pareto", "state", "feasible")


class UsageError(ValueError):
    """A bad command-line expression (reported like a config error)."""


def _front(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from ._tracking import Tag, find_search, front_frame, metrics_of

    uri = _tracking_uri(args)
    parent = find_search(uri, args.experiment, getattr(args, "run", None))
    on = [n.strip() for n in (getattr(args, "objectives", None) or "").split(",") if n.strip()]
    frame = front_frame(uri, parent, members_only=not (getattr(args, "all", False) or on))
    if on:
        frame = _front_on(frame, on, metrics_of(parent))
    baseline = json.loads(parent.data.tags.get(Tag.BASELINE, "{}"))
    for c in _where(args.where):
        try:
            c = c.resolve(baseline)
        except ValueError as err:
            raise UsageError(f"--where: {err}") from None
        if c.objective not in frame.columns:
            metrics = [k for k in frame.columns if k not in _INFO_COLUMNS]
            raise UsageError(
                f"--where: {c.objective!r} is not a metric of this search; have: {metrics}"
            )
        frame = frame[[c.holds(v) for v in frame[c.objective]]]
    return uri, parent, frame


def _front_on(frame: Any, names: list[str], metrics: list[Any]) -> Any:
    """The feasible front of every trial on some of the recorded metrics only (one
    device's latency and accuracy, say)."""
    from ._pareto import pareto_mask

    directions = {m.name: m for m in metrics}
    unknown = [n for n in names if n not in directions]
    if unknown:
        raise UsageError(f"--objectives: {unknown} not recorded; have: {sorted(directions)}")
    pool = frame[(frame["state"] == "complete") & frame["feasible"]]
    pool = pool.drop_duplicates(subset=names)
    if pool.empty:
        return pool
    mask = pareto_mask(pool[names].to_numpy(dtype=float), [directions[n] for n in names])
    return pool[mask]


def _order(frame: Any, key: str, objectives: list[Any], option: str = "--sort") -> Any:
    name = key.lstrip("+-")
    if option == "--best" and name not in {o.name for o in objectives}:
        known = ", ".join(o.name for o in objectives)
        raise UsageError(f"--best: {name!r} is not a metric this search recorded; have: {known}")
    if name not in frame.columns:
        raise UsageError(f"{option}: {name!r} is not a column; have: {list(frame.columns)}")
    if key[0] in "+-":
        ascending = key[0] == "+"
    else:
        direction = {o.name: o.direction for o in objectives}.get(name, "minimize")
        ascending = direction == "minimize"
    return frame.sort_values(name, ascending=ascending, kind="stable")


def cmd_pareto(args: argparse.Namespace) -> int:
    from ._tracking import Tag, metrics_of

    uri, parent, frame = _front(args)
    metrics = metrics_of(parent)
    if not frame.empty:
        frame = _order(frame, args.sort or metrics[0].name, metrics)
    if args.params and not frame.empty:
        frame = _with_params(frame, uri, parent, args.params)
    if args.format == "csv":
        print(frame.to_csv(index=False), end="")
    elif args.format == "json":
        print(frame.to_json(orient="records", indent=2, double_precision=15))
    else:
        print(
            f"search {parent.info.run_name} ({parent.info.run_id}), "
            f"constraints {parent.data.tags.get(Tag.CONSTRAINTS, '[]')}"
        )
        hidden = [] if args.all else ["pareto", "state", "feasible"]
        shown = frame.drop(columns=hidden, errors="ignore")
        print(shown.to_string(index=False) if not frame.empty else "(no model matches)")
    return 0


def _with_params(frame: Any, uri: str, parent: Any, patterns: str) -> Any:
    """``frame`` with the trials' sampled parameters whose names match one of the
    comma-separated glob ``patterns`` (``activation``, ``sparse.*``) as columns."""
    import fnmatch

    from ._tracking import trial_params

    params = trial_params(uri, parent)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    names = sorted(
        {k for ps in params.values() for k in ps if any(fnmatch.fnmatch(k, w) for w in wanted)}
    )
    if not names:
        known = sorted({k for ps in params.values() for k in ps})
        raise UsageError(f"--params: nothing matches {patterns!r}; parameters: {known}")
    frame = frame.copy()
    for name in names:
        frame[name] = [params.get(run_id, {}).get(name, "") for run_id in frame["run_id"]]
    return frame


def cmd_pick(args: argparse.Namespace) -> int:
    from ._tracking import download, metrics_of

    if bool(args.run_id) == bool(args.best):
        raise UsageError("pick: give a RUN_ID or --best OBJECTIVE (one of them)")
    uri, parent, frame = _front(args)
    if args.run_id:
        match = frame[frame["run_id"] == args.run_id]
        if match.empty:
            from ._tracking import front_frame

            everything = front_frame(uri, parent, members_only=False)
            match = everything[everything["run_id"] == args.run_id]
    else:
        if frame.empty:
            raise UsageError("pick: no front member matches --where")
        match = _order(frame, args.best, metrics_of(parent), "--best").head(1)
    if match.empty:
        raise UsageError(f"pick: run {args.run_id} is not a trial of that search")
    row = match.iloc[0].to_dict()
    out = Path(args.export or f"frontier-pick-trial-{row['trial']}")
    target = out.parent if out.suffix == ".onnx" else out
    files = download(uri, row["run_id"], target)
    if out.suffix == ".onnx":
        files["model.onnx"] = files["model.onnx"].replace(out)
        plan = out.with_suffix(".plan.json")
        files["plan.json"] = files["plan.json"].replace(plan)
    report = {
        "run_id": row["run_id"],
        "trial": int(row["trial"]),
        "rung": row.get("rung"),
        "metrics": {o.name: row.get(o.name) for o in metrics_of(parent)},
        "files": {k: str(v) for k, v in files.items()},
    }
    if not args.no_measure:
        measured = _measure_pick(files["model.onnx"], report["metrics"])
        if measured:
            report["latency_measured_ms"] = measured
    if args.register:
        report["registered"] = _register(uri, row["run_id"], files["model.onnx"], args)
    print(json.dumps(report, indent=2, default=str))
    return 0


def _measure_pick(onnx_path: Path, metrics: dict[str, Any]) -> dict[str, float]:
    """The picked model's latency on each ``local-cpu`` device among its metrics,
    measured here by the timing protocol every table row was measured with; a logged
    figure more than 10% off the measurement is said on stderr."""
    from frontier.latency_models import local_threads, measure_local

    out = {}
    for name, logged in metrics.items():
        metric, _, device = name.partition("@")
        threads = local_threads(device)
        if metric != "latency_ms" or threads is None:
            continue
        out[device] = measured = measure_local(onnx_path.read_bytes(), threads=threads)
        if logged is not None and abs(float(logged) / measured - 1) > 0.10:
            print(
                f"warning: {name} logged {float(logged):.4g} ms, measured here "
                f"{measured:.4g} ms ({float(logged) / measured - 1:+.0%})",
                file=sys.stderr,
            )
    return out


def _register(uri: str, run_id: str, onnx_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    import mlflow
    import onnx
    from mlflow.tracking import MlflowClient

    from ._tracking import resolve_uri

    uri = resolve_uri(uri)
    model = onnx.load(str(onnx_path))
    # mlflow.set_tracking_uri also sets MLFLOW_TRACKING_URI for the whole process;
    # put it back, or a later pareto/pick in this process reads this store
    env_before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run(run_id=run_id):
            info = mlflow.onnx.log_model(model, name="model", registered_model_name=args.register)
    finally:
        if env_before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env_before
    version = str(info.registered_model_version)
    MlflowClient(tracking_uri=uri).set_registered_model_alias(args.register, args.alias, version)
    return {"name": args.register, "version": version, "alias": args.alias}


def build_parser() -> argparse.ArgumentParser:
    from frontier.latency_models.runner import add_measure_arguments

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
        "sensitivity",
        help="each layer's compression choices one at a time: which layers can be squeezed",
    )
    p.add_argument("config", help="a config file, or a built-in experiment name")
    p.add_argument(
        "--rung", default="short", help="the rung to score at (default short, the cheap one)"
    )
    p.add_argument("--seed", type=int, help="override search.seed")
    p.add_argument("--out", default="sensitivity", help="directory for the CSV and PNG")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_sensitivity)

    p = sub.add_parser(
        "plan", help="apply one plan (seeded random, or from JSON) and report its cost"
    )
    p.add_argument("config", help="a config file, or a built-in experiment name")
    p.add_argument("--seed", type=int, default=0, help="seed of the random plan (default 0)")
    p.add_argument("--plan", help="a plan JSON file to apply instead of a random one")
    p.add_argument("--export", metavar="PATH", help="also export the compressed model to ONNX")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "lut", help="device latency tables: ops, measure, import, list, show, validate"
    )
    lsub = p.add_subparsers(dest="action", required=True)
    store_help = "device store directory (default $FRONTIER_DATA_DIR or ~/.local/share/frontier)"

    e = lsub.add_parser("ops", help="write the op bundle of a config's space")
    e.add_argument("config")
    e.add_argument("--out", required=True, help="the bundle .zip to write")
    e.add_argument("--validation", type=int, default=0, help="whole models for validation")
    e.add_argument(
        "--calibration",
        type=int,
        help="whole models for calibration (default: 200 for a model of at most 10 M MACs, "
        "which measure in seconds, else 60)",
    )
    e.add_argument(
        "--few-shot",
        type=int,
        metavar="N",
        help="only N of the space's ops (every kind, small to large) and 10 calibration "
        "models unless --calibration: a new device's table predicted through a stored "
        "device's full one (lut import --few-shot-from)",
    )
    e.set_defaults(func=cmd_lut_ops)

    e = lsub.add_parser("measure", help="measure a bundle on this device (the device runner)")
    add_measure_arguments(e)
    e.set_defaults(func=cmd_lut_measure)

    e = lsub.add_parser("import", help="validate a measured table and store it")
    e.add_argument("table")
    e.add_argument("--name", required=True, help="the device name to store it under")
    e.add_argument("--bundle", help="the bundle it measured (enables calibration)")
    e.add_argument("--power-w", type=float, help="the device's active power in watts")
    e.add_argument("--transfer-gbps", type=float, help="bandwidth to the offload device")
    e.add_argument("--unsupported", nargs="*", default=[], help="op kinds the device cannot run")
    e.add_argument("--merge", action="store_true", help="add to the stored table")
    e.add_argument(
        "--few-shot-from",
        metavar="DEVICE",
        help="a few-shot table (lut ops --few-shot): the stored device whose full table "
        "predicts the ops it did not measure",
    )
    e.add_argument(
        "--allow-degraded",
        action="store_true",
        help="import a table missing the runner's files it needs (its manifest, profiles or "
        "metadata), recording what it loses in the table's import_warnings",
    )
    e.add_argument("--store", help=store_help)
    e.set_defaults(func=cmd_lut_import)

    e = lsub.add_parser("list", help="list stored device tables")
    e.add_argument("--store", help=store_help)
    e.set_defaults(func=cmd_lut_list)

    e = lsub.add_parser("show", help="summary, coverage and unsupported ops of a table")
    e.add_argument("name")
    e.add_argument("--store", help=store_help)
    e.set_defaults(func=cmd_lut_show)

    e = lsub.add_parser("validate", help="predicted vs measured whole-model latency")
    e.add_argument("config")
    e.add_argument("--device", required=True, help="a stored table, or local-cpu")
    e.add_argument("--samples", type=int, default=50)
    e.add_argument("--out", default="lut-validation", help="directory for the CSV and PNG")
    e.add_argument("--measure", choices=["auto", "local", "table"], default="auto")
    e.add_argument("--store", help=store_help)
    e.set_defaults(func=cmd_lut_validate)

    p = sub.add_parser("search", help="run a compression search (Optuna; local or Ray)")
    p.add_argument("config", help="a config file, or a built-in experiment name")
    p.add_argument("--trials", type=int, help="trial budget (default: the config's)")
    p.add_argument("--backend", choices=["local", "ray"], help="where trials run")
    p.add_argument("--address", help="Ray cluster address (implies --backend ray)")
    p.add_argument("--workers", type=int, help="local worker processes (default 1)")
    p.add_argument("--resume", action="store_true", help="continue this config's last search")
    p.add_argument("--seed", type=int, help="override search.seed")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///mlflow.db)")
    p.add_argument("--storage", help="Optuna storage (a journal file path or a database URL)")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="a line per generation instead of a progress bar",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a config field, e.g. --set task.options.root=/data/imagenet "
        "(repeatable; values read as YAML)",
    )
    p.set_defaults(func=cmd_search)

    tracking_help = "MLflow tracking URI (default $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    where_help = "constraints, e.g. 'accuracy >= 0.95, size_bytes <= 32768'"
    p = sub.add_parser("pareto", help="show a search's Pareto front from MLflow")
    p.add_argument("--experiment", help="MLflow experiment (default: the latest search)")
    p.add_argument("--run", help="the search's parent run id")
    p.add_argument("--where", help=where_help)
    p.add_argument("--sort", help="column to sort by; '+x'/'-x' for ascending/descending")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--all", action="store_true", help="every trial, not only the front")
    p.add_argument(
        "--objectives",
        help="recompute the front on these recorded metrics only, e.g. "
        "'accuracy,latency_ms@local-cpu' (one device's front)",
    )
    p.add_argument(
        "--params",
        metavar="GLOBS",
        help="also show these sampled parameters, e.g. 'activation' or 'prune.*,sparse.*'",
    )
    p.add_argument("--tracking-uri", help=tracking_help)
    p.set_defaults(func=cmd_pareto)

    p = sub.add_parser("pick", help="download (and register) a model from the front")
    p.add_argument("run_id", nargs="?", help="the trial's MLflow run id")
    p.add_argument("--best", metavar="OBJECTIVE", help="the front member best on OBJECTIVE")
    p.add_argument("--experiment", help="MLflow experiment (default: the latest search)")
    p.add_argument("--run", help="the search's parent run id")
    p.add_argument("--where", help=where_help)
    p.add_argument("--export", metavar="PATH", help="a directory, or a .onnx file path")
    p.add_argument("--register", metavar="NAME", help="register in the MLflow model registry")
    p.add_argument("--alias", default="champion", help="registry alias (default champion)")
    p.add_argument(
        "--no-measure",
        action="store_true",
        help="do not time the model on this machine's local-cpu devices",
    )
    p.add_argument("--tracking-uri", help=tracking_help)
    p.set_defaults(func=cmd_pick)

    p = sub.add_parser("experiments", help="built-in experiments")
    esub = p.add_subparsers(dest="action", required=True)
    e = esub.add_parser("list", help="list the built-in experiments")
    e.set_defaults(func=cmd_experiments_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    from frontier.experiments import TaskError
    from frontier.latency_models import TableError
    from frontier.spaces import PlanError, SpaceError

    from ._config import ConfigError
    from ._storage import SearchError
    from ._tracking import TrackingError, no_telemetry

    no_telemetry()
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (
        ConfigError,
        UsageError,
        TrackingError,
        TaskError,
        PlanError,
        SpaceError,
        TableError,
        SearchError,
    ) as err:
        print(f"frontier: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130  # the search said how to continue; no traceback
    return code


if __name__ == "__main__":
    sys.exit(main())
