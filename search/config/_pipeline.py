"""A pipeline of models in one config: ``pipeline:`` names the stages (each a task with
its own space, reading the frame or other stages' outputs), the devices a stage may be
placed on, the links between devices, and the frame's budget, rate and power limit.

Every rule is checked where the config is read, with the stage, device or link named:
a stage that reads a stage that does not exist, a cycle, a placement on a device the
config does not list, two placed stages whose devices have no link.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from frontier.latency_models import stage_cycle
from frontier.spaces import SpaceOptions

#: what a stage reads when it reads the camera's frame
FRAME = "frame"
_NAME = r"^[A-Za-z][\w\-]*$"


#: the pipeline's own metrics and their directions; ``STAGE.*`` metrics follow the suffix
FRAME_METRICS = {
    "latency_ms@frame": "minimize",
    "energy_mj@frame": "minimize",
    "power_w@frame": "minimize",
    "size_bytes": "minimize",
    "accuracy_kept": "maximize",
}
STAGE_METRICS = {"accuracy": "maximize", "accuracy_drop": "minimize", "latency_ms": "minimize"}
#: what a pipeline config optimises when its ``objectives`` are a single model's defaults
DEFAULT_OBJECTIVES = ("latency_ms@frame", "accuracy_kept")


def metric_direction(name: str, stages: list[str]) -> str:
    """The direction of a pipeline metric; ``ValueError`` names an unknown one."""
    if name in FRAME_METRICS:
        return FRAME_METRICS[name]
    stage, dot, metric = name.partition(".")
    if dot and stage in stages and metric in STAGE_METRICS:
        return STAGE_METRICS[metric]
    raise ValueError(
        f"{name!r} is no pipeline metric; known: {', '.join(FRAME_METRICS)}, and "
        f"STAGE.{{{','.join(STAGE_METRICS)}}} for a stage of {', '.join(stages)}"
    )


def is_pipeline_metric(name: str) -> bool:
    """Whether ``name`` reads as a pipeline's metric (``latency_ms@frame``,
    ``accuracy_kept``, ``STAGE.METRIC``: a dot before any ``@``), whatever the stages."""
    return (name in FRAME_METRICS and name != "size_bytes") or "." in name.partition("@")[0]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StageTask(_Section):
    """A stage's task: a registered name or ``pkg.mod:build``, and its options."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class StageSection(_Section):
    """One stage: its model and data (``task``), what it may compress (``space``), what
    it reads, and the devices it may run on."""

    name: str = Field(pattern=_NAME)
    task: StageTask
    space: SpaceOptions = Field(default_factory=SpaceOptions)
    #: ``frame`` or the names of the stages whose outputs it reads
    reads: list[str] = Field(default_factory=lambda: [FRAME], min_length=1)
    #: the devices it may be placed on; None: every device of the config
    placements: list[str] | None = Field(default=None, min_length=1)
    #: options of its accuracy evaluator (``steps``, ``lr``...: docs/search.md, "Objectives")
    accuracy: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _not_frame(cls, name: str) -> str:
        if name == FRAME:
            raise ValueError(f"{FRAME!r} is the camera's input; name the stage otherwise")
        return name


class LinkSection(_Section):
    """How tensors move between two devices."""

    between: tuple[str, str]
    gbps: float = Field(gt=0)
    latency_ms: float = Field(default=0.0, ge=0)
    energy_nj_per_byte: float = Field(default=0.0, ge=0)

    @field_validator("between")
    @classmethod
    def _two(cls, between: tuple[str, str]) -> tuple[str, str]:
        if between[0] == between[1]:
            raise ValueError(f"a link joins two different devices, got {list(between)}")
        return between


class PipelineSection(_Section):
    """Several models sharing one frame: searched as one (docs/pipelines.md)."""

    stages: list[StageSection] = Field(min_length=1)
    links: list[LinkSection] = Field(default_factory=list)
    #: where frames arrive; None: the first device the config lists
    frame_device: str | None = None
    #: the frame's size, handed to a stage on another device than ``frame_device``;
    #: None: the first stage's example input as its task gives it
    frame_bytes: int | None = Field(default=None, ge=0)
    #: the frame's budget, by the tables' prediction of the critical path
    budget_ms: float | None = Field(default=None, gt=0)
    #: the frame rate the pipeline must keep up with, and its power limit there
    fps: float | None = Field(default=None, gt=0)
    power_w: float | None = Field(default=None, gt=0)
    #: time each stage inside a frame of the uncompressed stages at the start, and add
    #: what the frame costs it over running alone to its table latency (docs/pipelines.md)
    stage_context: bool = True

    @model_validator(mode="after")
    def _graph(self) -> PipelineSection:
        names = [s.name for s in self.stages]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"pipeline.stages: each stage name once, got {twice} twice")
        for i, s in enumerate(self.stages):
            for r in s.reads:
                if r == s.name:
                    raise ValueError(f"pipeline.stages[{i}] ({s.name}): reads itself")
                if r != FRAME and r not in names:
                    raise ValueError(
                        f"pipeline.stages[{i}] ({s.name}): reads {r!r}, which is no stage; "
                        f"stages: {', '.join(names)} (or {FRAME!r})"
                    )
        cycle = stage_cycle({s.name: [r for r in s.reads if r != FRAME] for s in self.stages})
        if cycle:
            raise ValueError(f"pipeline.stages: {' -> '.join(cycle)} read each other in a cycle")
        if self.power_w is not None and self.fps is None:
            raise ValueError("pipeline.power_w: a power limit needs the frame rate (fps)")
        return self

    def check_devices(
        self, devices: list[str], shared_memory: set[str], implied: set[frozenset[str]]
    ) -> None:
        """Refuse placements and links on devices the config does not list, and two
        stages that hand a tensor between devices with no link between them (``implied``:
        the links a derived device has to the device it offloads to)."""
        if not devices:
            raise ValueError("pipeline: list the devices stages may run on in `devices`")
        known = set(devices)
        frame = self.frame_device or devices[0]
        if frame not in known:
            raise ValueError(
                f"pipeline.frame_device: {frame!r} is not in devices ({', '.join(devices)})"
            )
        for i, s in enumerate(self.stages):
            for d in s.placements or []:
                if d not in known:
                    raise ValueError(
                        f"pipeline.stages[{i}] ({s.name}): placement {d!r} is not one of "
                        f"the config's devices ({', '.join(devices)})"
                    )
        linked = set(implied)
        for i, link in enumerate(self.links):
            for d in link.between:
                if d not in known:
                    raise ValueError(
                        f"pipeline.links[{i}]: {d!r} is not one of the config's devices "
                        f"({', '.join(devices)})"
                    )
            linked.add(frozenset(link.between))
        where = {s.name: s.placements or devices for s in self.stages}
        where[FRAME] = [frame]
        for s in self.stages:
            for r in s.reads:
                for a in where[r]:
                    for b in where[s.name]:
                        free = a == b or (a in shared_memory and b in shared_memory)
                        if not free and frozenset((a, b)) not in linked:
                            raise ValueError(
                                f"pipeline: stage {s.name!r} may run on {b} and read "
                                f"{r!r} from {a}, but no link joins them; add "
                                f"`links: [{{between: [{a}, {b}], gbps: ...}}]` or narrow "
                                "its placements"
                            )

    def objective_names(self, names: list[str]) -> list[str]:
        """The objectives of a config's ``objectives`` names: the pipeline's defaults
        where they are a single model's defaults (not set)."""
        return list(DEFAULT_OBJECTIVES) if names == ["accuracy", "size_bytes"] else names

    def check_metrics(self, objectives: list[str], constraints: list[str]) -> None:
        """Refuse an objective or constraint that names no pipeline metric."""
        stages = [s.name for s in self.stages]
        for where, names in (
            ("objectives", self.objective_names(objectives)),
            ("constraints", constraints),
        ):
            for name in names:
                try:
                    metric_direction(name, stages)
                except ValueError as err:
                    raise ValueError(f"{where}: {err}") from None

    def placements_of(self, devices: list[str]) -> dict[str, list[str]]:
        """Each stage's devices (its ``placements``, else every device listed)."""
        return {s.name: list(s.placements or devices) for s in self.stages}
