"""Operator instances: concrete shapes and precisions of one kernel, keyed by a string.

The same key names an op in the bundle, in the device table and in a prediction, so
"this op under this plan" is a dictionary lookup.

Over 500 lines: an op's spec, the precision each op of a plan runs at (INT8, FP16 and
their boundaries) and the one-op ONNX model that measures it are one rule, kept in one
place so the bundle, the table and a prediction agree on it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from frontier.spaces import (
    DROPPED,
    CompressionPlan,
    SearchSpace,
    build_technique,
    half_layers,
    int8_layers,
    int8_op_types,
    kept_channels,
)

from ._templates import Expr, OpTemplate, Templates


@dataclass(frozen=True)
class OpSpec:
    """One operator instance: everything needed to build, measure and price it."""

    op_type: str
    fused: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]
    kernel: tuple[int, ...]
    groups: int
    precision: str
    act_attrs: tuple[tuple[str, Any], ...] = ()
    consts: tuple[tuple[int, tuple[int, ...], tuple[float, ...]], ...] = ()
    #: unstructured weight sparsity; only a table row measured with a sparse kernel
    #: prices it, otherwise the op costs what its dense twin costs
    sparsity: float = 0.0

    @property
    def dense(self) -> OpSpec:
        return dataclasses.replace(self, sparsity=0.0)

    @property
    def name(self) -> str:
        return "+".join((self.op_type, *self.fused))

    @functools.cached_property
    def kind(self) -> str:
        """The op's family, for fallback fitting: conv, dwconv, gconv, linear, or the type
        (computed once per spec, like ``key``)."""
        if self.op_type == "Conv":
            cin = self.input_shapes[0][1]
            if self.groups > 1 and self.groups == cin:
                return "dwconv"
            return "gconv" if self.groups > 1 else "conv"
        if self.op_type == "Gemm" or self.weighted:
            return "linear"
        return self.op_type.lower()  # an attention MatMul (two activations) is "matmul"

    @functools.cached_property
    def weighted(self) -> bool:
        """Whether the op multiplies by a weight (a MatMul of two activations does not:
        its inputs besides a fused residual are all data)."""
        if self.op_type in ("Conv", "Gemm"):
            return True
        return self.op_type == "MatMul" and len(self.input_shapes) - ("Add" in self.fused) == 1

    @functools.cached_property
    def key(self) -> str:
        """The op's table key (computed once per spec: every prediction looks ops up by it,
        and the per-op correction counts them by it)."""
        shapes = ";".join("x".join(map(str, s)) for s in self.input_shapes)
        parts = [self.name, f"in={shapes}", "out=" + "x".join(map(str, self.output_shape))]
        if self.kernel:
            parts.append("k=" + "x".join(map(str, self.kernel)))
        for k, v in self.attrs:
            if k in ("group", "kernel_shape"):
                continue
            parts.append(f"{k}={_fmt(v)}")
        if self.op_type == "Conv":
            parts.append(f"g={self.groups}")
        parts.append(self.precision)
        if self.sparsity > 0:
            parts.append(f"sparse={self.sparsity:g}")
        return "|".join(parts)

    @property
    def macs(self) -> int:
        out = math.prod(self.output_shape)
        if self.op_type == "Conv":
            cin = self.input_shapes[0][1]
            return out * (cin // max(self.groups, 1)) * math.prod(self.kernel)
        if self.op_type in ("Gemm", "MatMul"):
            return out * self.input_shapes[0][-1]
        return out

    @property
    def bytes_moved(self) -> int:
        """Input, output and weight bytes at this op's precision (activations FP32/INT8)."""
        per = 1 if self.precision.startswith("int8") else 2 if self.precision == "fp16" else 4
        acts = sum(math.prod(s) for s in self.input_shapes) + math.prod(self.output_shape)
        weights = 0
        if self.op_type == "Conv":
            cin = self.input_shapes[0][1]
            weights = self.output_shape[1] * (cin // max(self.groups, 1)) * math.prod(self.kernel)
        elif self.op_type == "Gemm" or self.weighted:
            weights = self.output_shape[-1] * self.input_shapes[0][-1]
        return per * (acts + weights)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "fused": list(self.fused),
            "input_shapes": [list(s) for s in self.input_shapes],
            "output_shape": list(self.output_shape),
            "attrs": [[k, _jsonable(v)] for k, v in self.attrs],
            "kernel": list(self.kernel),
            "groups": self.groups,
            "precision": self.precision,
            "act_attrs": [[k, _jsonable(v)] for k, v in self.act_attrs],
            "consts": [[p, list(d), list(v)] for p, d, v in self.consts],
            "sparsity": self.sparsity,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpSpec:
        return cls(
            op_type=d["op_type"],
            fused=tuple(d["fused"]),
            input_shapes=tuple(tuple(s) for s in d["input_shapes"]),
            output_shape=tuple(d["output_shape"]),
            attrs=tuple((k, _untuple(v)) for k, v in d["attrs"]),
            kernel=tuple(d["kernel"]),
            groups=int(d["groups"]),
            precision=d["precision"],
            act_attrs=tuple((k, _untuple(v)) for k, v in d["act_attrs"]),
            consts=tuple((p, tuple(dims), tuple(v)) for p, dims, v in d["consts"]),
            sparsity=float(d.get("sparsity", 0.0)),
        )


def _fmt(v: Any) -> str:
    if isinstance(v, tuple | list):
        return "x".join(_fmt(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _jsonable(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _untuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def instantiate(
    t: OpTemplate, keep: dict[str, int], precision: str, sparsity: float = 0.0
) -> OpSpec:
    """The concrete op a template becomes under kept channel counts ``keep``."""
    return _at_counts(t, tuple(e.value(keep) for e in _exprs(t)), precision, sparsity)


#: a channel Concat of more inputs than this is priced by its output's size: its inputs'
#: widths are a fixed split of it (a dense block's concat of every earlier layer would
#: otherwise be a distinct op for each of 2**layers plans; what it costs is the copy)
CONCAT_BY_SIZE = 3


def _by_size(t: OpTemplate) -> bool:
    if t.op_type != "Concat" or len(t.inputs) <= CONCAT_BY_SIZE or not t.output.shape:
        return False
    axis = int(dict(t.attrs).get("axis", 1)) % len(t.output.shape)
    return axis == t.output.channel_axis and all(x.axis == t.output.axis for x in t.inputs)


def _exprs(t: OpTemplate) -> list[Expr]:
    """What a template's shapes depend on: each input's channels (none for a Concat
    priced by size), the output's, and the conv's groups (in that order;
    ``_at_counts`` reads them so)."""
    return [
        *(() if _by_size(t) else (x.channels for x in t.inputs)),
        t.output.channels,
        t.groups if t.groups is not None else Expr((), 1),
    ]


def _split_like(t: OpTemplate, total: int) -> list[int]:
    """A Concat's input widths for an output of ``total`` channels: its unpruned inputs'
    shares of it (the last takes the rounding), at least 1 each."""
    full = [x.shape[x.channel_axis] for x in t.inputs]
    out = [max(1, total * f // sum(full)) for f in full[:-1]]
    return [*out, max(1, total - sum(out))]


def _at_counts(
    t: OpTemplate, counts: tuple[int, ...], precision: str, sparsity: float = 0.0
) -> OpSpec:
    """The op ``t`` becomes where its channel expressions (``_exprs``) take ``counts``."""
    if _by_size(t):
        counts = (*_split_like(t, counts[0]), *counts)
    n = len(t.inputs)
    return OpSpec(
        op_type=t.op_type,
        fused=t.fused,
        input_shapes=tuple(x.with_channels(c) for x, c in zip(t.inputs, counts, strict=False)),
        output_shape=t.output.with_channels(counts[n]),
        attrs=t.attrs,
        kernel=t.weight_kernel,
        groups=counts[n + 1],
        precision=precision,
        act_attrs=t.act_attrs,
        consts=t.consts,
        sparsity=sparsity,
    )


def _distinct_counts(exprs: list[Expr], choices: Mapping[str, list[int]]) -> set[tuple[int, ...]]:
    """Every distinct tuple of values ``exprs`` take over the kept-channel choices of the
    groups they read. Partial sums are merged group by group, so the work grows with the
    distinct values, not with the plans: an op fed by a concat of 24 pruned layers (a
    dense block) has a few dozen input widths, not 2**24 plans."""
    names = sorted({g for e in exprs for g in e.groups})
    states: set[tuple[int, ...]] = {tuple(0 for _ in exprs)}
    for g in names:
        mults = [dict(e.terms).get(g, 0) for e in exprs]
        states = {
            tuple(s + m * k for s, m in zip(state, mults, strict=True))
            for state in states
            for k in choices[g]
        }
    return {
        tuple((e.const + s) // e.div for e, s in zip(exprs, state, strict=True)) for state in states
    }


#: An INT8 kernel whose fused residual Add runs in FP32: its other input comes in FP32, so
#: the runtime dequantizes the kernel's output and adds in FP32 (``fp32_nodes``).
INT8_FP32_ADD = "int8-fp32add"


def _int8_out(precisions: list[str], source: int) -> bool:
    return source >= 0 and precisions[source] == "int8"


def op_precisions(
    templates: Templates, int8: set[str], fp16: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    """The precision each op runs at when the layers ``int8`` (``int8_layers(plan)``) go
    INT8 and the layers ``fp16`` (``half_layers(plan)``, where the export runs them in
    FP16) go FP16: a weighted op of an FP16 layer is ``fp16`` (its model casts its input
    in and its output out, as ``to_half`` exports it); for INT8, by the rule
    ``export_onnx`` quantizes with (``fp32_nodes``): a weighted op runs
    INT8 when its layer does (its fused residual Add too, when the Add's other input
    comes in INT8); any other op runs INT8 when ONNX Runtime can run its type in INT8 and
    every input comes in INT8, so a MaxPool or a global pooling after an INT8 layer runs
    on 8-bit tensors, and one after an FP32 layer in FP32."""
    out: list[str] = []
    for t in templates.ops:
        if t.weighted:
            precision = "fp16" if t.module in fp16 else "fp32"
            if t.module in int8:
                precision = "int8"
                if "Add" in t.fused and not (t.sources and _int8_out(out, t.sources[-1])):
                    precision = INT8_FP32_ADD
        elif (
            t.op_type in int8_op_types() and t.sources and all(_int8_out(out, i) for i in t.sources)
        ):
            precision = "int8"
        else:
            precision = "fp32"
        out.append(precision)
    return out


#: The op types of precision boundaries: a tensor an FP32 op wrote is quantized once
#: for the INT8 ops that read it, and one an INT8 op wrote is dequantized once for the
#: FP32 ops (or the graph output) that read it. An INT8 op's table row is the kernel on
#: 8-bit tensors alone (``_bundle.op_model_bytes``), so a chain of INT8 ops pays the
#: boundary ops only at its two ends, as ONNX Runtime runs it.
QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"


def boundary_spec(op_type: str, shape: tuple[int, ...]) -> OpSpec:
    """The QuantizeLinear or DequantizeLinear op of a tensor of ``shape``."""
    return OpSpec(
        op_type=op_type,
        fused=(),
        input_shapes=(shape,),
        output_shape=shape,
        attrs=(),
        kernel=(),
        groups=1,
        precision="int8",
    )


def int8_inputs(t: OpTemplate, precision: str) -> list[int]:
    """Which data inputs of ``t`` it reads as 8-bit tensors at ``precision``: all of them
    for an INT8 op, all but the FP32 residual Add's for ``INT8_FP32_ADD``, none for FP32."""
    if precision == "int8":
        return list(range(len(t.inputs)))
    if precision == INT8_FP32_ADD:
        return list(range(len(t.inputs) - 1))
    return []


def boundaries(
    templates: Templates, precisions: list[str], present: set[int]
) -> tuple[dict[int, tuple[int, int]], set[int]]:
    """Where a plan's graph changes precision, by ``op_precisions``: the tensors to
    quantize (producing op index, -1 for a graph input -> (consumer index, its input
    position), the first INT8 reader) and the INT8 ops whose output is dequantized (an
    FP32 op reads it, or nothing in the graph does: a graph output). ``present``: the
    indices of the ops the plan runs."""
    quantize: dict[int, tuple[int, int]] = {}
    fp32_read: set[int] = set()
    read: set[int] = set()
    for i in sorted(present):
        t = templates.ops[i]
        as_int8 = set(int8_inputs(t, precisions[i]))
        for k, src in enumerate(t.sources):
            read.add(src)
            src_int8 = src >= 0 and precisions[src] == "int8"
            tensor = src if src >= 0 else -1 - k
            if k in as_int8 and not src_int8 and tensor not in quantize:
                quantize[tensor] = (i, k)
            elif k not in as_int8 and src_int8:
                fp32_read.add(src)
    dequantize = {
        i for i in present if precisions[i] == "int8" and (i in fp32_read or i not in read)
    }
    return quantize, dequantize


def _plan_templates(
    templates: Templates, plan: CompressionPlan, precisions: list[str]
) -> Iterator[tuple[int, OpTemplate, str | None, str]]:
    """(index, template, variant, precision) of each op a model compressed by ``plan``
    runs (``precisions``: ``op_precisions`` of the plan): the ops a registered technique
    removes are left out."""
    # a registered technique may change an op's shapes (a variant's node) or remove it
    techniques = [build_technique(name) for name in plan.techniques]
    for i, (t, precision) in enumerate(zip(templates.ops, precisions, strict=True)):
        variant = _variant(t, techniques, plan) if techniques and t.nodes else None
        if variant != DROPPED:
            yield i, t, variant, precision


def _plan_entries(
    templates: Templates, plan: CompressionPlan
) -> Iterator[tuple[str, int, OpTemplate, str | None, str, int]]:
    """Each op a model compressed by ``plan`` runs, in graph order, with the precision
    boundaries (``boundaries``) where they run: ``(what, index, template, variant,
    precision, input)``, ``what`` one of "op", ``QUANTIZE`` (before the op, of its
    input ``input``) and ``DEQUANTIZE`` (after the op, of its output)."""
    fp16 = set(half_layers(plan)) if templates.half else set()
    precisions = op_precisions(templates, set(int8_layers(plan)), fp16)
    entries = list(_plan_templates(templates, plan, precisions))
    quantize, dequantize = boundaries(templates, precisions, {i for i, *_ in entries})
    before: dict[int, list[int]] = {}
    for consumer, k in quantize.values():
        before.setdefault(consumer, []).append(k)
    for i, t, variant, precision in entries:
        for k in sorted(before.get(i, ())):
            yield QUANTIZE, i, t, variant, precision, k
        yield "op", i, t, variant, precision, -1
        if i in dequantize:
            yield DEQUANTIZE, i, t, variant, precision, -1


def plan_ops(templates: Templates, plan: CompressionPlan) -> list[OpSpec]:
    """The ops a model compressed by ``plan`` runs, precision boundaries included
    (memoized per template and shape, since a search asks for the same few shapes over
    and over)."""
    keep = templates.keep(plan)
    out = []
    for what, i, t, variant, precision, k in _plan_entries(templates, plan):
        source = t if variant is None else templates.variants[variant].by_node.get(t.nodes[0], t)
        sparsity = plan.sparsity.get(t.module, 0.0) if t.weighted else 0.0
        memo_key = (what, i, k, variant, precision, sparsity, *(keep[g] for g in t.group_names))
        spec = templates.memo.get(memo_key)
        if spec is None:
            if what == "op":
                spec = instantiate(source, keep, precision, sparsity)
            else:
                tensor = source.inputs[k] if what == QUANTIZE else source.output
                spec = boundary_spec(what, tensor.at(keep))
            templates.memo[memo_key] = spec
        out.append(spec)
    return out


def plan_op_nodes(templates: Templates, plan: CompressionPlan) -> list[list[str]]:
    """The ONNX node names of each op ``plan_ops`` gives, in the same order (what a
    profile of the compressed model is split by); a precision boundary owns none (its
    nodes are the glue between ops)."""
    return [
        list(t.nodes) if what == "op" else []
        for what, _, t, _, _, _ in _plan_entries(templates, plan)
    ]


def _variant(t: OpTemplate, techniques: list[Any], plan: CompressionPlan) -> str | None:
    """The variant (or ``DROPPED``) the plan's techniques give op ``t``; None: its own."""
    found = None
    for technique in techniques:
        variant = technique.latency_variant(t.nodes[0], plan)
        if variant == DROPPED:
            return DROPPED
        found = variant or found
    return found


def _keep_choices(templates: Templates, space: SearchSpace) -> dict[str, list[int]]:
    choices: dict[str, list[int]] = {}
    for name, (ch, step) in templates.group_channels.items():
        kept = {
            kept_channels(ch, r, math.lcm(space.options.round_to, step))
            for r in space.options.prune_ratios
        }
        choices[name] = sorted(kept)
    return choices


def _precisions(templates: Templates, space: SearchSpace) -> list[list[str]]:
    """Every precision each op can run at under some plan of ``space`` (``op_precisions``):
    a weighted op INT8 where its layer may take 8/8 bits (and INT8 with an FP32 residual
    Add where that Add's other input may come in FP32); any other op INT8 where ONNX
    Runtime runs its type in INT8 and all its inputs may come in INT8."""
    can = {q.name for q in space.layers if 8 in q.weight_bits and 8 in q.act_bits}
    half = {
        q.name
        for q in space.layers
        if templates.half and 16 in q.weight_bits and any(a >= 16 for a in q.act_bits)
    }
    out: list[list[str]] = []
    for t in templates.ops:
        options = ["fp32"]
        if t.weighted and t.module in half:
            options.append("fp16")
        if t.weighted:
            add = t.sources[-1] if "Add" in t.fused and t.sources else None
            if t.module in can:
                if add is None or (add >= 0 and "int8" in out[add]):
                    options.append("int8")
                if add is not None:
                    options.append(INT8_FP32_ADD)
        elif (
            t.op_type in int8_op_types()
            and t.sources
            and all(i >= 0 and "int8" in out[i] for i in t.sources)
        ):
            options.append("int8")
        out.append(options)
    return out


def enumerate_ops(templates: Templates, space: SearchSpace) -> Iterator[OpSpec]:
    """Every distinct op any plan of ``space`` can produce (deduplicated by key)."""
    choices = _keep_choices(templates, space)
    seen: set[str] = set()
    for graph in (templates, *templates.variants.values()):
        precisions = _precisions(graph, space)
        for t, options in zip(graph.ops, precisions, strict=True):
            for counts in sorted(_distinct_counts(_exprs(t), choices)):
                for precision in options:
                    spec = _at_counts(t, counts, precision)
                    found = [spec]
                    if precision == "int8":
                        found.append(boundary_spec(DEQUANTIZE, spec.output_shape))
                    found += [
                        boundary_spec(QUANTIZE, spec.input_shapes[k])
                        for k in int8_inputs(t, precision)
                    ]
                    for one in found:
                        if one.key not in seen:
                            seen.add(one.key)
                            yield one


#: ops whose constant inputs are int64 (shapes, axes, repeats); a Reduce op's axes too
_INT_CONST_OPS = ("Reshape", "Unsqueeze", "Squeeze", "Slice", "Expand", "Tile")

#: inputs that hold indices (int64), by op type: Swin V2's zeroed slice of its qkv bias
#: exports as a ScatterND on a constant
_INDEX_INPUTS = {
    "ScatterND": (1,),
    "ScatterElements": (1,),
    "GatherND": (1,),
    "GatherElements": (1,),
}

#: ops whose constant inputs broadcast against their data (a bias, a layer scale, a
#: LayerNorm's scale): a pruned plan changes the channel dimension they are sized by
_CHANNEL_CONST_OPS = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "LayerNormalization",
    "BatchNormalization",
    "PRelu",
)


def _fit_const(dims: tuple[int, ...], data: tuple[int, ...]) -> tuple[int, ...]:
    """``dims`` of a constant that broadcasts against a tensor of shape ``data``, with
    each dimension that is neither 1 nor ``data``'s (right-aligned) made ``data``'s."""
    if len(dims) > len(data):
        return dims
    tail = data[len(data) - len(dims) :]
    return tuple(d if d in (1, t) else t for d, t in zip(dims, tail, strict=True))


def build_onnx(spec: OpSpec, *, seed: int = 0, opset: int = 17) -> Any:
    """A one-kernel FP32 ONNX model of ``spec`` (random weights), as an onnx ModelProto;
    for a precision boundary, its one QuantizeLinear or DequantizeLinear
    (``boundary_model``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if spec.op_type in (QUANTIZE, DEQUANTIZE):
        return boundary_model(spec, opset)

    rng = np.random.default_rng(seed)
    inits: list[Any] = []
    nodes: list[Any] = []
    inputs = [
        helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(s))
        for i, s in enumerate(spec.input_shapes)
    ]

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    attrs = dict(spec.attrs)
    main_inputs = ["x0"]
    if spec.op_type == "Conv":
        cin = spec.input_shapes[0][1]
        cout = spec.output_shape[1]
        w = rng.standard_normal((cout, cin // spec.groups, *spec.kernel)) * 0.1
        main_inputs += [const("w", w), const("b", rng.standard_normal(cout) * 0.1)]
        attrs["group"] = spec.groups
        attrs["kernel_shape"] = list(spec.kernel)
    elif spec.op_type == "Gemm":
        fin, fout = spec.input_shapes[0][-1], spec.output_shape[-1]
        shape = (fout, fin) if attrs.get("transB", 0) else (fin, fout)
        main_inputs += [
            const("w", rng.standard_normal(shape) * 0.1),
            const("b", rng.standard_normal(fout) * 0.1),
        ]
    elif spec.op_type == "MatMul" and spec.weighted:
        fin, fout = spec.input_shapes[0][-1], spec.output_shape[-1]
        main_inputs.append(const("w", rng.standard_normal((fin, fout)) * 0.1))
    else:
        main_inputs = _weightless_inputs(spec, rng, inits)
    out = "y"
    current = "t0" if spec.fused else out
    nodes.append(helper.make_node(spec.op_type, main_inputs, [current], name="op", **attrs))
    for i, f in enumerate(spec.fused):
        nxt = out if i == len(spec.fused) - 1 else f"t{i + 1}"
        if f == "Add":
            nodes.append(helper.make_node("Add", [current, "x1"], [nxt], name="add"))
        elif f == "Clip":
            act = dict(spec.act_attrs)
            bounds = [
                const("clip_min", np.array(act.get("min", 0.0))),
                const("clip_max", np.array(act.get("max", 6.0))),
            ]
            nodes.append(helper.make_node("Clip", [current, *bounds], [nxt], name="act"))
        else:
            nodes.append(helper.make_node(f, [current], [nxt], name="act", **dict(spec.act_attrs)))
        current = nxt
    output = helper.make_tensor_value_info(out, TensorProto.FLOAT, list(spec.output_shape))
    graph = helper.make_graph(nodes, "op", inputs, [output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _weightless_inputs(spec: OpSpec, rng: np.random.Generator, inits: list[Any]) -> list[str]:
    """A weightless op's inputs: its data inputs, and its constants (``spec.consts``)
    added to ``inits`` at their positions: small ones by value, large ones (a LayerNorm's
    scale) drawn from ``rng``, shapes and axes as int64."""
    from onnx import numpy_helper

    main_inputs = [f"x{i}" for i in range(len(spec.input_shapes))]
    for pos, dims, values in spec.consts:
        name = f"c{pos}"
        array: np.ndarray[Any, Any]
        if values:
            array = np.array(values, dtype=np.float32).reshape(dims)
        else:  # a large constant (a LayerNorm's scale): its shape is what costs
            array = (1.0 + rng.standard_normal(dims) * 0.1).astype(np.float32)
        if spec.op_type == "Reshape" and pos == 1:
            array = np.array(spec.output_shape, dtype=np.int64)
        elif (
            spec.op_type in _INT_CONST_OPS
            or pos in _INDEX_INPUTS.get(spec.op_type, ())
            or (spec.op_type.startswith("Reduce") and pos == 1)
        ):
            array = array.astype(np.int64)
        elif spec.input_shapes and spec.op_type in _CHANNEL_CONST_OPS:
            data = spec.input_shapes[0]
            if spec.op_type == "BatchNormalization" and len(data) > 1:
                data = data[1:2]  # its scale, bias, mean and variance: one per channel
            fitted = _fit_const(array.shape, data)
            if fitted != array.shape:  # a pruned plan's channels: its constant follows
                array = (1.0 + rng.standard_normal(fitted) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(array, name))
        while len(main_inputs) < pos:
            main_inputs.append("")
        main_inputs.insert(pos, name)
    return main_inputs


def boundary_model(spec: OpSpec, opset: int = 17) -> Any:
    """A model of one QuantizeLinear (FP32 to UINT8) or DequantizeLinear (UINT8 to FP32)
    of ``spec``'s tensor, with a per-tensor scale and zero point, as ONNX Runtime's
    quantizer writes them for activations."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = list(spec.input_shapes[0])
    types = (TensorProto.FLOAT, TensorProto.UINT8)
    src, dst = types if spec.op_type == QUANTIZE else types[::-1]
    inits = [
        numpy_helper.from_array(np.array(0.05, dtype=np.float32), "scale"),
        numpy_helper.from_array(np.array(128, dtype=np.uint8), "zero_point"),
    ]
    node = helper.make_node(spec.op_type, ["x0", "scale", "zero_point"], ["y"], name="op")
    graph = helper.make_graph(
        [node],
        "boundary",
        [helper.make_tensor_value_info("x0", src, shape)],
        [helper.make_tensor_value_info("y", dst, shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def unbuildable_model(opset: int = 17) -> Any:
    """What a bundle holds for an op whose model could not be built: a node of an operator
    no runtime has, so any runner records the op unsupported instead of timing something
    else in its place (the manifest entry's ``build_error`` says why)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    node = helper.make_node("NotBuilt", ["x0"], ["y"], domain="frontier.unbuilt")
    graph = helper.make_graph([node], "unbuilt", [x], [y])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("frontier.unbuilt", 1)],
    )
    model.ir_version = 8
    return model


def identity_model(opset: int = 17) -> Any:
    """A model that copies a 1-element tensor: its latency is the per-run overhead."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x0"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model
