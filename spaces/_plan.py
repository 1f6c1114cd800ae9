"""The compression plan: pure data saying how one candidate is compressed.

A plan is keyed by fully-qualified module names (strings survive deepcopy, pickling,
Ray workers and MLflow params) and round-trips through JSON with a format version.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._registry import Registry

PLAN_FORMAT_VERSION = 4
#: Plan formats this Frontier reads (1 had no unstructured sparsity, 3 no registered
#: techniques).
READABLE_PLAN_FORMATS = (1, 2, 3, 4)

#: Bit widths Frontier can simulate. 32 means "left in FP32", 16 half-precision weights.
SUPPORTED_BITS: tuple[int, ...] = (2, 3, 4, 5, 6, 7, 8, 16, 32)

#: Importance criteria for choosing which channels a structured prune removes.
IMPORTANCE_CRITERIA: tuple[str, ...] = ("l1", "taylor", "bn_scale")


class PlanError(ValueError):
    """A plan (or its JSON form) breaks a rule; the message names the field and value."""


def _nearest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def check_ratio(field_name: str, ratio: float) -> None:
    """Raise PlanError unless ``ratio`` is a finite number in [0, 1)."""
    if isinstance(ratio, bool) or not isinstance(ratio, int | float):
        raise PlanError(f"{field_name}: ratio must be a number, got {ratio!r}")
    if not (math.isfinite(ratio) and 0.0 <= ratio < 1.0):
        raise PlanError(f"{field_name}: ratio must be in [0, 1), got {ratio!r}")


def check_bits(field_name: str, bits: int, allowed: Iterable[int] = SUPPORTED_BITS) -> None:
    """Raise PlanError unless ``bits`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in allowed:
        raise PlanError(f"{field_name}: bit width must be one of {list(allowed)}, got {bits!r}")


def _check_list(
    field_name: str, value: Any, what: str, example: str, error: type[ValueError]
) -> None:
    """Raise ``error`` unless ``value`` is a list (a string or a single number is not)."""
    if isinstance(value, str | bytes | int | float) or not hasattr(value, "__iter__"):
        raise error(f"{field_name} must be a list of {what}, e.g. {example}; got {value!r}")


def check_ratios(
    field_name: str,
    ratios: Iterable[float],
    *,
    noun: str = "ratio",
    example: str = "[0.0, 0.5]",
    error: type[ValueError] = PlanError,
) -> None:
    """Raise ``error`` unless ``ratios`` lists at least one ``noun``; PlanError unless
    each is a ratio (``check_ratio``)."""
    _check_list(field_name, ratios, f"{noun}s", example, error)
    ratios = tuple(ratios)
    if not ratios:
        raise error(f"{field_name} must list at least one {noun}, e.g. {example}")
    for r in ratios:
        check_ratio(field_name, r)


def check_bit_widths(
    field_name: str, bits: Iterable[int], *, error: type[ValueError] = PlanError
) -> None:
    """Raise ``error`` unless ``bits`` lists at least one bit width; PlanError unless
    each is a supported one (``check_bits``)."""
    _check_list(field_name, bits, "bit widths", "[8, 32]", error)
    bits = tuple(bits)
    if not bits:
        raise error(f"{field_name} must list at least one bit width, e.g. [8, 32]")
    for b in bits:
        check_bits(field_name, b, SUPPORTED_BITS)


@dataclass(frozen=True)
class DistillSpec:
    """Knowledge-distillation settings of a plan.

    Args:
        temperature: softmax temperature T (> 0) applied to teacher and student logits.
        alpha: weight of the distillation term in [0, 1]; 1 - alpha weighs cross-entropy.
    """

    temperature: float = 4.0
    alpha: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, int | float) and self.temperature > 0):
            raise PlanError(f"distill.temperature must be > 0, got {self.temperature!r}")
        if not (isinstance(self.alpha, int | float) and 0.0 <= self.alpha <= 1.0):
            raise PlanError(f"distill.alpha must be in [0, 1], got {self.alpha!r}")


@dataclass(frozen=True)
class StudentSpec:
    """A student architecture: a registered family plus width and depth multipliers.

    Args:
        family: name of a student factory registered with ``register_student``.
        width_mult: multiplier on channel/feature widths (> 0).
        depth_mult: multiplier on the number of blocks/layers (> 0).
    """

    family: str
    width_mult: float = 1.0
    depth_mult: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.family, str) or not self.family:
            raise PlanError(f"student.family must be a non-empty string, got {self.family!r}")
        for name in ("width_mult", "depth_mult"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise PlanError(f"student.{name} must be a number > 0, got {value!r}")

    @property
    def key(self) -> str:
        """A stable, readable label such as ``mlp-w0.5-d1``."""
        return f"{self.family}-w{self.width_mult:g}-d{self.depth_mult:g}"


#: Activations a swap may put in place of a model's own (ONNX Runtime fuses both).
SWAP_ACTIVATIONS = ("relu", "hardswish")


@dataclass(frozen=True)
class ActivationSwap:
    """Replace every module of class ``replace`` (a custom activation, say) with a
    standard activation ``to`` that more devices run natively.

    Args:
        replace: the class name of the modules to replace, e.g. ``SwishBeta``.
        to: ``relu`` or ``hardswish``.
    """

    replace: str
    to: str

    def __post_init__(self) -> None:
        if not isinstance(self.replace, str) or not self.replace.isidentifier():
            raise PlanError(f"activation.replace must be a class name, got {self.replace!r}")
        if self.to not in SWAP_ACTIVATIONS:
            raise PlanError(
                f"activation.to must be one of {list(SWAP_ACTIVATIONS)}, got {self.to!r}"
            )


@dataclass(frozen=True)
class CompressionPlan:
    """How one candidate is compressed. Pure data: re-applies to the same result.

    Args:
        prune: prune ratio in [0, 1) per prunable group, keyed by the group's name.
        weight_bits: weight bit width per quantizable layer (32 = FP32, 16 = FP16).
        act_bits: input-activation bit width per quantizable layer (32 = FP32).
        sparsity: unstructured magnitude sparsity per quantizable layer, in [0, 1): the
            share of its weights set to zero (shapes stay; only sparse kernels gain).
        distill: distillation settings, or None for no distillation.
        student: student architecture, or None to compress the model itself.
        activation: an activation swap applied before anything else, or None.
        round_to: kept channel counts are multiples of this (hardware-friendly shapes).
        importance: criterion ranking channels for removal: "l1", "taylor" or "bn_scale".
        techniques: the data of each registered technique the plan uses, by name
            (``register_technique``); JSON data.
    """

    prune: dict[str, float] = field(default_factory=dict)
    weight_bits: dict[str, int] = field(default_factory=dict)
    act_bits: dict[str, int] = field(default_factory=dict)
    sparsity: dict[str, float] = field(default_factory=dict)
    distill: DistillSpec | None = None
    student: StudentSpec | None = None
    activation: ActivationSwap | None = None
    round_to: int = 1
    importance: str = "l1"
    techniques: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, ratio in self.prune.items():
            check_ratio(f"prune[{name!r}]", ratio)
        for kind in ("weight_bits", "act_bits"):
            for name, bits in getattr(self, kind).items():
                check_bits(f"{kind}[{name!r}]", bits)
        for name, share in self.sparsity.items():
            check_ratio(f"sparsity[{name!r}]", share)
        if isinstance(self.round_to, bool) or not isinstance(self.round_to, int):
            raise PlanError(f"round_to must be an integer >= 1, got {self.round_to!r}")
        if self.round_to < 1:
            raise PlanError(f"round_to must be an integer >= 1, got {self.round_to!r}")
        if self.importance not in IMPORTANCE_CRITERIA:
            raise PlanError(
                f"importance must be one of {list(IMPORTANCE_CRITERIA)}, got {self.importance!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data, with the format version."""
        return {
            "format_version": PLAN_FORMAT_VERSION,
            "prune": dict(sorted(self.prune.items())),
            "weight_bits": dict(sorted(self.weight_bits.items())),
            "act_bits": dict(sorted(self.act_bits.items())),
            "sparsity": dict(sorted(self.sparsity.items())),
            "distill": None
            if self.distill is None
            else {"temperature": self.distill.temperature, "alpha": self.distill.alpha},
            "student": None
            if self.student is None
            else {
                "family": self.student.family,
                "width_mult": self.student.width_mult,
                "depth_mult": self.student.depth_mult,
            },
            "activation": None
            if self.activation is None
            else {"replace": self.activation.replace, "to": self.activation.to},
            "round_to": self.round_to,
            "importance": self.importance,
            "techniques": dict(sorted(self.techniques.items())),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, *, space: Any = None) -> CompressionPlan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise PlanError(f"plan is not valid JSON: {err}") from err
        return cls.from_dict(data, space=space)

    @classmethod
    def load(cls, path: str | Path, *, space: Any = None) -> CompressionPlan:
        """Read a plan JSON file; every error names the file.

        Args:
            path: the plan file (``frontier pick`` writes ``plan.json``).
            space: as for ``from_dict``.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise PlanError(f"{path}: cannot read the plan ({err})") from None
        try:
            return cls.from_json(text, space=space)
        except PlanError as err:
            raise PlanError(f"{path}: {err}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, space: Any = None) -> CompressionPlan:
        """Build a plan from ``to_dict`` output, rejecting anything it does not know.

        Args:
            data: the mapping to read.
            space: optionally a ``SearchSpace``; then layer names and values must be ones
                that space allows (unknown names get the nearest known names suggested).
        """
        if not isinstance(data, Mapping):
            raise PlanError(f"plan must be a mapping, got {type(data).__name__}")
        known = {
            "format_version",
            "prune",
            "weight_bits",
            "act_bits",
            "sparsity",
            "distill",
            "student",
            "activation",
            "round_to",
            "importance",
            "techniques",
        }
        unknown = sorted(set(data) - known)
        if unknown:
            raise PlanError(f"unknown plan key {unknown[0]!r}{_nearest(unknown[0], known)}")
        version = data.get("format_version", PLAN_FORMAT_VERSION)
        if version not in READABLE_PLAN_FORMATS:
            raise PlanError(
                f"format_version: this Frontier reads plan formats "
                f"{list(READABLE_PLAN_FORMATS)}, got {version!r}"
            )
        tables: dict[str, dict[str, Any]] = {}
        for kind in ("prune", "weight_bits", "act_bits", "sparsity"):
            table = data.get(kind, {}) or {}
            if not isinstance(table, Mapping):
                raise PlanError(f"{kind} must be a mapping of layer name to value, got {table!r}")
            tables[kind] = dict(table)
        distill = _read_sub(data.get("distill"), DistillSpec, "distill")
        student = _read_sub(data.get("student"), StudentSpec, "student")
        activation = _read_sub(data.get("activation"), ActivationSwap, "activation")
        techniques = data.get("techniques", {}) or {}
        if not isinstance(techniques, Mapping):
            raise PlanError(f"techniques must be a mapping of name to data, got {techniques!r}")
        techniques = {name: _read_entry(name, entry) for name, entry in techniques.items()}
        plan = cls(
            prune=tables["prune"],
            weight_bits=tables["weight_bits"],
            act_bits=tables["act_bits"],
            sparsity=tables["sparsity"],
            distill=distill,
            student=student,
            activation=activation,
            round_to=data.get("round_to", 1),
            importance=data.get("importance", "l1"),
            techniques=dict(techniques),
        )
        if space is not None:
            space.validate(plan)
        return plan


#: registered technique classes by name (``register_technique`` fills it): a plan's
#: ``techniques`` entries are read and checked by their technique's ``read``
TECHNIQUES: Registry[Any] = Registry("technique")


def _read_entry(name: str, entry: Any) -> Any:
    cls = TECHNIQUES.get(name)
    if cls is None:
        raise PlanError(f"unknown technique {name!r}; registered: {TECHNIQUES.names()}")
    return cls().read(entry)


def _read_sub(value: Any, cls: type, name: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PlanError(f"{name} must be a mapping or null, got {value!r}")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise PlanError(f"unknown key {name}.{unknown[0]}{_nearest(unknown[0], fields)}")
    try:
        return cls(**value)
    except TypeError as err:
        raise PlanError(f"{name}: {err}") from None


def check_names(kind: str, names: Iterable[str], known: Iterable[str]) -> None:
    """Raise PlanError naming the first of ``names`` not in ``known``, with suggestions."""
    known_set = set(known)
    for name in names:
        if name not in known_set:
            raise PlanError(
                f"{kind}: {name!r} is not a layer of this search space{_nearest(name, known_set)}"
            )
