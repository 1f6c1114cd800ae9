"""What can be searched: discovering a model's search space and drawing plans from it.

Over 500 lines: discovery and the options that shape it, the space's groups and drawing
plans from them read the same group records, and a plan drawn must be one discovery
allows.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import re
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from . import _graph
from ._dims import Dimension, LayerGroup, QuantLayer, SkippedGroup
from ._forward import SpaceError, check_forward, eval_mode, run_model
from ._plan import (
    IMPORTANCE_CRITERIA,
    CompressionPlan,
    PlanError,
    StudentSpec,
    check_bit_widths,
    check_ratios,
)
from ._quant import channel_axis
from ._students import build_student
from ._surgery import prune_model
from ._techniques import (
    Chooser,
    Distill,
    Prune,
    Quantize,
    Sparsity,
    SwapActivations,
    Technique,
    build_technique,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpaceOptions:
    """How a space is built from a model. Every field has a sensible default.

    Every technique is configured under ``techniques`` by its registered name, the
    built-ins included: ``prune`` (``ratios``), ``quantize`` (``weight_bits``,
    ``act_bits``), ``sparsity`` (``shares``), ``distill`` (``temperatures``,
    ``alphas``, ``optional``) and ``activation_swap`` (``replace``, ``to``). The
    built-ins' entries land in the fields below (the older way to write them, still
    read); ``techniques`` keeps the other techniques.

    Args:
        prune_ratios: the ratio grid each prunable group (or tie) chooses from.
        weight_bits: weight bit widths each quantizable layer chooses from (32 = FP32).
        act_bits: input-activation bit widths each quantizable layer chooses from.
        sparsity: unstructured sparsity shares each quantizable layer chooses from
            (``(0.0,)``, the default, searches none).
        round_to: kept channel counts are multiples of this. The default, 8, keeps the
            shapes CPU kernels are built for: on ONNX Runtime's CPU provider MNASNet 0.5
            pruned by a tenth with ``round_to=1`` ran 8.8x slower than unpruned, and 1.1x
            faster with 8 (docs/findings.md, "Pruned yet slower").
        importance: channel-ranking criterion, "l1", "taylor" or "bn_scale".
        include: regexes (full match) of layer names to search; empty means all.
        exclude: regexes (full match) of layer names to leave alone.
        ties: tie name -> regex; every group and layer whose name fully matches shares one
            ratio and one pair of bit widths (for example ``{"layer1": r"layer1\\..*"}``).
        distill: distillation dimensions, or None for no distillation dimension.
        students: student architectures to choose from besides the model itself.
        activation_swap: an activation-swap dimension, or None.
        techniques: registered techniques to search, by name, with their options
            (``{"my-technique": {"choices": [0, 1]}}``; see ``register_technique``).
    """

    #: a config's ``space`` section is this dataclass, validated by pydantic
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    prune_ratios: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
    weight_bits: tuple[int, ...] = (4, 8, 16, 32)
    act_bits: tuple[int, ...] = (8, 32)
    sparsity: tuple[float, ...] = (0.0,)
    round_to: int = 8
    importance: str = "l1"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    ties: Mapping[str, str] = field(default_factory=dict)
    distill: Distill | None = None
    students: tuple[StudentSpec, ...] = ()
    activation_swap: SwapActivations | None = None
    techniques: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        others: dict[str, Mapping[str, Any]] = {}
        for name, options in self.techniques.items():
            try:
                technique = build_technique(name, options)
            except PlanError as err:
                raise SpaceError(f"techniques.{name}: {err}") from None
            if name in _BUILT_IN:
                self._set_built_in(name, technique)
            else:
                others[name] = options
        object.__setattr__(self, "techniques", others)
        if self.activation_swap is not None and not self.activation_swap.replace:
            raise SpaceError("activation_swap.replace: name the activation's class, e.g. SwishBeta")
        check_ratios("prune_ratios", self.prune_ratios, error=SpaceError)
        check_ratios("sparsity", self.sparsity, noun="share", example="[0.0]", error=SpaceError)
        check_bit_widths("weight_bits", self.weight_bits, error=SpaceError)
        check_bit_widths("act_bits", self.act_bits, error=SpaceError)
        if not isinstance(self.round_to, int) or self.round_to < 1:
            raise SpaceError(f"round_to must be an integer >= 1, got {self.round_to!r}")
        if self.importance not in IMPORTANCE_CRITERIA:
            raise SpaceError(
                f"importance must be one of {list(IMPORTANCE_CRITERIA)}, got {self.importance!r}"
            )
        for kind in ("include", "exclude"):
            for pattern in getattr(self, kind):
                _compile(kind, pattern)
        for name, pattern in self.ties.items():
            _compile(f"ties.{name}", pattern)

    def _set_built_in(self, name: str, technique: Technique) -> None:
        """Put a built-in technique's options from ``techniques`` in their fields;
        the same options written both ways must agree."""
        data: Any = technique  # a dataclass, as every technique is
        lists = {f.name: getattr(data, f.name) for f in fields(data)}
        whole = replace(data, **{k: tuple(v) for k, v in lists.items() if isinstance(v, list)})
        values = {
            field_name: tuple(getattr(technique, attr)) if attr else whole
            for field_name, attr in _BUILT_IN[name].items()
        }
        for field_name, value in values.items():
            given = getattr(self, field_name)
            default = SpaceOptions.__dataclass_fields__[field_name].default
            if given != default and given != value:
                raise SpaceError(
                    f"{field_name} and techniques.{name} disagree; keep techniques.{name}"
                )
            object.__setattr__(self, field_name, value)


#: built-in technique -> {SpaceOptions field: the technique's option ("": the technique)}
_BUILT_IN: dict[str, dict[str, str]] = {
    "prune": {"prune_ratios": "ratios"},
    "quantize": {"weight_bits": "weight_bits", "act_bits": "act_bits"},
    "sparsity": {"sparsity": "shares"},
    "distill": {"distill": ""},
    "activation_swap": {"activation_swap": ""},
}


def _compile(field_name: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise SpaceError(f"{field_name}: {pattern!r} is not a valid regex ({err})") from err


@dataclass(frozen=True)
class SearchSpace:
    """Everything a search may choose for one model. Plain data; see ``discover``.

    Attributes:
        groups: prunable channel groups.
        layers: quantizable layers.
        skipped: groups left out of pruning, with reasons.
        options: the options the space was built with.
        students: the space of each student architecture, keyed by ``StudentSpec.key``.
    """

    groups: tuple[LayerGroup, ...]
    layers: tuple[QuantLayer, ...]
    skipped: tuple[SkippedGroup, ...]
    options: SpaceOptions
    students: Mapping[str, SearchSpace] = field(default_factory=dict)

    # -- drawing plans ---------------------------------------------------------------
    def suggest(self, trial: Any) -> CompressionPlan:
        """Draw a plan through an Optuna trial (define-by-run).

        Parameter names are stable and readable: ``prune.layer1.0.conv1``,
        ``wbits.features.3``, ``abits.fc``, ``distill.temperature``, ``student``; the
        parameters of a student's own layers carry its key (``mlp-w0.5-d1/prune.fc``).
        """
        return self._draw(lambda name, choices: trial.suggest_categorical(name, list(choices)))

    def plan_of(self, params: Mapping[str, Any]) -> CompressionPlan:
        """The plan trial parameters (``dimensions()`` names) give; a dimension they do
        not name takes its uncompressed choice (``Dimension.uncompressed``)."""
        defaults = self._uncompressed
        return self._draw(lambda name, choices: params[name] if name in params else defaults[name])

    def uncompressed_params(self) -> dict[str, Any]:
        """Every dimension at its uncompressed choice, by parameter name."""
        return dict(self._uncompressed)

    @functools.cached_property
    def _uncompressed(self) -> dict[str, Any]:
        return {d.name: d.uncompressed for d in self.dimensions()}

    def sample(self, rng: np.random.Generator | int) -> CompressionPlan:
        """Draw a plan uniformly at random; the same seed gives the same plan."""
        gen = np.random.default_rng(rng) if isinstance(rng, int) else rng

        def choose(name: str, choices: Sequence[Any]) -> Any:
            value = choices[int(gen.integers(len(choices)))]
            return value.item() if isinstance(value, np.generic) else value

        return self._draw(choose)

    def _draw(self, choose: Chooser) -> CompressionPlan:
        fields: dict[str, Any] = {}
        for t in self.techniques("model"):
            fields.update(t.draw(self, choose))
        space, prefix = self, ""
        if self.students:
            key = choose("student", ("none", *self.students))
            if key != "none":
                space, prefix = self.students[key], f"{key}/"
                fields["student"] = next(s for s in self.options.students if s.key == key)
                fields["activation"] = None  # a student has its own activations
        # choices are made in the order own_dimensions lists them (a seed's plan does not
        # depend on how techniques read them back)
        drawn: dict[str, Any] = {}

        def once(name: str, choices: Sequence[Any]) -> Any:
            if name not in drawn:
                drawn[name] = choose(name, choices)
            return drawn[name]

        for d in space.own_dimensions():
            once(prefix + d.name, d.choices)
        for t in space.techniques("layer"):
            for name, value in t.draw(space, once, prefix).items():
                if name == "techniques":
                    fields.setdefault("techniques", {}).update(value)
                else:
                    fields[name] = value
        return CompressionPlan(
            **fields, round_to=self.options.round_to, importance=self.options.importance
        )

    def techniques(self, scope: str | None = None) -> list[Technique]:
        """The techniques this space searches (``scope``: only ``"model"`` or only
        ``"layer"`` ones), in the order their choices are drawn: pruning, bit widths,
        sparsity, distillation, activation swap, then registered ones. They apply in
        their own ``order`` (``plan_techniques``)."""
        return [t for t in self._techniques if scope is None or t.scope == scope]

    @functools.cached_property
    def _techniques(self) -> tuple[Technique, ...]:
        """Built (and validated) once per space: every plan drawn reads them."""
        o = self.options
        found: list[Technique] = [
            Prune(ratios=o.prune_ratios),
            Quantize(weight_bits=o.weight_bits, act_bits=o.act_bits),
            Sparsity(shares=o.sparsity),
        ]
        if o.distill is not None:
            found.append(o.distill)
        if o.activation_swap is not None:
            found.append(o.activation_swap)
        found += [build_technique(name, opts) for name, opts in o.techniques.items()]
        return tuple(found)

    # -- describing ------------------------------------------------------------------
    def own_dimensions(self) -> list[Dimension]:
        """The dimensions of this architecture (one per tie): those of no single layer
        (pruning's, by group) first, then layer by layer, each in technique order."""
        return list(self._own_dimensions)

    @functools.cached_property
    def _own_dimensions(self) -> tuple[Dimension, ...]:
        """Listed once per space: every plan drawn walks them."""
        techniques = self.techniques("layer")
        dims = [d for t in techniques for d in t.dimensions(self)]
        seen = {d.name for d in dims}
        for q in self.layers:
            for t in techniques:
                for d in t.layer_dimensions(self, q):
                    if d.name not in seen:
                        seen.add(d.name)
                        dims.append(d)
        return tuple(dims)

    def dimensions(self) -> list[Dimension]:
        """Every dimension of the space, distillation and student choice included."""
        dims = [d for t in self.techniques("model") for d in t.dimensions(self)]
        if self.students:
            dims.append(Dimension("student", "architecture", ("none", *self.students)))
        dims += self.own_dimensions()
        for key, sub in self.students.items():
            dims += [replace(d, name=f"{key}/{d.name}") for d in sub.own_dimensions()]
        return dims

    def describe(self) -> str:
        """A plain-text table of the dimensions, the skipped groups and the space's size."""
        dims = self.dimensions()
        rows = [("dimension", "kind", "choices", "detail")]
        rows += [
            (
                d.name,
                d.kind,
                ", ".join(f"{c:g}" if isinstance(c, float) else str(c) for c in d.choices),
                d.detail,
            )
            for d in dims
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        log10 = sum(math.log10(len(d.choices)) for d in dims)
        lines.append("")
        lines.append(
            f"{len(dims)} dimensions, about 10^{log10:.1f} plans; {len(self.groups)} prunable "
            f"groups, {len(self.layers)} quantizable layers, round_to={self.options.round_to}, "
            f"importance={self.options.importance}"
        )
        for s in self.skipped:
            lines.append(f"not pruned: {s.name} ({s.reason})")
        return "\n".join(lines)

    # -- checking --------------------------------------------------------------------
    def validate(self, plan: CompressionPlan) -> None:
        """Raise PlanError unless ``plan`` names only layers and values of this space."""
        if plan.activation is not None and self.options.activation_swap is None:
            raise PlanError(
                f"activation: this space swaps no activation, not {plan.activation.replace!r}"
            )
        unknown = sorted(set(plan.techniques) - set(self.options.techniques))
        if unknown:
            raise PlanError(
                f"techniques: {unknown[0]!r} is not searched in this space; it searches "
                f"{sorted(self.options.techniques) or 'no registered technique'}"
            )
        for t in self.techniques("model"):
            t.validate(self, plan)
        space = self
        if plan.student is not None:
            sub = self.students.get(plan.student.key)
            if sub is None:
                raise PlanError(
                    f"student: {plan.student.key!r} is not a student of this space; "
                    f"choices: {sorted(self.students) or 'none'}"
                )
            space = sub
        for t in space.techniques("layer"):
            t.validate(space, plan)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(re.fullmatch(p, name) for p in patterns)


def _selected(name: str, options: SpaceOptions) -> bool:
    if options.include and not _matches(name, options.include):
        return False
    return not _matches(name, options.exclude)


def _tie_of(name: str, options: SpaceOptions) -> str | None:
    for tie, pattern in options.ties.items():
        if re.fullmatch(pattern, name):
            return tie
    return None


def _layers_run(model: nn.Module, example_inputs: Any) -> set[str]:
    """The names of the Conv/Linear layers (``channel_axis``) that one eval-mode forward
    pass of ``model`` runs."""
    ran: set[str] = set()
    hooks = [
        module.register_forward_pre_hook(lambda _m, _a, name=name: ran.add(name))
        for name, module in model.named_modules()
        if name and channel_axis(module) is not None
    ]
    try:
        with torch.no_grad(), eval_mode(model):
            run_model(model, example_inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return ran


def discover(
    model: nn.Module, example_inputs: Any, options: SpaceOptions | None = None
) -> SearchSpace:
    """Find what can be searched in ``model``.

    Prunable groups come from Torch-Pruning's dependency graph; the groups whose channels
    are the model's output are never pruned; a group Torch-Pruning cannot handle is left
    out of pruning with a warning naming it. Quantizable layers are the Conv/Linear layers.
    The model is not modified.

    Args:
        model: the (trained) model.
        example_inputs: a batch the model accepts (tensor, tuple of tensors or dict).
        options: grids, round_to, include/exclude, ties, distillation and students.
    """
    options = options or SpaceOptions()
    output = check_forward(model, example_inputs)
    swap = options.activation_swap
    if swap is not None and not any(type(m).__name__ == swap.replace for m in model.modules()):
        raise SpaceError(
            f"activation_swap.replace: {type(model).__name__} has no {swap.replace!r} module"
        )
    groups: list[LayerGroup] = []
    skipped: list[SkippedGroup] = []
    with eval_mode(model):
        graph = _graph.build_graph(model, example_inputs)
    if graph is None or graph.dg is None:
        reason = graph.failure if graph is not None else "unknown"
        warnings.warn(
            f"Torch-Pruning cannot trace {type(model).__name__} ({reason}); "
            "no group will be pruned, the rest of the space stands",
            stacklevel=2,
        )
        skipped.append(SkippedGroup(type(model).__name__, f"tracing failed: {reason}"))
    else:
        for found, name, reason in _graph.iter_groups(graph):
            if found is None:
                skipped.append(SkippedGroup(name, reason or ""))
            elif _selected(found.name, options):
                groups.append(
                    LayerGroup(
                        name=found.name,
                        channels=found.channels,
                        members=found.members,
                        tie=_tie_of(found.name, options),
                        channel_groups=found.channel_groups,
                    )
                )
    groups = _runs_pruned(model, example_inputs, groups, skipped, options)
    _warn_left_out([s for s in skipped if s.reason and "output" not in s.reason])
    ran = _layers_run(model, example_inputs)
    idle = [
        name
        for name, module in model.named_modules()
        if name and channel_axis(module) is not None and name not in ran
    ]
    if idle:  # GoogLeNet's and Inception's auxiliary heads: trained, never deployed
        warnings.warn(
            f"{len(idle)} layer(s) do not run in eval mode and are left out of the space "
            f"(an exported model holds none of them): {', '.join(idle[:4])}"
            + (", ..." if len(idle) > 4 else ""),
            stacklevel=2,
        )
    layers = [
        QuantLayer(
            name=name,
            kind=type(module).__name__,
            weight_bits=tuple(options.weight_bits),
            act_bits=tuple(options.act_bits),
            tie=_tie_of(name, options),
            sparsity=tuple(options.sparsity),
        )
        for name, module in model.named_modules()
        if name and channel_axis(module) is not None and name in ran and _selected(name, options)
    ]
    students: dict[str, SearchSpace] = {}
    if options.students:
        num_classes = int(output.shape[-1])
        sub_options = replace(options, students=(), distill=None, activation_swap=None)
        for spec in options.students:
            student = build_student(spec, num_classes=num_classes, example_inputs=example_inputs)
            students[spec.key] = discover(student, example_inputs, sub_options)
    return SearchSpace(
        groups=tuple(groups),
        layers=tuple(layers),
        skipped=tuple(skipped),
        options=options,
        students=students,
    )


RUNS_NO_MORE = "pruned, the model no longer runs"


def _runs_pruned(
    model: nn.Module,
    example_inputs: Any,
    groups: list[LayerGroup],
    skipped: list[SkippedGroup],
    options: SpaceOptions,
) -> list[LayerGroup]:
    """The ``groups`` the model still runs with pruned at the space's largest ratio; the
    others go to ``skipped``. A layer that takes its width from an attribute rather than
    from its input (torchvision's ViT reshapes by ``self.hidden_dim``) breaks once its
    group is pruned, which the dependency graph cannot see. One copy pruned in every
    group at once runs for nearly every model; only where it does not is each group
    tried alone."""
    ratio = max(options.prune_ratios, default=0.0)
    if not groups or ratio <= 0:
        return groups

    def fails(names: list[str]) -> str | None:
        probe = copy.deepcopy(model)
        plan = CompressionPlan(prune=dict.fromkeys(names, ratio), round_to=options.round_to)
        try:
            prune_model(probe, plan, example_inputs)
            with torch.no_grad(), eval_mode(probe):
                run_model(probe, example_inputs)
        except Exception as err:
            said = str(err).strip().splitlines()
            return f"{type(err).__name__}: {said[0] if said else ''}"[:200]
        return None

    if fails([g.name for g in groups]) is None:
        return groups
    kept = []
    for group in groups:
        why = fails([group.name])
        if why is None:
            kept.append(group)
        else:
            skipped.append(SkippedGroup(group.name, f"{RUNS_NO_MORE} ({why})"))
    return kept


#: groups left out of pruning named one warning each up to this many; more share one
LEFT_OUT_NAMED = 3


def _warn_left_out(left_out: list[SkippedGroup]) -> None:
    """Warn of the groups left out of pruning (the model's output aside): one warning
    each where there are few, else one for all of them (ShuffleNet's channel shuffle
    leaves out a group per block) with the reason most of them share."""
    if len(left_out) <= LEFT_OUT_NAMED:
        for s in left_out:
            warnings.warn(f"{s.name} is left out of pruning: {s.reason}", stacklevel=3)
        return
    reason, count = Counter(s.reason for s in left_out).most_common(1)[0]
    names = ", ".join(s.name for s in left_out[:LEFT_OUT_NAMED])
    share = "all for one reason" if count == len(left_out) else f"{count} of them for"
    warnings.warn(
        f"{len(left_out)} groups are left out of pruning ({names}, ...; `frontier space` "
        f"lists each), {share}: {reason}",
        stacklevel=3,
    )
