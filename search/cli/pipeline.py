"""``frontier pipeline``: a pipeline config's uncompressed stages priced in every
placement, the fastest placements' schedules, and how far they are from the frame's
budget, rate and power limit."""

from __future__ import annotations

import argparse
import json
from typing import Any

from frontier.latency_models.runner import at_least

from ..pipeline._price import PipelineReport, price_pipeline
from ._common import CONFIG_HELP, UsageError, load


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "pipeline",
        help="price a pipeline's uncompressed stages in every placement against its frame budget",
    )
    p.add_argument("config", help=CONFIG_HELP)
    p.add_argument(
        "--store",
        help="the device store whose tables price the stages (default: the config's "
        "device_store, else $FRONTIER_DATA_DIR); local devices are measured there",
    )
    p.add_argument(
        "--top", type=at_least(1), default=3, help="placements shown, fastest first (default 3)"
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from frontier.latency_models import DeviceStore

    config = load(args.config)
    if config.pipeline is None:
        raise UsageError(
            f"{args.config}: no pipeline section; `frontier pipeline` prices several "
            "stages (docs/pipelines.md), `frontier plan` one model"
        )
    report = price_pipeline(config, store=DeviceStore(args.store or config.device_store))
    if args.format == "json":
        print(json.dumps(as_json(report, args.top), indent=2))
    else:
        print(as_text(report, args.top))
    return 0


def as_json(report: PipelineReport, top: int) -> dict[str, Any]:
    return {
        "stages": [
            {
                "name": s.name,
                "reads": list(s.reads),
                "latency_ms": s.latency_ms,
                "energy_mj": s.energy_mj,
                "output_bytes": s.output_bytes,
            }
            for s in report.stages
        ],
        "placements": [
            {
                "placement": f.placement,
                "latency_ms@frame": f.estimate.latency_ms,
                "energy_mj@frame": f.estimate.energy_mj,
                "busiest_ms": f.estimate.busiest_ms,
                "critical_path": list(f.estimate.critical),
                **({"power_w@frame": f.estimate.power_w(report.fps)} if report.fps else {}),
            }
            for f in report.frames[:top]
        ],
        "placements_priced": len(report.frames),
        "verdict": report.verdict(),
    }


def as_text(report: PipelineReport, top: int) -> str:
    lines = ["stage        " + "".join(f"{d:>16}" for d in _devices(report)) + "   (ms)"]
    for s in report.stages:
        cells = "".join(
            f"{s.latency_ms[d]:>16.4g}" if d in s.latency_ms else f"{'-':>16}"
            for d in _devices(report)
        )
        lines.append(f"{s.name:<13}{cells}")
    lines.append("")
    for k, f in enumerate(report.frames[:top], 1):
        est = f.estimate
        where = ", ".join(f"{n} on {d}" for n, d in f.placement.items())
        lines.append(f"{k}. {est.latency_ms:.4g} ms, {est.energy_mj:.4g} mJ a frame: {where}")
        for name in f.placement:
            lines.append(
                f"     {name:<12} {est.start_ms[name]:>9.4g} -> {est.end_ms[name]:<9.4g} ms"
            )
        for c in est.copies:
            lines.append(
                f"     copy {c.source}->{c.target} {c.size_bytes} bytes over {c.link}: "
                f"{c.start_ms:.4g} -> {c.end_ms:.4g} ms"
            )
        lines.append(f"     critical path: {' -> '.join(est.critical)}")
    lines.append(f"({len(report.frames)} placements priced)")
    verdict = report.verdict()
    if verdict:
        lines.append(verdict)
    return "\n".join(lines)


def _devices(report: PipelineReport) -> list[str]:
    seen: list[str] = []
    for s in report.stages:
        seen += [d for d in s.latency_ms if d not in seen]
    return seen
