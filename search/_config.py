"""The config file: one YAML format for everything the ``frontier`` command does.

Validated with pydantic; every error names the file, the field and the value. Built-in
configs load by name (``digits-mcu``), others by path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from frontier.spaces import SUPPORTED_BITS, DistillOptions, SpaceOptions, StudentSpec


class ConfigError(ValueError):
    """A config file cannot be read or breaks a rule; names the file, field and value."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSection(_Section):
    """Which task: a registered name (``digits``) or a Python path (``pkg.mod:build``)."""

    name: str = "digits"
    options: dict[str, Any] = Field(default_factory=dict)


class DistillSection(_Section):
    temperatures: list[float] = Field(default=[2.0, 4.0, 8.0], min_length=1)
    alphas: list[float] = Field(default=[0.5, 0.9], min_length=1)
    optional: bool = True

    @field_validator("temperatures")
    @classmethod
    def _positive(cls, values: list[float]) -> list[float]:
        for v in values:
            if v <= 0:
                raise ValueError(f"temperatures must be > 0, got {v}")
        return values

    @field_validator("alphas")
    @classmethod
    def _unit(cls, values: list[float]) -> list[float]:
        for v in values:
            if not 0 <= v <= 1:
                raise ValueError(f"alphas must be in [0, 1], got {v}")
        return values


class StudentSection(_Section):
    family: str
    width_mult: float = Field(default=1.0, gt=0)
    depth_mult: float = Field(default=1.0, gt=0)


class SpaceSection(_Section):
    """The search space: grids, rounding, importance, layer selection, ties."""

    prune_ratios: list[float] = Field(
        default=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], min_length=1
    )
    weight_bits: list[int] = Field(default=[4, 8, 16, 32], min_length=1)
    act_bits: list[int] = Field(default=[8, 32], min_length=1)
    sparsity: list[float] = Field(default=[0.0], min_length=1)
    round_to: int = Field(default=1, ge=1)
    importance: Literal["l1", "taylor", "bn_scale"] = "l1"
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    ties: dict[str, str] = Field(default_factory=dict)
    distill: DistillSection | None = None
    students: list[StudentSection] = Field(default_factory=list)

    @field_validator("prune_ratios", "sparsity")
    @classmethod
    def _ratios(cls, values: list[float]) -> list[float]:
        for v in values:
            if not 0 <= v < 1:
                raise ValueError(f"values must be in [0, 1), got {v}")
        return values

    @field_validator("weight_bits", "act_bits")
    @classmethod
    def _bits(cls, values: list[int]) -> list[int]:
        for v in values:
            if v not in SUPPORTED_BITS:
                raise ValueError(f"bit widths must be among {list(SUPPORTED_BITS)}, got {v}")
        return values

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, values: list[str]) -> list[str]:
        import re

        for v in values:
            try:
                re.compile(v)
            except re.error as err:
                raise ValueError(f"{v!r} is not a valid regex ({err})") from err
        return values

    @field_validator("ties")
    @classmethod
    def _tie_regexes(cls, ties: dict[str, str]) -> dict[str, str]:
        cls._regexes(list(ties.values()))
        return ties

    def options(self) -> SpaceOptions:
        """The ``SpaceOptions`` this section describes."""
        return SpaceOptions(
            prune_ratios=tuple(self.prune_ratios),
            weight_bits=tuple(self.weight_bits),
            act_bits=tuple(self.act_bits),
            sparsity=tuple(self.sparsity),
            round_to=self.round_to,
            importance=self.importance,
            include=tuple(self.include),
            exclude=tuple(self.exclude),
            ties=dict(self.ties),
            distill=None
            if self.distill is None
            else DistillOptions(
                temperatures=tuple(self.distill.temperatures),
                alphas=tuple(self.distill.alphas),
                optional=self.distill.optional,
            ),
            students=tuple(
                StudentSpec(s.family, s.width_mult, s.depth_mult) for s in self.students
            ),
        )


class CarbonSection(_Section):
    """The deployment scenario priced by the ``co2e_g`` objective."""

    inferences_per_day: float = Field(default=1e6, gt=0)
    days: float = Field(default=365.0, gt=0)
    country_iso: str = Field(default="FRA", min_length=3, max_length=3)
    cloud: str | None = None
    pue: float = Field(default=1.0, ge=1.0)
    intensity_g_per_kwh: float | None = Field(default=None, ge=0)

    def scenario(self) -> Any:
        from frontier.evaluators import CarbonScenario

        return CarbonScenario(**self.model_dump())


class Config(_Section):
    """A whole Frontier config. Later sections (objectives, search, ...) extend it."""

    name: str = "experiment"
    description: str = ""
    task: TaskSection = Field(default_factory=TaskSection)
    space: SpaceSection = Field(default_factory=SpaceSection)
    carbon: CarbonSection = Field(default_factory=CarbonSection)


def _format_errors(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        shown = f" (got {value!r})" if e["type"] != "missing" else ""
        if e["type"] == "extra_forbidden":
            msg, shown = "unknown field", ""
        lines.append(f"{source}: {loc}: {msg}{shown}")
    return "\n".join(lines)


def parse_config(data: Any, *, source: str = "<config>") -> Config:
    """Validate already-loaded config data; errors name ``source`` and the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a config must be a mapping, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(source, err)) from None


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
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err}") from err
    return parse_config(data, source=str(path))
