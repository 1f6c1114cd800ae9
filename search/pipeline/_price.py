"""A pipeline's uncompressed stages priced in every placement (``frontier pipeline``):
each stage's baseline priced by its device tables on each device it may run on, every
placement scheduled (``latency_models.price_frame``), and the best against the frame's
budget, rate and power limit. What a joint search starts from, and how far it must go.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from frontier.evaluators import MetricKey

from .._log import logger
from ..config._config import HOST_KINDS, Config, DeviceSection, parse_config
from ..config._pipeline import FRAME, StageSection


@dataclass(frozen=True)
class StagePrice:
    """One stage's uncompressed model as each of its devices prices it."""

    name: str
    reads: tuple[str, ...]
    latency_ms: dict[str, float]
    energy_mj: dict[str, float]
    input_bytes: int
    output_bytes: int


@dataclass(frozen=True)
class PlacedFrame:
    """One placement of the stages and its frame's schedule."""

    placement: dict[str, str]
    estimate: Any  # latency_models.FrameEstimate


@dataclass(frozen=True)
class PipelineReport:
    """The uncompressed pipeline in every placement, fastest first.

    Attributes:
        stages: each stage's prices.
        frames: every placement and its frame, fastest first.
        budget_ms, fps, power_w: the config's frame budget, rate and power limit.
    """

    stages: tuple[StagePrice, ...]
    frames: tuple[PlacedFrame, ...]
    budget_ms: float | None
    fps: float | None
    power_w: float | None

    @property
    def best(self) -> PlacedFrame:
        return self.frames[0]

    def verdict(self) -> str:
        """The fastest placement against the budget, rate and power limit, in words."""
        est = self.best.estimate
        parts = []
        if self.budget_ms is not None:
            gap = est.latency_ms - self.budget_ms
            meets = sum(f.estimate.latency_ms <= self.budget_ms for f in self.frames)
            parts.append(
                f"budget {self.budget_ms:g} ms: {meets} of {len(self.frames)} placements meet it"
                if gap <= 0
                else f"budget {self.budget_ms:g} ms: no placement of the uncompressed stages "
                f"meets it; the fastest is {est.latency_ms:.3g} ms, {gap:.3g} ms "
                f"({gap / self.budget_ms:.0%}) over: compression must find that"
            )
        if self.fps is not None:
            parts.append(
                f"{self.fps:g} fps: the busiest device works {est.busiest_ms:.3g} ms a frame"
                + ("" if est.keeps_up(self.fps) else f", more than {1e3 / self.fps:.3g} ms")
            )
            if self.power_w is not None:
                watts = est.power_w(self.fps)
                parts.append(
                    f"power {watts:.3g} W at {self.fps:g} fps against {self.power_w:g} W"
                    + (" (over)" if watts > self.power_w else "")
                )
        return "; ".join(parts)


def stage_config(config: Config, stage: StageSection) -> Config:
    """The single-model config a stage is scored with: its task and space, accuracy at
    the pipeline's top rung, latency and energy on each device it may run on."""
    names = config.listed_devices()
    placed = stage.placements or names
    data = config.model_dump()
    own = next(s for s in data.pop("pipeline")["stages"] if s["name"] == stage.name)
    top = config.search.fidelity.rungs[-1]
    data.update(
        name=f"{config.name}.{stage.name}",
        task=own["task"],
        space=own["space"],
        objectives=[{"name": "accuracy", "options": own["accuracy"]}, {"name": "size_bytes"}]
        + [{"name": MetricKey.name("latency_ms", d)} for d in placed]
        + [{"name": MetricKey.name("energy_mj", d)} for d in placed],
        constraints=[],
        metrics=[],
    )
    data["search"]["fidelity"] = {**data["search"]["fidelity"], "rungs": [top], "toward": None}
    data["tracking"] = {**data["tracking"], "export_front": False}
    return parse_config(data, source=f"pipeline.stages ({stage.name})")


def tensor_bytes(value: Any) -> int:
    """The bytes of a model's input or output: tensors, tuples, lists and dicts of them."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, Mapping):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(v) for v in value)
    return 0


def price_stage(config: Config, stage: StageSection, store: Any = None) -> StagePrice:
    """One stage's uncompressed model priced on each device it may run on (tables
    measured here the first time a local device prices it, as a search does)."""
    import torch

    from frontier.latency_models import DeviceStore, LatencyModel
    from frontier.spaces import CompressionPlan, check_forward

    from ..run._setup import task_and_space
    from ..trials._trials import resolve_tables

    sub = stage_config(config, stage)
    task, model, space = task_and_space(sub)
    example = task.example_inputs()
    tables = resolve_tables(
        sub, (task, model, example, space), store or DeviceStore(sub.device_store)
    )
    with torch.no_grad():
        output = check_forward(model.eval(), example)
    latency, energy = {}, {}
    for name in stage.placements or sub.device_names():
        table = tables[name]
        offload = table.device_meta.offload_device
        lm = LatencyModel(table, offload=tables.get(offload) if offload else None)
        lm.bind(model, example, space)
        est = lm.predict(model, CompressionPlan())
        latency[name] = est.latency_ms
        energy[name] = est.energy_mj or 0.0
        logger.info(f"pipeline: {stage.name} on {name}: {est.latency_ms:.4g} ms uncompressed")
    return StagePrice(
        stage.name, tuple(stage.reads), latency, energy, tensor_bytes(example), tensor_bytes(output)
    )


def links_of(config: Config) -> Any:
    """The pipeline's links (``latency_models.Links``): those it lists, each derived
    device's to the device it offloads to, and this host's devices on shared memory."""
    from frontier.latency_models import Link, Links

    assert config.pipeline is not None
    links = [
        Link(k.between[0], k.between[1], k.gbps, k.latency_ms, k.energy_nj_per_byte)
        for k in config.pipeline.links
    ]
    listed = {frozenset(k.between) for k in config.pipeline.links}
    for d in config.devices:
        if isinstance(d, DeviceSection) and frozenset((d.name, d.offload or d.like)) not in listed:
            links.append(Link(d.name, d.offload or d.like, d.transfer_gbps))
    names = config.listed_devices()
    here = [config.typed.device(n).local for n in names]
    shared = [h.name for h in here if h is not None and h.kind in HOST_KINDS]
    return Links(links, shared_memory=shared)


def schedule(
    config: Config,
    placement: Mapping[str, str],
    latency_ms: Mapping[str, float],
    energy_mj: Mapping[str, float],
    output_bytes: Mapping[str, int],
    frame_bytes: int,
) -> Any:
    """One frame of ``config``'s pipeline with its stages placed and priced
    (``latency_models.FrameEstimate``); every placement and trial is scheduled here."""
    from frontier.latency_models import StageCost, price_frame

    assert config.pipeline is not None
    costs = [
        StageCost(
            s.name,
            placement[s.name],
            latency_ms[s.name],
            energy_mj.get(s.name, 0.0),
            tuple(s.reads),
            output_bytes[s.name],
        )
        for s in config.pipeline.stages
    ]
    frame_device = config.pipeline.frame_device or config.listed_devices()[0]
    return price_frame(costs, links_of(config), frame_device=frame_device, frame_bytes=frame_bytes)


def frames(config: Config, prices: list[StagePrice]) -> Iterator[PlacedFrame]:
    """Every placement of the priced stages and its frame."""
    from frontier.latency_models import placements

    assert config.pipeline is not None
    by_name = {p.name: p for p in prices}
    first = next(p for p in prices if FRAME in p.reads)
    given = config.pipeline.frame_bytes
    frame_bytes = given if given is not None else first.input_bytes
    output_bytes = {p.name: p.output_bytes for p in prices}
    for placement in placements({p.name: list(p.latency_ms) for p in prices}):
        latency = {n: by_name[n].latency_ms[d] for n, d in placement.items()}
        energy = {n: by_name[n].energy_mj[d] for n, d in placement.items()}
        est = schedule(config, placement, latency, energy, output_bytes, frame_bytes)
        yield PlacedFrame(placement, est)


def price_pipeline(config: Config, *, store: Any = None) -> PipelineReport:
    """The uncompressed pipeline of ``config`` priced in every placement.

    Args:
        config: a config with a ``pipeline`` section.
        store: a DeviceStore (default: ``config.device_store`` or the user's data dir).
    """
    pipeline = config.pipeline
    if pipeline is None:
        raise ValueError(f"config {config.name!r} has no pipeline section")
    prices = [price_stage(config, s, store) for s in pipeline.stages]
    every = sorted(
        frames(config, prices),
        key=lambda f: (f.estimate.latency_ms, f.estimate.energy_mj),
    )
    return PipelineReport(
        tuple(prices), tuple(every), pipeline.budget_ms, pipeline.fps, pipeline.power_w
    )
