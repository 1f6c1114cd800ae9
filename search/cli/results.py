"""``frontier pareto`` and ``frontier pick``: a finished search's front read back from
MLflow, and one model of it downloaded, measured and registered."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from frontier.evaluators import SAVINGS_PREFIX

from ..pipeline._track import download_pipeline, is_pipeline
from ..study._storage import writable, writable_file
from ..tracking._results import (
    BASELINE_ONNX,
    compare_picked,
    deploy_picked,
    latency_checks,
    measure_picked,
    query_front,
    register_model,
    sort_front,
    with_params,
)
from ..tracking._tracking import (
    TEST_METRIC,
    Tag,
    download,
    download_text,
    front_frame,
    metrics_of,
)
from ._common import UsageError, add_tracking_uri, tracking_uri

WHERE_HELP = "constraints, e.g. 'accuracy >= 0.95, size_bytes <= 32768'"


def add_commands(sub: Any) -> None:
    _pareto_command(sub)
    _pick_command(sub)


def _search_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", help="MLflow experiment (default: the latest search)")
    p.add_argument("--run", help="the search's parent run id")
    p.add_argument("--where", help=WHERE_HELP)
    add_tracking_uri(p)


def _pareto_command(sub: Any) -> None:
    p = sub.add_parser("pareto", help="show a search's Pareto front from MLflow")
    _search_options(p)
    p.add_argument("--sort", help="column to sort by; '+x'/'-x' for ascending/descending")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--all", action="store_true", help="every trial, not only the front")
    p.add_argument(
        "--objectives",
        help="recompute the front on these recorded metrics only, e.g. "
        "'accuracy,latency_ms@local-cpu' (one device's front)",
    )
    p.add_argument(
        "--savings",
        action="store_true",
        help="show each member's year of serving against the baseline (serving_* columns: "
        "latency, energy, gCO2e, instance hours and money saved over the config's carbon "
        "deployment, and the day that pays back the search's own carbon)",
    )
    p.add_argument(
        "--params",
        metavar="GLOBS",
        help="also show these sampled parameters, e.g. 'activation' or 'prune.*,sparse.*'",
    )
    p.set_defaults(func=cmd_pareto)


def cmd_pareto(args: argparse.Namespace) -> int:
    uri = tracking_uri(args)
    parent, frame = query_front(
        uri,
        experiment=args.experiment,
        run=args.run,
        where=args.where,
        objectives=args.objectives,
        everything=args.all,
    )
    metrics = metrics_of(parent)
    if not frame.empty:
        frame = sort_front(frame, args.sort or metrics[0].name, metrics)
    if args.params and not frame.empty:
        frame = with_params(frame, uri, parent, args.params)
    if not args.savings:
        frame = frame.drop(columns=[c for c in frame.columns if c.startswith(SAVINGS_PREFIX)])
    if args.format == "csv":
        print(frame.to_csv(index=False), end="")
    elif args.format == "json":
        print(frame.to_json(orient="records", indent=2, double_precision=15))
    else:
        print(
            f"search {parent.info.run_name} ({parent.info.run_id}), "
            f"constraints {parent.data.tags.get(Tag.CONSTRAINTS, '[]')}"
        )
        if parent.info.status in ("KILLED", "FAILED", "RUNNING"):
            print(
                f"unfinished ({parent.info.status.lower()}): the front of the trials it "
                "completed; `frontier search CONFIG --resume` continues it"
            )
        hidden = [] if args.all else ["pareto", "state", "feasible"]
        shown = latency_checks(frame, parent).drop(columns=hidden, errors="ignore")
        print(shown.to_string(index=False) if not frame.empty else "(no model matches)")
    return 0


def _pick_command(sub: Any) -> None:
    p = sub.add_parser("pick", help="download (and register) a model from the front")
    p.add_argument("run_id", nargs="?", help="the trial's MLflow run id")
    p.add_argument("--best", metavar="OBJECTIVE", help="the front member best on OBJECTIVE")
    _search_options(p)
    p.add_argument("--export", metavar="PATH", help="a directory, or a .onnx file path")
    p.add_argument("--register", metavar="NAME", help="register in the MLflow model registry")
    p.add_argument("--alias", default="champion", help="registry alias (default champion)")
    p.add_argument(
        "--no-measure",
        action="store_true",
        help="do not time the model on this machine's local-cpu devices",
    )
    p.set_defaults(func=cmd_pick)


def cmd_pick(args: argparse.Namespace) -> int:
    if bool(args.run_id) == bool(args.best):
        raise UsageError("pick: give a RUN_ID or --best OBJECTIVE (one of them)")
    uri = tracking_uri(args)
    parent, frame = query_front(uri, experiment=args.experiment, run=args.run, where=args.where)
    top = str(parent.data.params.get("rungs", "")).split(",")[-1]  # the search's top rung
    if args.run_id:
        match = frame[frame["run_id"] == args.run_id]
        if match.empty:
            everything = front_frame(uri, parent, members_only=False)
            match = everything[everything["run_id"] == args.run_id]
    else:
        if frame.empty:
            raise UsageError("pick: no front member matches --where")
        finished = frame[frame["rung"] == top] if "rung" in frame and top else frame
        # members measured at the top rung first: a cheap rung's accuracy is not theirs
        match = sort_front(
            finished if not finished.empty else frame, args.best, metrics_of(parent), "--best"
        ).head(1)
    if match.empty:
        raise UsageError(f"pick: run {args.run_id} is not a trial of that search")
    row = match.iloc[0].to_dict()
    if top and row.get("rung") not in (None, top):
        note = (
            f"trial {row['trial']} was measured at rung {row['rung']!r} only, not at the top "
            f"rung {top!r}: its accuracy is the cheaper rung's; `frontier search CONFIG "
            "--resume` measures the front there"
        )
        print(f"warning: {note}", file=sys.stderr)
    out = Path(args.export or f"frontier-pick-trial-{row['trial']}")
    if is_pipeline(parent):
        return _pick_pipeline(uri, parent, row, out, args)
    target = _export_folder(out)
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
    serving = {
        k: float(v) for k, v in row.items() if k.startswith(SAVINGS_PREFIX) and v == v
    }  # logged at the end of the search; NaN where a member has none
    if serving:
        report["serving"] = serving
    test = row.get(TEST_METRIC)
    if test is not None and test == test:  # measured at the end of the search (not NaN)
        report[TEST_METRIC] = float(test)
    bands = json.loads(parent.data.tags.get(Tag.NOISE_BANDS, "{}"))
    if bands:
        report["latency_noise"] = bands
        for band in bands.values():
            print(f"note: {band}", file=sys.stderr)
    deployed = deploy_picked(files["model.onnx"], report["metrics"])
    report["files"].update({k: str(v) for k, v in deployed.items()})
    if not args.no_measure:
        _measure_pick(uri, parent, files["model.onnx"], report)
    if args.register:
        report["registered"] = register_model(
            uri, row["run_id"], files["model.onnx"], args.register, args.alias
        )
    print(json.dumps(report, indent=2, default=str))
    return 0


def _measure_pick(uri: str, parent: Any, onnx_path: Path, report: dict[str, Any]) -> None:
    """Time the pick on each local device among its metrics: beside the uncompressed
    model the search logged (speed-ups compared, ``speedup``), else alone (a search
    from before that model was logged: milliseconds compared)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="frontier-pick-") as tmp:
        try:
            base = download_text(uri, parent.info.run_id, BASELINE_ONNX, tmp)
        except Exception:  # not logged: an older search, or one stopped before its end
            measured = measure_picked(onnx_path, report["metrics"])
            if measured:
                report["latency_measured_ms"] = measured
            return
        table_base = json.loads(parent.data.tags.get(Tag.BASELINE, "{}"))
        compared = compare_picked(onnx_path, report["metrics"], base, table_base)
    if compared:
        report["latency_measured_ms"] = {d: e["ms"] for d, e in compared.items()}
        report["speedup"] = {
            d: {k.removeprefix("speedup_"): v for k, v in e.items() if k.startswith("speedup")}
            for d, e in compared.items()
        }


def _export_folder(out: Path) -> Path:
    """The folder ``pick --export OUT`` downloads into, once the model and plan can be
    written there: OUT is a folder (new or existing) or a ``.onnx`` file's path."""
    what = "the picked model (--export)"
    folder = out.parent if out.suffix == ".onnx" else out
    if out.suffix == ".onnx":
        writable_file(out, what)
        writable_file(out.with_suffix(".plan.json"), what)
    elif out.is_file():
        raise UsageError(
            f"pick: --export {out}: is a file; give a folder, or a path ending in .onnx"
        )
    writable(folder, what)
    for name in ("model.onnx", "plan.json"):  # what the download writes first
        if (folder / name).is_dir():
            raise UsageError(f"pick: --export {out}: {folder / name} is a folder; move it away")
    return folder


def _pick_pipeline(
    uri: str, parent: Any, row: dict[str, Any], out: Path, args: argparse.Namespace
) -> int:
    """``pick`` of a pipeline front member: its folder (each stage's model and plan,
    ``pipeline.json``, ``run_pipeline.py``) and a report."""
    if args.register:
        raise UsageError("pick --register: a pipeline's stages are not registered yet")
    if out.suffix == ".onnx":
        raise UsageError(f"--export {out}: a pipeline is a folder of models; give a folder")
    files = download_pipeline(uri, row["run_id"], _export_folder(out))
    report = {
        "run_id": row["run_id"],
        "trial": int(row["trial"]),
        "metrics": {o.name: row.get(o.name) for o in metrics_of(parent)},
        "files": {k: str(v) for k, v in files.items()},
        "run": f"python {files['run_pipeline.py']}",
    }
    print(json.dumps(report, indent=2, default=str))
    return 0
