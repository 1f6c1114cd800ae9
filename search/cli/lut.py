"""``frontier lut ...``: device latency tables. Write a space's op bundle, measure it
on a device, import and inspect the table, validate its predictions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from frontier.latency_models.runner import at_least

from ..run._setup import task_and_space
from ..study._storage import writable, writable_file
from ._common import (
    STORE_HELP,
    UsageError,
    device_store,
    load,
    tracking_uri,
    usage_errors,
)


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "lut", help="device latency tables: ops, front, measure, import, list, show, validate"
    )
    lsub = p.add_subparsers(dest="action", required=True)
    for add in (
        _ops_command,
        _front_command,
        _measure_command,
        _import_command,
        _list_command,
        _show_command,
        _validate_command,
    ):
        add(lsub)


def _ops_command(sub: Any) -> None:
    e = sub.add_parser("ops", help="write the op bundle of a config's space")
    e.add_argument("config")
    e.add_argument("--out", required=True, help="the bundle .zip to write")
    e.add_argument("--validation", type=at_least(0), default=0, help="whole models for validation")
    e.add_argument(
        "--calibration",
        type=at_least(0),
        help="whole models for calibration (default: 200 for a model of at most 10 M MACs, "
        "which measure in seconds, else 60)",
    )
    e.add_argument(
        "--few-shot",
        type=at_least(1),
        metavar="N",
        help="only N of the space's ops (every kind, small to large) and 10 calibration "
        "models unless --calibration: a new device's table predicted through a stored "
        "device's full one (lut import --few-shot-from)",
    )
    e.add_argument(
        "--batch-size",
        type=at_least(1),
        default=1,
        help="the batch every op model is built at and the device is priced at (a GPU "
        "serving batches: 32); the runner times its whole models at that batch too",
    )
    e.add_argument(
        "--half",
        action="store_true",
        help="16-bit layers run FP16, as a GPU deploys them: FP16 op models and whole "
        "models exported with them (export_onnx(half=True)); without it they are FP32",
    )
    e.add_argument(
        "--qdq",
        action="store_true",
        help="INT8 models in QDQ format, as OpenVINO reads them (runner.py --runtime "
        "openvino); without it in ONNX Runtime's QOperator format",
    )
    e.set_defaults(func=cmd_lut_ops)


def cmd_lut_ops(args: argparse.Namespace) -> int:
    from frontier.latency_models import quiet_root_logger, write_bundle

    config = load(args.config)
    writable_file(Path(args.out), "the op bundle (--out)")
    task, model, space = task_and_space(config)
    with quiet_root_logger(), usage_errors():
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
            batch_size=args.batch_size,
            half=args.half,
            qdq=args.qdq,
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


def _front_command(sub: Any) -> None:
    e = sub.add_parser(
        "front", help="pack a search's front models for the device runner on a remote device"
    )
    e.add_argument("--device", required=True, help="the device's name, as its metrics will say")
    e.add_argument("--out", required=True, help="the bundle .zip to write")
    e.add_argument("--experiment", help="MLflow experiment (default: the latest search)")
    e.add_argument("--run", help="the search's parent run id")
    e.add_argument("--tracking-uri", help="MLflow (default $MLFLOW_TRACKING_URI)")
    e.add_argument(
        "--keep-weights",
        action="store_true",
        help="pack the models' trained weights (default: stripped, drawn from a seed on the "
        "device; latency depends on their shapes, and the bundle is about 100x smaller)",
    )
    e.set_defaults(func=cmd_lut_front)


def cmd_lut_front(args: argparse.Namespace) -> int:
    import tempfile

    from frontier.latency_models import write_front_bundle

    from ..config._config import load_config

    writable_file(Path(args.out), "the front bundle (--out)")
    from ..tracking._learning import front_entries
    from ..tracking._results import query_front
    from ..tracking._tracking import MODEL_FILE, PLAN_FILE, download, download_text, resolve_uri

    uri = tracking_uri(args)
    parent, frame = query_front(uri, experiment=args.experiment, run=args.run)
    models, missing, plans = [], [], {}
    with tempfile.TemporaryDirectory(prefix="frontier-front-") as tmp:
        for run_id, trial in zip(frame["run_id"], frame["trial"], strict=True):
            try:
                got = download(uri, run_id, Path(tmp) / run_id)
            except Exception:  # a member whose export failed has no model
                missing.append(int(trial))
                continue
            models.append((run_id, got[MODEL_FILE].read_bytes()))
            plans[run_id] = json.loads(got[PLAN_FILE].read_text())
        if not models:
            raise UsageError("lut front: no front member of that search has an ONNX model")
        try:  # the plans' ops, so the device's measurements can join its table
            config = load_config(download_text(uri, parent.info.run_id, "config.json", tmp))
            entries, baseline = front_entries(config, plans)
        except Exception as err:  # the measurement still attaches to the trials
            print(f"note: the task was not rebuilt ({err}); the result will attach to the "
                  "trials, but without the baseline beside them and without joining the "
                  "device's table", file=sys.stderr)  # fmt: skip
            entries, baseline = {}, None
    source = {"parent": parent.info.run_id, "tracking_uri": resolve_uri(uri)}
    write_front_bundle(
        args.out,
        models,
        device=args.device,
        source=source,
        plans=entries,
        baseline=baseline,
        keep_weights=args.keep_weights,
    )
    print(
        f"wrote {args.out}: {len(models)} front models of search {parent.info.run_name} "
        + ("and its baseline " if baseline else "")
        + f"for {args.device}"
        + (f" (trials without a model: {missing})" if missing else "")
        + f"\nnext, on the device: python runner.py {Path(args.out).name} --device "
        f"{args.device} --out {args.device}-front.csv; then here: frontier lut import "
        f"{args.device}-front.csv"
    )
    return 0


def _measure_command(sub: Any) -> None:
    from frontier.latency_models.runner import add_measure_arguments

    e = sub.add_parser("measure", help="measure a bundle on this device (the device runner)")
    add_measure_arguments(e)
    e.set_defaults(func=cmd_lut_measure)


def cmd_lut_measure(args: argparse.Namespace) -> int:
    from frontier.latency_models import TableError
    from frontier.latency_models.runner import ERRORS, measure_from_args, summary

    try:
        print(summary(measure_from_args(args)))
    except ERRORS as err:
        raise TableError(str(err)) from None
    return 0


def _import_command(sub: Any) -> None:
    e = sub.add_parser(
        "import",
        help="validate a measured table and store it (or attach a measured front to its "
        "trials in MLflow)",
    )
    e.add_argument("table")
    e.add_argument(
        "--name", help="the device name to store it under (not for a front: its bundle names it)"
    )
    e.add_argument("--bundle", help="the bundle it measured (enables calibration)")
    e.add_argument(
        "--power-w", type=at_least(0.0, float), help="the device's active power in watts"
    )
    e.add_argument(
        "--transfer-gbps", type=at_least(1e-9, float), help="bandwidth to the offload device"
    )
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
    e.add_argument("--store", help=STORE_HELP)
    e.add_argument("--tracking-uri", help="for a front: MLflow (default: the one it came from)")
    e.add_argument(
        "--no-learn",
        action="store_true",
        help="for a front: do not add its measurements to the device's table calibration",
    )
    e.set_defaults(func=cmd_lut_import)


def _attach_front(args: argparse.Namespace) -> int | None:
    """A front measured by the runner (``lut front``): its latencies logged on each
    member's run as ``latency_measured_ms@DEVICE``; None when ``args.table`` is not one."""
    from frontier.latency_models import read_front_result

    try:
        front, measured = read_front_result(args.table)
    except ValueError:
        return None
    from ..tracking._tracking import MEASURED_PREFIX, Tag, _client, metric_key

    device = front["device"]
    uri = args.tracking_uri or front["tracking_uri"]
    client = _client(uri)
    base_key = front.get("baseline")
    base_ms = measured.get(base_key) if base_key else None
    member_metric = metric_key(f"{MEASURED_PREFIX}{device}")
    base_metric = metric_key(f"baseline_{MEASURED_PREFIX}{device}")
    for run_id, ms in measured.items():
        client.log_metric(run_id, base_metric if run_id == base_key else member_metric, ms)
    members = {k: v for k, v in measured.items() if k != base_key}
    print(
        f"attached {len(members)} measured latencies on {device} to the front of search "
        f"{front['parent']} ({uri}); frontier pareto shows them"
    )
    for run_id, ms in members.items():
        trial = client.get_run(run_id).data.tags.get(Tag.TRIAL, "?")
        gain = f", {base_ms / ms:.2f}x the baseline's speed there" if base_ms else ""
        print(f"  trial {trial} ({run_id}): {ms:.4f} ms{gain}")
    if base_ms:
        print(f"  the baseline: {base_ms:.4f} ms ({base_metric} on the search's run)")
    if not args.no_learn:
        from ..tracking._learning import learn_measured_front

        print(learn_measured_front(device_store(args), front, measured))
    return 0


def cmd_lut_import(args: argparse.Namespace) -> int:
    from frontier.latency_models import DeviceMeta, LatencyModel, read_manifest

    attached = _attach_front(args)
    if attached is not None:
        return attached
    if not args.name:
        raise UsageError("lut import: --name is required (the device to store the table under)")

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
    store = device_store(args)
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


def _list_command(sub: Any) -> None:
    e = sub.add_parser("list", help="list stored device tables")
    e.add_argument("--store", help=STORE_HELP)
    e.set_defaults(func=cmd_lut_list)


def cmd_lut_list(args: argparse.Namespace) -> int:
    store = device_store(args)
    names = store.names()
    if not names:
        print(f"no device tables in {store.root}")
    for name in names:
        s = store.load(name).summary()
        print(f"{name:<16} {s['ops']:>6} ops  {s['provider'] or '?':<22} {s['cpu'] or ''}")
    return 0


def _show_command(sub: Any) -> None:
    e = sub.add_parser("show", help="summary, coverage and unsupported ops of a table")
    e.add_argument("name")
    e.add_argument("--store", help=STORE_HELP)
    e.set_defaults(func=cmd_lut_show)


def cmd_lut_show(args: argparse.Namespace) -> int:
    from frontier.latency_models import LatencyModel

    table = device_store(args).load(args.name)
    summary = table.summary()
    summary["fallbacks"] = LatencyModel(table, calibrate=False).fallback_summary()
    summary["quality"] = LatencyModel(table).quality()
    print(json.dumps(summary, indent=2))
    for warning in summary["quality"]["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0


def _validate_command(sub: Any) -> None:
    e = sub.add_parser("validate", help="predicted vs measured whole-model latency")
    e.add_argument("config")
    e.add_argument(
        "--device", required=True, help="a stored table, or a local device (local-cpu, local-cuda)"
    )
    e.add_argument("--samples", type=at_least(1), default=50)
    e.add_argument("--out", default="lut-validation", help="directory for the CSV and PNG")
    e.add_argument("--measure", choices=["auto", "local", "table"], default="auto")
    e.add_argument("--store", help=STORE_HELP)
    e.set_defaults(func=cmd_lut_validate)


def cmd_lut_validate(args: argparse.Namespace) -> int:
    from frontier.latency_models import LatencyModel, ensure_local_table, resolve_device, validate

    config = load(args.config)
    writable(Path(args.out), "the validation report (--out)")
    task, model, space = task_and_space(config)
    store = device_store(args)
    example = task.example_inputs()
    if resolve_device(args.device).local is not None:
        table = ensure_local_table(
            model,
            example,
            space,
            store=store,
            name=args.device,
            calibration=config.local_table.calibration,
            calibration_data=task.calibration_batches(),
            rounds=config.local_table.rounds,
            round_s=config.local_table.round_s,
            calibration_budget_s=config.local_table.calibration_budget_s,
        )
    else:
        table = store.load(args.device)
    latency = LatencyModel(table)
    with usage_errors():
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
    band = latency.device_meta(model).noise_band()
    if band:
        print(f"note: {band}", file=sys.stderr)
    for warning in latency.quality()["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0
