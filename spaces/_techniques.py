"""Compression techniques: each is a config dataclass (its search options) and the handler
that turns its choices into plan data and applies that data to a model.

A technique says which dimensions it adds to a space (``dimensions``), how a trial's
choices become plan data (``draw``), what a plan may hold (``validate``), how that data
changes a model (``apply``) and, optionally, how it changes the ops a latency table
prices (``latency_variants``). Built-in techniques keep their data in the plan's typed fields
(``prune``, ``weight_bits`` ...); a registered one keeps it in ``plan.techniques[name]``,
so adding a technique is one file: a ``Technique`` subclass under ``register_technique``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from ._dims import Dimension, QuantLayer, SpaceView
from ._param_shapes import ParamShapes
from ._plan import (
    SWAP_ACTIVATIONS,
    TECHNIQUES,
    ActivationSwap,
    CompressionPlan,
    DistillSpec,
    PlanError,
    check_bit_widths,
    check_bits,
    check_names,
    check_ratios,
)
from ._surgery import prune_model, swap_activations

#: ``choose(parameter name, choices) -> the choice``: an Optuna trial's
#: ``suggest_categorical``, or a seeded random draw
Chooser = Callable[[str, Sequence[Any]], Any]


@dataclass(frozen=True)
class ApplyInputs:
    """What applying a plan may need besides the model: a batch it accepts and batches
    for calibration (None: calibrate on the example)."""

    example_inputs: Any
    calibration_data: Iterable[Any] | None = None


class Technique:
    """One compression technique. Subclass it as a frozen dataclass whose fields are its
    search options (each with a default), and register it with ``register_technique``.

    Class attributes:
        name: the registry name; also the config key under ``space.techniques`` and the
            plan key under ``plan.techniques``.
        scope: ``"layer"``: its dimensions belong to an architecture (a student's own
            space gets them too, prefixed with the student's key); ``"model"``: drawn once
            per plan (distillation, activation swap).
        order: techniques apply in ascending order: activation swap 10, pruning 20,
            sparsity 30, a registered technique 35 unless it says otherwise,
            quantization 40 (fake quantization wraps the final weights).
        kind: what a plan holding this technique's data does to the model, as a cheap
            rung underrates it: ``"pruned"`` (removes structure or weights),
            ``"quantized"`` (fewer bits), else ``""`` (``plan_kind``).
    """

    name: ClassVar[str] = ""
    scope: ClassVar[str] = "layer"
    order: ClassVar[int] = 35
    kind: ClassVar[str] = ""

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        """The dimensions this technique adds to ``space`` that belong to no single
        quantizable layer (none by default)."""
        return []

    def layer_dimensions(self, space: SpaceView, layer: QuantLayer) -> list[Dimension]:
        """The dimensions this technique adds for one quantizable ``layer`` (none by
        default). A space lists them layer by layer, each layer's in technique order;
        layers in one tie share them (name them by ``layer.tie or layer.name``)."""
        return []

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        """Choose through ``choose`` (parameter names prefixed by ``prefix``) and return
        the plan fields this technique sets; a registered technique returns
        ``{"techniques": {self.name: entry}}`` (see ``entry_field``) or {} for none."""
        return {}

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        """Raise PlanError unless ``plan``'s data for this technique fits ``space``."""

    def read(self, entry: Any) -> Any:
        """Check a plan entry read from JSON (raise PlanError naming the field); return it
        as ``apply`` expects it. A registered technique's entries must be JSON data."""
        return entry

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        """Change ``model`` (a copy the caller owns) in place as ``plan`` says."""

    def reshape(self, plan: CompressionPlan, shapes: ParamShapes) -> bool:
        """Change ``shapes`` (parameter name -> shape) as ``apply`` changes the model's
        parameters under ``plan``, without a model, and return True; what lets a sampler
        count a plan's size in microseconds (``ShapeCounter``, which checks the count
        against built models). False, the default: plans that use this technique are
        built to be counted."""
        return False

    def latency_variants(self, space: SpaceView) -> dict[str, CompressionPlan]:
        """Plans that use only this technique, whose exported graphs hold between them
        every op shape the technique can give a model of ``space`` (none by default: it
        changes no shape). A latency model exports each once and prices an op of a plan
        as the same ONNX node of the variant ``latency_variant`` names."""
        return {}

    def latency_variant(self, node: str, plan: CompressionPlan) -> str | None:
        """Which of ``latency_variants`` prices the op whose ONNX node is ``node`` under
        ``plan``: a variant's name, None for the graph without this technique, or
        ``DROPPED`` when the plan removes the op."""
        return None

    # -- helpers for registered techniques ------------------------------------------------
    def entry(self, plan: CompressionPlan) -> Any:
        """This technique's data in ``plan`` (None when the plan does not use it)."""
        return plan.techniques.get(self.name)

    def entry_field(self, entry: Any) -> Mapping[str, Any]:
        """What ``draw`` returns to put ``entry`` in the plan (nothing for None)."""
        return {} if entry is None else {"techniques": {self.name: entry}}


#: ``Technique.latency_variant``'s answer for an op the plan removes
DROPPED = "dropped"


def register_technique(name: str) -> Callable[[type[Technique]], type[Technique]]:
    """Register a ``Technique`` subclass under ``name``: configs then search it
    (``space: {techniques: {NAME: {option: value}}}``) and plans carry its data
    (``plan.techniques[NAME]``)."""

    def decorate(cls: type[Technique]) -> type[Technique]:
        cls.name = name
        return TECHNIQUES.register(name)(cls)

    return decorate


def technique_names() -> list[str]:
    return TECHNIQUES.names()


def technique_kind(name: str) -> str:
    """The ``kind`` of the technique registered as ``name`` ("" if none is)."""
    cls = TECHNIQUES.get(name)
    return cls.kind if cls is not None else ""


#: what a plan mainly does (``plan_kind``)
PLAN_KINDS = ("student", "pruned", "quantized", "other")


def plan_kind(plan: Mapping[str, Any]) -> str:
    """What a plan (``Plan.to_dict()``) mainly does, as a cheap rung underrates it:
    ``student`` (a smaller architecture), ``pruned`` (channels, heads, layers or weights
    removed, maybe quantized too: ``prune``, ``sparsity``, or a technique of that
    ``Technique.kind``), ``quantized`` (fewer bits, nothing removed), else ``other``.
    Promotion learns how far a cheap rung underrates each kind apart."""
    if plan.get("student"):
        return "student"
    kinds = {technique_kind(name) for name in plan.get("techniques") or {}}
    removed = [*(plan.get("prune") or {}).values(), *(plan.get("sparsity") or {}).values()]
    if "pruned" in kinds or any(float(v) > 0 for v in removed):
        return "pruned"
    bits = [b for key in ("weight_bits", "act_bits") for b in (plan.get(key) or {}).values()]
    return "quantized" if "quantized" in kinds or any(int(b) < 32 for b in bits) else "other"


def build_technique(name: str, options: Mapping[str, Any] | None = None) -> Technique:
    """The technique registered as ``name``, with ``options`` (its defaults otherwise)."""
    cls = TECHNIQUES.get(name)
    if cls is None:
        raise PlanError(f"unknown technique {name!r}; registered: {technique_names()}")
    try:
        return cls(**dict(options or {}))
    except TypeError as err:
        raise PlanError(f"technique {name!r}: {err}") from None


def plan_techniques(plan: CompressionPlan) -> list[Technique]:
    """The techniques that apply ``plan``, in order: the built-ins and each registered
    technique it holds data for (applying needs no space: a plan is self-contained)."""
    found = [SwapActivations(), Prune(), Sparsity(), Quantize()]
    found += [build_technique(name) for name in plan.techniques]
    return sorted(found, key=lambda t: t.order)


# -- the built-in techniques ---------------------------------------------------------------
def _layer_key(prefix: str, kind: str, name: str, tie: str | None) -> str:
    return f"{prefix}{kind}.{tie or name}"


@register_technique("prune")
@dataclass(frozen=True)
class Prune(Technique):
    """Structured pruning of each prunable channel group (``prune.GROUP``), each
    choosing a ratio of ``ratios``."""

    ratios: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)

    def __post_init__(self) -> None:
        check_ratios("ratios", self.ratios)

    order: ClassVar[int] = 20

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        if len(self.ratios) < 2:
            return []
        dims, seen = [], set()
        for g in space.groups:
            key = _layer_key("", "prune", g.name, g.tie)
            if key in seen:
                continue
            seen.add(key)
            members = [x for x in space.groups if (x.tie or x.name) == (g.tie or g.name)]
            detail = f"{sum(x.channels for x in members)} channels"
            if g.tie:
                detail += f" in {len(members)} tied groups"
            dims.append(
                Dimension(
                    key, "prune ratio", self.ratios, detail, min(self.ratios), g.tie or g.name
                )
            )
        return dims

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        picked = _pick(choose, prefix, self.dimensions(space))
        ratios = {
            g.name: picked.get(_layer_key(prefix, "prune", g.name, g.tie), self.ratios[0])
            for g in space.groups
        }
        return {"prune": {k: float(v) for k, v in ratios.items() if v > 0}}

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        check_names("prune", plan.prune, [g.name for g in space.groups])

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        prune_model(model, plan, inputs.example_inputs)


@register_technique("sparsity")
@dataclass(frozen=True)
class Sparsity(Technique):
    """Unstructured magnitude sparsity of each quantizable layer (``sparse.LAYER``): the
    smallest weights zeroed behind a fixed mask. Shapes stay, so only devices with sparse
    kernels gain; the latency tables price it only where they measured it."""

    shares: tuple[float, ...] = (0.0,)

    order: ClassVar[int] = 30

    def __post_init__(self) -> None:
        check_ratios("shares", self.shares, noun="share", example="[0.0]")

    def layer_dimensions(self, space: SpaceView, layer: QuantLayer) -> list[Dimension]:
        return _layer_dim(layer, "sparse", "sparsity", self.shares, min(self.shares))

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        picked = _pick(choose, prefix, _every_layer(self, space))
        shares = {
            q.name: picked.get(_layer_key(prefix, "sparse", q.name, q.tie), self.shares[0])
            for q in space.layers
        }
        return {"sparsity": {k: float(v) for k, v in shares.items() if v > 0}}

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        check_names("sparsity", plan.sparsity, [q.name for q in space.layers])

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        from . import _quant

        shares = {name: r for name, r in plan.sparsity.items() if r > 0}
        if not shares:
            return
        modules = dict(model.named_modules())
        check_names("sparsity", sorted(shares), _quantizable(modules))
        for name, share in shares.items():
            _quant.sparsify(modules[name], share)


@register_technique("quantize")
@dataclass(frozen=True)
class Quantize(Technique):
    """Per-layer weight and input-activation bit widths (``wbits.LAYER``,
    ``abits.LAYER``), simulated with fake quantization; activation ranges calibrated."""

    weight_bits: tuple[int, ...] = (4, 8, 16, 32)
    act_bits: tuple[int, ...] = (8, 32)

    def __post_init__(self) -> None:
        check_bit_widths("weight_bits", self.weight_bits)
        check_bit_widths("act_bits", self.act_bits)

    order: ClassVar[int] = 40

    def layer_dimensions(self, space: SpaceView, layer: QuantLayer) -> list[Dimension]:
        weights = _layer_dim(layer, "wbits", "weight bits", self.weight_bits, max(self.weight_bits))
        return weights + _layer_dim(
            layer, "abits", "activation bits", self.act_bits, max(self.act_bits)
        )

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        picked = _pick(choose, prefix, _every_layer(self, space))
        out: dict[str, Any] = {}
        for kind, key, default in (
            ("weight_bits", "wbits", self.weight_bits[0]),
            ("act_bits", "abits", self.act_bits[0]),
        ):
            bits = {
                q.name: picked.get(_layer_key(prefix, key, q.name, q.tie), default)
                for q in space.layers
            }
            out[kind] = {k: int(v) for k, v in bits.items() if v < 32}
        return out

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        layers = {q.name: q for q in space.layers}
        for kind in ("weight_bits", "act_bits"):
            table: Mapping[str, int] = getattr(plan, kind)
            check_names(kind, table, layers)
            for name, bits in table.items():
                check_bits(f"{kind}[{name!r}]", bits, getattr(layers[name], kind))

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        from . import _quant

        names = set(plan.weight_bits) | set(plan.act_bits)
        if not names:
            return
        modules = dict(model.named_modules())
        check_names("weight_bits/act_bits", sorted(names), _quantizable(modules))
        for name in sorted(names):
            _quant.attach(
                modules[name],
                weight_bits=plan.weight_bits.get(name, 32),
                act_bits=plan.act_bits.get(name, 32),
            )
        if plan.act_bits:
            data = inputs.calibration_data
            batches: Iterable[Any] = (
                [inputs.example_inputs]
                if data is None
                else (b[0] if isinstance(b, tuple | list) else b for b in data)
            )
            if _quant.calibrate(model, batches) == 0:
                raise PlanError(
                    "calibration_data held no batch; activation ranges need at least one"
                )


@register_technique("activation_swap")
@dataclass(frozen=True)
class SwapActivations(Technique):
    """Keep the model's ``replace`` activation modules (a class name, ``SwishBeta``),
    or put one of ``to`` in their place (``activation``): a device that cannot run a
    custom activation runs these."""

    replace: str = ""
    to: tuple[str, ...] = SWAP_ACTIVATIONS

    def __post_init__(self) -> None:
        if not self.replace:
            return  # applying a plan's swap needs no options
        if not self.to:
            raise PlanError("to must list at least one activation")
        for name in self.to:
            ActivationSwap(self.replace, name)

    scope: ClassVar[str] = "model"
    order: ClassVar[int] = 10

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        return [Dimension("activation", "activation swap", ("keep", *self.to), self.replace)]

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        to = choose("activation", ("keep", *self.to))
        return {"activation": None if to == "keep" else ActivationSwap(self.replace, to)}

    def validate(self, space: SpaceView, plan: CompressionPlan) -> None:
        if plan.activation is None:
            return
        if plan.activation.replace != self.replace:
            raise PlanError(
                f"activation: this space swaps {self.replace}, not {plan.activation.replace!r}"
            )
        if plan.activation.to not in self.to:
            raise PlanError(f"activation.to: {plan.activation.to!r} is not among {list(self.to)}")

    def apply(self, model: nn.Module, plan: CompressionPlan, inputs: ApplyInputs) -> None:
        if plan.activation is not None and plan.student is None:
            swap_activations(model, plan.activation)


@register_technique("distill")
@dataclass(frozen=True)
class Distill(Technique):
    """Knowledge distillation from the uncompressed model while fine-tuning: on or off
    (when ``optional``), a temperature and a weight. It changes training, not the model:
    the accuracy evaluator reads ``plan.distill``."""

    temperatures: tuple[float, ...] = (2.0, 4.0, 8.0)
    alphas: tuple[float, ...] = (0.5, 0.9)
    optional: bool = True

    scope: ClassVar[str] = "model"
    order: ClassVar[int] = 50

    def __post_init__(self) -> None:
        if not self.temperatures or not self.alphas:
            raise PlanError("distill: temperatures and alphas must each list at least one value")
        for t in self.temperatures:
            DistillSpec(temperature=t)
        for a in self.alphas:
            DistillSpec(alpha=a)

    def dimensions(self, space: SpaceView) -> list[Dimension]:
        # on first: the recipe a plan is fine-tuned with where it says nothing
        on_off = [Dimension("distill", "distillation on/off", (True, False))]
        return [
            *(on_off if self.optional else []),
            Dimension("distill.temperature", "temperature", self.temperatures),
            Dimension("distill.alpha", "alpha", self.alphas),
        ]

    def draw(self, space: SpaceView, choose: Chooser, prefix: str = "") -> Mapping[str, Any]:
        if self.optional and not choose("distill", (True, False)):
            return {"distill": None}
        return {
            "distill": DistillSpec(
                temperature=choose("distill.temperature", self.temperatures),
                alpha=choose("distill.alpha", self.alphas),
            )
        }


def _quantizable(modules: Mapping[str, nn.Module]) -> list[str]:
    from ._quant import channel_axis

    return [n for n, m in modules.items() if n and channel_axis(m) is not None]


def _layer_dim(
    layer: QuantLayer, key: str, kind: str, choices: tuple[Any, ...], uncompressed: Any
) -> list[Dimension]:
    """The layer's (or its tie's) dimension, if there is a choice to make."""
    if len(choices) < 2:
        return []
    name = _layer_key("", key, layer.name, layer.tie)
    return [
        Dimension(name, kind, tuple(choices), layer.kind, uncompressed, layer.tie or layer.name)
    ]


def _every_layer(technique: Technique, space: SpaceView) -> list[Dimension]:
    """``technique``'s dimensions over every layer of ``space``, once per tie."""
    seen: dict[str, Dimension] = {}
    for q in space.layers:
        for d in technique.layer_dimensions(space, q):
            seen.setdefault(d.name, d)
    return list(seen.values())


def _pick(choose: Chooser, prefix: str, dims: Sequence[Dimension]) -> dict[str, Any]:
    """Each dimension's choice, keyed by its prefixed parameter name."""
    return {prefix + d.name: choose(prefix + d.name, d.choices) for d in dims}
