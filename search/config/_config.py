"""The config file: one YAML format for everything the ``frontier`` command does.

Validated with pydantic; every error names the file, the field and the value. Built-in
configs load by name (``digits-mcu``), others by path.

Over 500 lines: one pydantic model per config section, each validated where it is
declared so an error names its field; the pipeline section lives in ``_pipeline``.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from frontier.evaluators import MetricKey
from frontier.latency_models import Device
from frontier.latency_models.runner import ROUND_S, ROUNDS
from frontier.spaces import SpaceOptions

from ._constraints import Constraint
from ._pipeline import PipelineSection, is_pipeline_metric
from ._registries import backend_names, sampler_names
from ._uri import check_tracking_uri

#: local runtimes that run in this host's memory: their stages hand tensors over for free
HOST_KINDS = ("cpu", "openvino")


class ConfigError(ValueError):
    """A config file cannot be read or breaks a rule; names the file, field and value."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSection(_Section):
    """Which task: a registered name (``digits``) or a Python path (``pkg.mod:build``)."""

    name: str = "digits"
    options: dict[str, Any] = Field(default_factory=dict)
    #: stop before searching when the baseline scores about what chance does
    check_baseline: bool = True
    #: a state dict (``torch.save``) loaded into the task's baseline model, which is then
    #: the teacher and the model compressed: e.g. the weights a search saved for the
    #: trial that beat an under-trained baseline (``teacher-NAME-trial-N.pt``)
    teacher: str | None = None


class CarbonSection(_Section):
    """The deployment scenario priced by the ``co2e_g`` objective."""

    inferences_per_day: float = Field(default=1e6, gt=0)
    days: float = Field(default=365.0, gt=0)
    country_iso: str = Field(default="FRA", min_length=3, max_length=3)
    cloud: str | None = None
    pue: float = Field(default=1.0, ge=1.0)
    intensity_g_per_kwh: float | None = Field(default=None, ge=0)
    #: prices for the money a front member saves over the deployment (``pick``,
    #: ``pareto --savings``): per kWh, and per busy hour of a serving instance
    price_per_kwh: float | None = Field(default=None, ge=0)
    price_per_instance_hour: float | None = Field(default=None, ge=0)

    def scenario(self) -> Any:
        from frontier.evaluators import CarbonScenario

        return CarbonScenario(
            **self.model_dump(exclude={"price_per_kwh", "price_per_instance_hour"})
        )


def _check_objective_name(name: str) -> str:
    from frontier.evaluators import MetricKey, evaluator_names

    if is_pipeline_metric(name):  # checked against the stages with the pipeline section
        return name
    key = MetricKey.parse(name)
    base, device = key.metric, key.device
    if base not in evaluator_names():
        raise ValueError(f"unknown objective {base!r}; known: {', '.join(evaluator_names())}")
    if base in ("latency_ms", "energy_mj") and not device:
        raise ValueError(f"{base} needs a device: {base}@DEVICE (e.g. {base}@local-cpu)")
    return name


class ObjectiveSection(_Section):
    """One objective: an evaluator name (``latency_ms@local-cpu``) and its options."""

    name: str
    direction: Literal["minimize", "maximize"] | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return _check_objective_name(name)


class FidelitySection(_Section):
    """The accuracy rungs, cheapest first, and the share of each rung's front promoted."""

    rungs: list[Literal["proxy", "short", "full"]] = Field(default=["short", "full"], min_length=1)
    promote: float = Field(default=0.25, gt=0, le=1)
    #: below the top rung, a plan missing an accuracy constraint by at most this share
    #: of its bound may still be promoted (the front keeps the constraint)
    slack: float = Field(default=0.0, ge=0, lt=1)
    #: an objective to promote from its best end (the quota goes to the fastest members
    #: for ``latency_ms@local-cpu``); None spreads the quota along the first objective
    toward: str | None = None
    #: where no compressed plan meets the accuracy bound at a rung, measure its most
    #: accurate plans a rung up and promote by the shortfall seen (see SpreadPromotion)
    adapt: bool = True
    #: before the search returns, every front member below the top rung is measured at
    #: the top rung (its values there replace the cheap rung's), so the front a user
    #: picks from was all trained alike; False leaves them, marked ``finished: false``
    finish: bool = True

    @field_validator("rungs")
    @classmethod
    def _ordered(cls, rungs: list[str]) -> list[str]:
        order = ["proxy", "short", "full"]
        if [order.index(r) for r in rungs] != sorted({order.index(r) for r in rungs}):
            raise ValueError(
                f"rungs must be distinct and ordered proxy < short < full, got {rungs}"
            )
        return rungs


class SearchSection(_Section):
    #: a name from the sampler registry (``frontier.search.sampler_names()``)
    sampler: str = "nsga2"
    trials: int = Field(default=200, ge=1)
    seed: int = 0
    population: int = Field(default=20, ge=2)
    anchors: bool = True
    #: measure per-layer sensitivity (``frontier sensitivity``) first, cached, and
    #: record it in MLflow (``sensitivity.json``, ``sensitivity.png``)
    sensitivity: bool = False
    fidelity: FidelitySection = Field(default_factory=FidelitySection)

    @field_validator("sampler")
    @classmethod
    def _known_sampler(cls, v: str) -> str:
        if v not in sampler_names():
            raise ValueError(f"unknown sampler {v!r}; known: {', '.join(sampler_names())}")
        return v


class BackendSection(_Section):
    #: a name from the backend registry (``frontier.search.backend_names()``)
    kind: str = "local"
    workers: int = Field(default=1, ge=1)
    address: str | None = None
    cpus_per_trial: float = Field(default=1.0, gt=0)
    gpus_per_trial: float = Field(default=0.0, ge=0)
    max_retries: int = Field(default=2, ge=0)
    #: torch intra-op threads per trial (docs/search.md, "Threads"); None keeps torch's default
    threads_per_trial: int | None = Field(default=1, ge=1)
    #: where trials train and are scored: ``auto`` (a GPU where the trial's worker has
    #: one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N`` (docs/search.md, "Accelerators")
    accelerator: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    #: bf16 autocast of training forward passes: ``auto`` (on a GPU that supports it,
    #: off on the CPU), ``bf16`` or ``off``
    mixed_precision: Literal["auto", "bf16", "off"] = "auto"

    @field_validator("kind")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in backend_names():
            raise ValueError(f"unknown backend {v!r}; known: {', '.join(backend_names())}")
        return v


class DeviceSection(_Section):
    """A device priced from another device's table, with op kinds it cannot run: those
    run on ``offload`` (default: ``like``) and pay for moving their tensors there and
    back at ``transfer_gbps``. An accelerator that lacks an activation, say."""

    name: str = Field(pattern=r"^[A-Za-z0-9][\w.\-]*$")
    like: str
    unsupported: list[str] = Field(default_factory=list)
    offload: str | None = None
    transfer_gbps: float = Field(default=1.0, gt=0)


#: A device by name, or one derived from another device's table (errors name the kind).
DeviceEntry = Annotated[
    Annotated[str, Tag("name")] | Annotated[DeviceSection, Tag("derived")],
    Discriminator(lambda v: "name" if isinstance(v, str) else "derived"),
]


class LocalTableSection(_Section):
    """How ``local-cpu`` tables are measured the first time a search targets them."""

    #: None: 200 for a model of at most 10 M MACs (as many as 60 s of building and
    #: timing allow, at least 60), else 60 (``default_calibration``); a count is kept
    calibration: int | None = Field(default=None, ge=0)
    #: when ``calibration`` is None, at most this many seconds of building and timing
    #: calibration models (at least 30 models). A quicker first table, at a cost: on a
    #: MobileNetV3 space, 60 s kept 90 of 200 models and random plans went from 2.8% to
    #: 6.6% MAPE (benchmarks/REPORT.md, "A first table in minutes"); None: the default
    #: above (``calibration: 200`` for all 200 whatever they take)
    calibration_budget_s: float | None = Field(default=None, gt=0)
    #: the timing protocol's rounds and seconds per visit (``runner.time_models``)
    rounds: int = Field(default=ROUNDS, ge=1)
    round_s: float = Field(default=ROUND_S, gt=0)


class TrackingSection(_Section):
    uri: str = "sqlite:///mlflow.db"
    experiment: str | None = None
    export_front: bool = True
    #: at the end, score each front member on the test split (``accuracy_test``,
    #: reported only, never read by what chooses models)
    test_front: bool = True
    #: at the end, time each front member on the devices measured here (local-cpu)
    measure_front: bool = True
    #: and profile each member layer by layer beside the baseline (``frontier profile``),
    #: logged as its run's ``profile/`` artifacts
    profile_front: bool = True
    #: and add the measured members to the device table's calibration, so the next
    #: search prices plans where this one went (``frontier search --no-learn``: off)
    learn_front: bool = True
    #: MLflow writes at once (each trial's in order): None is 4 against a tracking
    #: server (round trips overlap) and 1 for a local database
    write_lanes: int | None = Field(default=None, ge=1, le=32)

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        return check_tracking_uri(v)


class Config(_Section):
    """A whole Frontier config."""

    name: str = "experiment"
    description: str = ""
    #: Python modules imported before the rest is validated, in the driver and in every
    #: worker: where a technique, task, sampler or evaluator of your own registers itself
    plugins: list[str] = Field(default_factory=list)
    task: TaskSection = Field(default_factory=TaskSection)
    #: the space section is ``SpaceOptions`` itself: one schema, validated by pydantic
    space: SpaceOptions = Field(default_factory=SpaceOptions)
    carbon: CarbonSection = Field(default_factory=CarbonSection)
    objectives: list[ObjectiveSection] = Field(
        default_factory=lambda: [
            ObjectiveSection(name="accuracy"),
            ObjectiveSection(name="size_bytes"),
        ],
        min_length=1,
    )
    constraints: list[str] = Field(default_factory=list)
    metrics: list[str] = Field(default_factory=list)
    devices: list[DeviceEntry] = Field(default_factory=list)
    device_store: str | None = None
    local_table: LocalTableSection = Field(default_factory=LocalTableSection)
    search: SearchSection = Field(default_factory=SearchSection)
    backend: BackendSection = Field(default_factory=BackendSection)
    storage: str | None = None
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    #: several models sharing one frame, each stage placed on one of ``devices``
    #: (docs/pipelines.md); None: one model, ``task``
    pipeline: PipelineSection | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][\w.\-]*", name):
            raise ValueError("name must be letters, digits, '_', '-' or '.'")
        return name

    @field_validator("objectives", mode="before")
    @classmethod
    def _shorthand(cls, values: Any) -> Any:
        if isinstance(values, list):
            return [{"name": v} if isinstance(v, str) else v for v in values]
        return values

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, values: list[str]) -> list[str]:
        for v in values:
            _check_objective_name(v)
        return values

    @field_validator("constraints")
    @classmethod
    def _constraints(cls, values: list[str]) -> list[str]:
        for v in values:
            _check_objective_name(Constraint.parse(v).objective)
        return values

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        names = [o.name for o in self.objectives]
        if len(set(names)) != len(names):
            raise ValueError(f"objectives: each objective once, got {names}")
        if self.backend.kind == "local" and self.backend.address:
            raise ValueError("backend.address needs backend.kind: ray")
        if self.pipeline is not None:
            self._check_pipeline(self.pipeline)
        else:
            for name in names + [Constraint.parse(c).objective for c in self.constraints]:
                if is_pipeline_metric(name):
                    raise ValueError(
                        f"{name!r} is a pipeline's metric; this config has no pipeline"
                    )
        toward = self.search.fidelity.toward
        if toward is not None and toward not in names:
            raise ValueError(
                f"search.fidelity.toward: {toward!r} is not an objective; one of {names}"
            )
        return self

    def listed_devices(self) -> list[str]:
        """The names ``devices`` lists, in its order (a pipeline's placements)."""
        return [d.name if isinstance(d, DeviceSection) else d for d in self.devices]

    def _check_pipeline(self, pipeline: PipelineSection) -> None:
        from frontier.latency_models import resolve_device

        names = self.listed_devices()
        # processes of this host hand tensors over in memory; a derived device reaches
        # the device it offloads to over its own link
        here = [resolve_device(n).local for n in names]
        shared = {h.name for h in here if h is not None and h.kind in HOST_KINDS}
        implied = {
            frozenset((d.name, d.offload or d.like))
            for d in self.devices
            if isinstance(d, DeviceSection)
        }
        pipeline.check_devices(names, shared, implied)
        pipeline.check_metrics(
            [o.name for o in self.objectives],
            [Constraint.parse(c).objective for c in self.constraints],
        )

    def override(self, values: dict[str, Any], *, source: str = "command line") -> Config:
        """A copy with dotted fields replaced (``{"search.trials": 5}``), validated like
        a file: errors name ``source`` and the field. ``None`` values are ignored."""
        data = self.model_dump()
        for dotted, value in values.items():
            if value is None:
                continue
            *path, last = dotted.split(".")
            node = data
            for i, key in enumerate(path):
                child = node.get(key) if isinstance(node, dict) else None
                if not isinstance(child, dict):
                    raise ConfigError(
                        f"{source}: {'.'.join(path[: i + 1])}: not a section, "
                        f"so {dotted!r} cannot be set"
                    )
                node = child
            node[last] = value
        return parse_config(data, source=source)

    @functools.cached_property
    def typed(self) -> TypedConfig:
        """The config's typed parts, worked out once: what every part of the search reads
        (constraints, metric names, devices)."""
        from frontier.evaluators import MetricKey
        from frontier.latency_models import resolve_device

        constraints = tuple(Constraint.parse(c) for c in self.constraints)
        metrics = [o.name for o in self.objectives]
        for extra in [c.objective for c in constraints] + self.metrics:
            if extra not in metrics:
                metrics.append(extra)
        derived = {d.name: d for d in self.devices if isinstance(d, DeviceSection)}
        found: list[str] = []
        for d in self.devices:
            if isinstance(d, DeviceSection):
                for base in (d.like, d.offload or d.like):
                    if base not in found:
                        found.append(base)
            name = d.name if isinstance(d, DeviceSection) else d
            if name not in found:
                found.append(name)
        keys = tuple(MetricKey.parse(m) for m in metrics)
        for key in keys:
            if key.device and key.device not in ("worst", "frame") and key.device not in found:
                found.append(key.device)
        return TypedConfig(
            constraints=constraints,
            metrics=keys,
            derived=derived,
            devices=tuple(resolve_device(n, derived) for n in found),
        )

    def parsed_constraints(self) -> list[Constraint]:
        return list(self.typed.constraints)

    def metric_names(self) -> list[str]:
        """Objectives first, then what only a constraint or ``metrics`` names (recorded
        with every trial, not optimised)."""
        return [str(k) for k in self.typed.metrics]

    def derived_devices(self) -> dict[str, DeviceSection]:
        """The devices ``devices`` defines from another device's table, by name."""
        return dict(self.typed.derived)

    def device_names(self) -> list[str]:
        """Every device an objective, a constraint or ``devices`` names (not ``worst``);
        the tables a derived device borrows come before it."""
        return [d.name for d in self.typed.devices]


@dataclass(frozen=True)
class TypedConfig:
    """A config resolved into its typed parts, once (``Config.typed``).

    Attributes:
        constraints: its constraints, parsed.
        metrics: every metric it records (objectives first), parsed.
        derived: the devices ``devices`` derives from another's table, by name.
        devices: every device it names, resolved (``latency_models.Device``), the tables
            a derived device borrows first.
    """

    constraints: tuple[Constraint, ...]
    metrics: tuple[MetricKey, ...]
    derived: dict[str, DeviceSection]
    devices: tuple[Device, ...]

    def device(self, name: str) -> Device:
        """The device ``name`` names, as resolved once with the config (a name the config
        does not list, a pipeline's or a result's, is resolved the same way)."""
        for d in self.devices:
            if d.name == name:
                return d
        from frontier.latency_models import resolve_device

        return resolve_device(name, self.derived)


def _format_errors(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        if not loc:  # a rule across sections: its message names the fields
            lines.append(f"{source}: {msg}")
            continue
        shown = f" (got {value!r})" if e["type"] != "missing" and "got " not in msg else ""
        if e["type"] == "extra_forbidden":
            msg, shown = "unknown field", ""
        lines.append(f"{source}: {loc}: {msg}{shown}")
    return "\n".join(lines)


def import_plugins(plugins: Any, *, source: str = "<config>") -> None:
    """Import a config's ``plugins`` (module names) so that what they register is known
    when the rest of the config is validated; errors name ``source`` and the entry."""
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"{source}: plugins: a list of Python module names, got {plugins!r}")
    for i, name in enumerate(plugins):
        try:
            importlib.import_module(name)
        except Exception as err:
            raise ConfigError(
                f"{source}: plugins[{i}]: cannot import {name!r} ({type(err).__name__}: {err}); "
                "a plugin must be importable where the search and its workers run "
                "(PYTHONPATH=. for a module in this folder)"
            ) from err


def parse_config(data: Any, *, source: str = "<config>") -> Config:
    """Validate already-loaded config data, its ``plugins`` imported first; errors name
    ``source`` and the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a config must be a mapping, got {type(data).__name__}")
    import_plugins(data.get("plugins", []), source=source)
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(source, err)) from None


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``FIELD=VALUE`` pairs (``--set``) as ``Config.override`` values; values are read
    as YAML (numbers, lists, null), so ``search.fidelity.rungs=[proxy,short]`` works."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE, e.g. search.trials=50")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ConfigError(
                f"--set {item!r}: the value is not valid YAML ({yaml_problem(err)})"
            ) from None
    return out


def yaml_problem(err: yaml.YAMLError, *, with_place: bool = False) -> str:
    """A PyYAML error in one line: ``LINE:COL: not valid YAML: what`` (lines and columns
    from 1) where ``with_place``, else what; never PyYAML's excerpt with its caret."""
    mark = getattr(err, "problem_mark", None)
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    if context:
        what = f"{what} ({context})"
    if not with_place:
        return str(what)
    place = f"{mark.line + 1}:{mark.column + 1}:" if mark is not None else ""
    return f"{place} not valid YAML: {what}"


def config_from_json(text: str, *, source: str = "<config>") -> Config:
    """A config sent as ``Config.model_dump_json()`` (to a worker), plugins imported."""
    return parse_config(json.loads(text), source=source)


def load_config(name_or_path: str | Path) -> Config:
    """Load a config by path, or a built-in one by name (see ``frontier experiments list``)."""
    from frontier.experiments import builtin_configs

    path = Path(name_or_path)
    if not path.exists():
        builtins = builtin_configs()
        if str(name_or_path) not in builtins:
            raise ConfigError(
                f"{name_or_path}: no such file and no built-in experiment of that name; "
                f"built-in: {', '.join(builtins) or 'none'}"
            )
        path = builtins[str(name_or_path)]
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give the config file (YAML) in it")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except DuplicateKeyError as err:
        raise ConfigError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}:{yaml_problem(err, with_place=True)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (UTF-8 YAML); is it the config?") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err}") from err
    if data is None:
        raise ConfigError(
            f"{path}: the file is empty; a config names at least its task and objectives "
            "(`frontier experiments list` shows built-in ones to start from)"
        )
    config = parse_config(data, source=str(path))  # the fields' own errors first
    if "task" not in data and "pipeline" not in data:
        raise ConfigError(
            f"{path}: no task: a config names the model and data it compresses, e.g. "
            "`task: {name: digits}` or `task: {name: my_pkg.tasks:build}` (docs/tasks.md)"
        )
    return config


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping names the same key twice (YAML keeps the last, silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping with its line."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKeyError(
                    f"line {line}: key {key!r} is given twice (first on line {seen[key]}); keep one"
                )
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)
