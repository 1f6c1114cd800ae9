"""From a model to the operators ONNX Runtime runs, as functions of a plan's channel counts.

The uncompressed model is exported to ONNX once. Its graph is cut into *op templates*
the way ONNX Runtime's CPU provider fuses it: a Conv/Gemm with the residual Add and the
activation that follow it is one kernel; other nodes (pooling, concat, SE multiplies)
are their own. Each tensor's channel count is an affine expression of the kept channel
counts of the space's groups, so the shapes of every op under any plan follow without
touching the model again: predicting a plan's latency is arithmetic plus table lookups.

Over 500 lines: cutting the graph into the kernels ONNX Runtime fuses and writing each
tensor's channels as affine expressions are one walk of the ONNX graph.
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frontier.spaces import CompressionPlan, SearchSpace, kept_channels, onnx_module_name

#: Activations ONNX Runtime fuses into the convolution or GEMM before them.
FUSED_ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh"}
WEIGHTED = {"Conv", "Gemm", "MatMul"}
_SKIP = {"Identity", "Constant", "Shape", "Gather", "Unsqueeze", "Dropout"}


@dataclass(frozen=True)
class Expr:
    """An affine channel count: sum of multiplier x kept channels of a group, plus const,
    over ``div`` (a channel axis split into ``div`` equal parts: a channel shuffle)."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0
    div: int = 1

    @staticmethod
    def of_group(name: str) -> Expr:
        return Expr(((name, 1),), 0)

    def _over(self, div: int) -> Expr:
        """The same count written over ``div`` (a multiple of this one's)."""
        k = div // self.div
        return Expr(tuple((g, m * k) for g, m in self.terms), self.const * k, div)

    def __add__(self, other: Expr) -> Expr:
        div = math.lcm(self.div, other.div)
        a, b = self._over(div), other._over(div)
        merged: dict[str, int] = dict(a.terms)
        for g, m in b.terms:
            merged[g] = merged.get(g, 0) + m
        return Expr(tuple(sorted(merged.items())), a.const + b.const, div)

    def scale(self, k: int) -> Expr:
        if self.div % k == 0:
            return Expr(self.terms, self.const, self.div // k)
        return Expr(tuple((g, m * k) for g, m in self.terms), self.const * k, self.div)

    def split(self, parts: int) -> Expr:
        """One of ``parts`` equal parts of this count."""
        return Expr(self.terms, self.const, self.div * parts)

    def value(self, keep: Mapping[str, int]) -> int:
        return (self.const + sum(m * keep[g] for g, m in self.terms)) // self.div

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(g for g, _ in self.terms)


@dataclass(frozen=True)
class TensorT:
    """A tensor's shape with its channel dimension as an expression: axis 1, the last of
    a 3-D sequence, or ``axis`` where the graph moved it (NHWC after a permute, the
    group axis a channel shuffle splits off)."""

    shape: tuple[int, ...]
    channels: Expr
    axis: int | None = None

    def at(self, keep: Mapping[str, int]) -> tuple[int, ...]:
        return self.with_channels(self.channels.value(keep))

    @property
    def channel_axis(self) -> int:
        """The axis its channels are on."""
        return self.axis if self.axis is not None else _channel_axis(self.shape or (1, 1))

    def with_channels(self, channels: int) -> tuple[int, ...]:
        """The shape with ``channels`` on its channel axis."""
        if len(self.shape) < 2:
            return self.shape
        axis = self.channel_axis
        return (*self.shape[:axis], channels, *self.shape[axis + 1 :])


@dataclass(frozen=True)
class OpTemplate:
    """One kernel of the runtime's graph, shapes as functions of the plan."""

    op_type: str  # Conv, Gemm, MatMul, MaxPool, Add, Concat, ...
    inputs: tuple[TensorT, ...]
    output: TensorT
    attrs: tuple[tuple[str, Any], ...] = ()
    module: str = ""  # the torch module of a weighted op
    weight_kernel: tuple[int, ...] = ()  # spatial kernel of a conv
    groups: Expr | None = None  # conv groups (depthwise convs follow their channels)
    fused: tuple[str, ...] = ()  # "Add" and/or an activation fused into a weighted op
    act_attrs: tuple[tuple[str, Any], ...] = ()
    consts: tuple[tuple[int, tuple[int, ...], tuple[float, ...]], ...] = ()  # (pos, dims, values)
    nodes: tuple[str, ...] = ()  # ONNX node and output names of the chain (profile matching)
    #: per data input (``inputs`` order), the index of the op producing it; -1: a graph input
    sources: tuple[int, ...] = ()
    #: a Conv, Gemm or MatMul with a weight initializer (an attention MatMul has none)
    weighted: bool = False

    @functools.cached_property
    def group_names(self) -> tuple[str, ...]:
        names: set[str] = set(self.output.channels.groups)
        for t in self.inputs:
            names.update(t.channels.groups)
        return tuple(sorted(names))


@dataclass
class Templates:
    """All op templates of one architecture, and the groups that drive them."""

    ops: list[OpTemplate]
    group_channels: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (ch, step)
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    #: the graphs of the space's registered techniques' variants (``latency_variants``),
    #: by variant name: a plan's op takes its shapes from the variant its technique names
    variants: dict[str, Templates] = field(default_factory=dict)
    #: the export runs 16-bit layers in FP16 (``export_onnx(half=True)``, a GPU's): their
    #: weighted ops are priced at ``fp16``; else FP32, as exported for a CPU
    half: bool = False

    @functools.cached_property
    def by_node(self) -> dict[str, OpTemplate]:
        """Each op by the name of its ONNX node."""
        return {t.nodes[0]: t for t in self.ops if t.nodes}

    def keep(self, plan: CompressionPlan) -> dict[str, int]:
        """Kept channels of every group under ``plan`` (exactly as ``apply_plan`` keeps them)."""
        return {
            name: kept_channels(ch, plan.prune.get(name, 0.0), math.lcm(plan.round_to, step))
            for name, (ch, step) in self.group_channels.items()
        }


def _channels(shape: tuple[int, ...]) -> int:
    """The channel count of a tensor: axis 1 (NCHW, or features of a 2-D batch), the last
    axis of a 3-D sequence (batch, tokens, features)."""
    if not shape:
        return 1
    return shape[_channel_axis(shape)] if len(shape) > 1 else shape[0]


def _attrs(node: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((a.name, _attr_value(a)) for a in node.attribute))


def _shuffle_reshape(before: tuple[int, ...], after: tuple[int, ...], axis: int) -> str:
    """Whether a Reshape splits a 4-D tensor's channel axis into (groups, channels per
    group) ("split"), or merges a 5-D tensor's axes 1 and 2 back into channels, one of
    which holds them ("merge"): a channel shuffle's two reshapes; else ""."""
    if not before or not after or after[0] != before[0]:
        return ""
    if len(before) == 4 and len(after) == 5 and axis == 1:
        same = after[1] * after[2] == before[1] and after[3:] == before[2:]
        return "split" if same else ""
    if len(before) == 5 and len(after) == 4 and axis in (1, 2):
        same = after[1] == before[1] * before[2] and after[2:] == before[3:]
        return "merge" if same else ""
    return ""


def _channel_axis(shape: tuple[int, ...]) -> int:
    """Where ``_channels`` reads a tensor's channels (a shape of rank 2 or more)."""
    return len(shape) - 1 if len(shape) == 3 else 1


def _attr_value(attr: Any) -> Any:
    import onnx

    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(value)
    return value


def _shape(value_info: Any) -> tuple[int, ...]:
    dims = value_info.type.tensor_type.shape.dim
    return tuple(int(d.dim_value) if d.dim_value > 0 else 1 for d in dims)


def build_templates(
    model: Any, example_inputs: Any, space: SearchSpace, *, batch_size: int = 1, half: bool = False
) -> Templates:
    """Export ``model`` (uncompressed, at ``batch_size``) and cut its graph into op
    templates; and the same for each variant of the space's registered techniques
    (``variants``). ``half``: ``Templates.half``."""
    from frontier.spaces import apply_plan

    templates = templates_from_onnx(_exported(model, example_inputs, batch_size), space)
    for technique in space.techniques():
        for name, plan in technique.latency_variants(space).items():
            variant = apply_plan(model, plan, example_inputs)
            # its shapes are its own: not functions of the space's channel groups
            templates.variants[name] = templates_from_onnx(
                _exported(variant, example_inputs, batch_size), space, follow_groups=False
            )
            templates.variants[name].half = half
    templates.half = half
    return templates


def shape_mismatches(templates: Templates) -> list[str]:
    """Each op tensor whose shape at the uncompressed plan is not the exported graph's:
    a channel expression that does not follow the graph (so every plan's op is built
    at a wrong size). Empty when the templates are right; one line per tensor."""
    keep = templates.keep(CompressionPlan())
    found = []
    for op in templates.ops:
        for k, t in enumerate([*op.inputs, op.output]):
            if t.shape and t.at(keep) != t.shape:
                what = f"input {k}" if k < len(op.inputs) else "output"
                node = op.nodes[0] if op.nodes else op.op_type
                found.append(f"{node} ({op.op_type}) {what}: {t.at(keep)}, the graph's {t.shape}")
    return found


def _exported(model: Any, example_inputs: Any, batch_size: int = 1) -> Any:
    from onnx import shape_inference

    from frontier.spaces import CompressionPlan, export_onnx, load_onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        export_onnx(model, CompressionPlan(), example_inputs, path)
        # the graph and shapes are what is read: a model too large for one message
        # (weights over 2 GB) keeps its weights as references to its data file
        proto = load_onnx(path, weights=False)
        # the dynamic batch made concrete, so every shape follows it (a shape computed
        # from it, as ShuffleNet's channel shuffle is, is known only then)
        _fix_batch(proto.graph, batch_size)
        # data propagation: shapes computed in the graph (an attention block's reshapes
        # to heads) become known too
        inferred = shape_inference.infer_shapes(proto, data_prop=True)
        _run_for_shapes(inferred, Path(tmp))
        return inferred


def _run_for_shapes(proto: Any, folder: Path) -> None:
    """Fill in the shapes static inference left unknown (ShuffleNet's channel shuffle
    divides a channel count in the graph, which ONNX's data propagation does not) by
    running the graph once in ONNX Runtime on seeded inputs of its (concrete) shapes.
    ``folder``: where the export keeps its weights, if it keeps them beside it."""
    import numpy as np
    import onnx

    from ..runner import open_session, session_options

    graph = proto.graph
    unknown = [
        vi
        for vi in graph.value_info
        if vi.type.tensor_type.elem_type
        and (
            # no shape at all: not even its rank is known (the reshapes of attention
            # to its heads, whose target shape is computed in the graph)
            not vi.type.tensor_type.HasField("shape")
            or any(d.dim_value <= 0 for d in vi.type.tensor_type.shape.dim)
        )
    ]
    if not unknown:
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    del probe.graph.output[:]
    probe.graph.output.extend(unknown)
    data = probe.SerializeToString()
    source: bytes | str = data
    if any(i.data_location == onnx.TensorProto.EXTERNAL for i in probe.graph.initializer):
        # weights held by reference to the data file in ``folder`` (a model too large
        # for one message): the probe is run from beside it, where they are found
        where = folder / "probe.onnx"
        where.write_bytes(data)
        source = str(where)
    run, _ = open_session(source, session_options(1))
    for vi, value in zip(unknown, run(), strict=True):
        shape = vi.type.tensor_type.shape
        if not vi.type.tensor_type.HasField("shape"):
            shape.SetInParent()  # a known rank of 0 (a scalar) as well
            shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in range(np.ndim(value)))
        if len(shape.dim) == np.ndim(value):
            for d, n in zip(shape.dim, np.shape(value), strict=True):
                d.dim_value = int(n)


def _fix_batch(graph: Any, batch_size: int) -> None:
    """Set the dynamic first dimension of ``graph``'s inputs and outputs to
    ``batch_size`` and drop the exporter's inferred shapes (inferred again from it)."""
    for value in [*graph.input, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_value = batch_size
    del graph.value_info[:]


def templates_from_onnx(proto: Any, space: SearchSpace, *, follow_groups: bool = True) -> Templates:
    """Op templates of an ONNX graph exported from the model ``space`` was discovered on
    (``follow_groups``: channel counts follow the space's prunable groups)."""
    member_of = {m: g.name for g in space.groups for m in g.members} if follow_groups else {}
    walk = _Walk(_Graph.of(proto.graph), member_of)
    for node in proto.graph.node:
        walk.visit(node)
    group_channels = {g.name: (g.channels, g.channel_groups) for g in space.groups if follow_groups}
    return Templates(ops=walk.ops, group_channels=group_channels)


@dataclass
class _Graph:
    """An exported graph, indexed for ``_Walk``: each initializer's shape, the values of
    small constants, each tensor's shape, the tensors that are not float (token ids,
    masks) and each tensor's consumers."""

    inits: dict[str, tuple[int, ...]]
    values: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]
    not_float: set[str]
    consumers: dict[str, list[Any]]
    inputs: list[str]

    @staticmethod
    def of(graph: Any) -> _Graph:
        from onnx import numpy_helper

        inits = {i.name: tuple(i.dims) for i in graph.initializer}
        values: dict[str, Any] = {
            i.name: numpy_helper.to_array(i) for i in graph.initializer if math.prod(i.dims) <= 64
        }
        for node in graph.node:
            if node.op_type == "Identity" and node.input[0] in inits:  # aliased weights
                inits[node.output[0]] = inits[node.input[0]]
                if node.input[0] in values:
                    values[node.output[0]] = values[node.input[0]]
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        values[node.output[0]] = numpy_helper.to_array(a.t)
                        inits[node.output[0]] = tuple(a.t.dims)
        shapes: dict[str, tuple[int, ...]] = {}
        not_float: set[str] = set()
        for vi in [*graph.input, *graph.value_info, *graph.output]:
            shapes[vi.name] = _shape(vi)
            if vi.type.tensor_type.elem_type not in (0, 1):  # 1: FLOAT (0: unknown)
                not_float.add(vi.name)
        consumers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
        inputs = [vi.name for vi in graph.input if vi.name not in inits]
        return _Graph(inits, values, shapes, not_float, consumers, inputs)


class _Walk:
    """One pass over a graph's nodes in order, cutting them into op templates: each
    tensor's channel expression (``exprs``) and the op that computes it (``producer``)
    are known by the time a node reads it."""

    def __init__(self, graph: _Graph, member_of: dict[str, str]) -> None:
        self.g, self.member_of = graph, member_of
        self.exprs = {name: Expr((), _channels(graph.shapes[name])) for name in graph.inputs}
        #: tensors whose channels are not on their rank's usual axis (``TensorT.axis``)
        self.axes: dict[str, int] = {}
        self.producer: dict[str, int] = {}  # tensor -> index of the op that computes it
        # tensors that hold shapes (Shape and what is computed from it alone): the
        # graph's shape arithmetic, which costs nothing worth pricing
        self.shape_like: set[str] = set()
        self.absorbed: set[str] = set()  # nodes fused into an op before them
        self.ops: list[OpTemplate] = []

    def tensor(self, name: str) -> TensorT:
        shape = self.g.shapes.get(name, self.g.inits.get(name, ()))
        ch = self.exprs.get(name)
        if ch is None:
            return TensorT(shape, Expr((), _channels(shape)))
        return TensorT(shape, ch, self.axes.get(name))

    def visit(self, node: Any) -> None:
        """Cut ``node`` into an op template, or pass its channels through where it is
        shape arithmetic, an int/bool op, or has no data input."""
        if node.name in self.absorbed:
            return
        g = self.g
        data_inputs = [i for i in node.input if i and i not in g.inits]
        if node.op_type == "Shape" or (
            data_inputs
            and all(i in self.shape_like for i in data_inputs)
            and all(len(g.shapes.get(o, (0, 0))) <= 1 for o in node.output)
        ):
            self.shape_like.update(node.output)
            return
        reshape_to = None
        if (
            node.op_type == "Reshape"
            and len(data_inputs) == 2
            and data_inputs[1] in self.shape_like
        ):
            # a shape computed in the graph: the op reshapes to its (known) output shape
            data_inputs = data_inputs[:1]
            reshape_to = g.shapes.get(node.output[0], ())
        skip = node.op_type in _SKIP or any(
            t in g.not_float for t in (*data_inputs, *node.output)
        )  # int/bool ops: token ids and attention masks, tiny beside the float ops
        if skip or not data_inputs:
            self._pass_through(node, data_inputs)
            return
        self._add_op(node, data_inputs, reshape_to)

    def _pass_through(self, node: Any, data_inputs: list[str]) -> None:
        for out in node.output:
            same_rank = data_inputs and len(self.g.shapes.get(data_inputs[0], ())) == len(
                self.g.shapes.get(out, ())
            )
            if same_rank and data_inputs[0] in self.exprs:
                self.exprs[out] = self._sliced(
                    self.tensor(data_inputs[0]), self.g.shapes.get(out, ())
                )
                if data_inputs[0] in self.axes:
                    self.axes[out] = self.axes[data_inputs[0]]
            if data_inputs and data_inputs[0] in self.producer:
                self.producer[out] = self.producer[data_inputs[0]]

    @staticmethod
    def _sliced(source: TensorT, shape: tuple[int, ...]) -> Expr:
        """The channels of a tensor of ``shape`` that ``source`` passed through (a
        ``Slice`` whose bounds the graph computes, as ``chunk`` exports; a Swin window's
        fixed shifted slices): ``source``'s, or the share of them kept where the node
        cuts the channel axis."""
        axis = source.channel_axis
        if len(shape) != len(source.shape) or len(shape) < 2 or shape[axis] == source.shape[axis]:
            return source.channels
        if not source.channels.groups:
            return Expr((), shape[axis])
        if shape[axis] and source.shape[axis] % shape[axis] == 0:  # a chunk of pruned ones
            return source.channels.split(source.shape[axis] // shape[axis])
        return source.channels

    def _add_op(self, node: Any, data_inputs: list[str], reshape_to: Any) -> None:
        g = self.g
        attrs = _attrs(node)
        in_t = self.tensor(data_inputs[0])
        out_name = node.output[0]
        out_shape = g.shapes.get(out_name, ())
        groups: Expr | None = None
        kernel: tuple[int, ...] = ()
        module = ""
        out_axis: int | None = None
        weighted = node.op_type in WEIGHTED and node.input[1] in g.inits
        if weighted:
            module = onnx_module_name(node.name)
            weight = g.inits[node.input[1]]
            if node.op_type == "Conv":
                n_groups = int(dict(attrs).get("group", 1))
                kernel = tuple(weight[2:])
                if n_groups > 1 and weight[1] == 1 and weight[0] == n_groups:
                    out_expr, groups = in_t.channels, in_t.channels  # depthwise
                else:
                    out_expr = self._weighted_out(module, weight[0])
                    groups = Expr((), n_groups)
            else:
                out_expr = self._weighted_out(module, out_shape[-1] if out_shape else weight[0])
                if len(out_shape) > 3:  # a Linear on channels-last (NHWC) data
                    out_axis = len(out_shape) - 1
        else:
            out_expr, out_axis = self._out_channels(node, data_inputs, in_t, out_shape)
            if node.op_type == "Split":
                self._split_outputs(node, in_t)
        self.exprs[out_name] = out_expr
        if out_axis is not None:
            self.axes[out_name] = out_axis
        inputs = [self.tensor(name) for name in data_inputs]
        sources = [self.producer.get(name, -1) for name in data_inputs]
        consts = self._consts(node, weighted, reshape_to)
        fused: list[str] = []
        names = [node.name, *node.output]
        outputs = list(node.output)
        act_attrs: tuple[tuple[str, Any], ...] = ()
        if weighted:
            act_attrs = self._fuse(out_name, out_expr, inputs, sources, fused, names, outputs)
        for name in outputs:
            self.producer[name] = len(self.ops)
        self.ops.append(
            OpTemplate(
                op_type=node.op_type,
                inputs=tuple(inputs),
                output=TensorT(out_shape, out_expr, out_axis),
                attrs=attrs,
                module=module,
                weight_kernel=kernel,
                groups=groups,
                fused=tuple(fused),
                act_attrs=act_attrs,
                consts=consts,
                nodes=tuple(n for n in names if n),
                sources=tuple(sources),
                weighted=weighted,
            )
        )

    def _weighted_out(self, module: str, channels: int) -> Expr:
        """A Conv/Gemm's output channels: its group's kept count where it is prunable."""
        if module in self.member_of:
            return Expr.of_group(self.member_of[module])
        return Expr((), channels)

    def _out_channels(
        self, node: Any, data_inputs: list[str], in_t: TensorT, out_shape: tuple[int, ...]
    ) -> tuple[Expr, int | None]:
        """A weightless op's output channels, from its inputs', and the axis they are on
        where it is not the rank's usual one."""
        axis = in_t.channel_axis
        concat_axis = int(dict(_attrs(node)).get("axis", 1)) % max(len(in_t.shape), 1)
        if node.op_type == "Concat" and concat_axis == axis:
            out_expr = Expr()
            for name in data_inputs:
                out_expr = out_expr + self.tensor(name).channels
            return out_expr, in_t.axis
        if (
            node.op_type in ("Flatten", "Reshape")
            and len(out_shape) == 2
            and len(in_t.shape) > 2
            and out_shape[0] == in_t.shape[0]
            and axis >= 1
        ):  # every axis after the first into one: the channels times the others' sizes
            others = math.prod(in_t.shape[1:]) // max(in_t.shape[axis], 1)
            return in_t.channels.scale(others), None
        if node.op_type == "Transpose" and len(in_t.shape) == len(out_shape) > 3:
            perm = list(dict(_attrs(node)).get("perm", range(len(out_shape) - 1, -1, -1)))
            moved = perm.index(axis)
            return in_t.channels, None if moved == _channel_axis(out_shape) else moved
        if node.op_type == "Reshape":
            shuffled = _shuffle_reshape(in_t.shape, out_shape, axis)
            if shuffled == "split":  # (N, C, H, W) -> (N, g, C/g, H, W): C/g on axis 2
                return in_t.channels.split(out_shape[1]), 2
            if shuffled == "merge":  # (N, a, b, H, W) -> (N, a*b, H, W), channels in a or b
                return in_t.channels.scale(in_t.shape[3 - axis]), None
        if node.op_type in ("Reshape", "Transpose", "MatMul"):
            return Expr((), _channels(out_shape) if out_shape else 1), None
        if (
            node.op_type.startswith("Reduce")
            and out_shape
            and _channels(out_shape) != _channels(in_t.shape)
        ):  # reduced over the channel axis (a mask's token count): a constant
            return Expr((), _channels(out_shape)), None
        return self._sliced(in_t, out_shape), in_t.axis

    def _split_outputs(self, node: Any, in_t: TensorT) -> None:
        """A Split into equal parts along the channel axis (a shuffle block's chunk):
        each part is that share of the input's channels."""
        shapes = [self.g.shapes.get(o, ()) for o in node.output]
        axis = in_t.channel_axis
        split_axis = int(dict(_attrs(node)).get("axis", 0)) % max(len(in_t.shape), 1)
        if split_axis != axis or not all(shapes) or len({s[axis] for s in shapes}) != 1:
            return
        for out in node.output:
            self.exprs[out] = in_t.channels.split(len(node.output))
            if in_t.axis is not None:
                self.axes[out] = in_t.axis

    def _consts(self, node: Any, weighted: bool, reshape_to: Any) -> tuple[Any, ...]:
        """A weightless op's constant inputs: small ones by value, larger ones (a
        LayerNorm's scale and bias) by shape only, their values drawn when built."""
        if reshape_to is not None:
            return ((1, (len(reshape_to),), tuple(float(v) for v in reshape_to)),)
        g = self.g
        return tuple(
            (
                pos,
                tuple(g.inits[name]),
                tuple(float(v) for v in g.values[name].ravel()) if name in g.values else (),
            )
            for pos, name in enumerate(node.input)
            if not weighted and (name in g.values or name in g.inits)
        )

    def _fuse(
        self,
        out_name: str,
        out_expr: Expr,
        inputs: list[TensorT],
        sources: list[int],
        fused: list[str],
        names: list[str],
        outputs: list[str],
    ) -> tuple[tuple[str, Any], ...]:
        """Follow the runtime's fusion after a Conv/Gemm: [residual Add] then
        [activation]; each absorbed node extends ``fused``, ``names`` and ``outputs``
        (and the Add's other input ``inputs`` and ``sources``). Returns the activation's
        attributes."""
        g = self.g
        act_attrs: tuple[tuple[str, Any], ...] = ()
        current = out_name
        for _ in range(2):
            users = g.consumers.get(current, [])
            if len(users) != 1:
                break
            nxt = users[0]
            if nxt.op_type == "Add" and "Add" not in fused and not fused:
                other = [i for i in nxt.input if i != current]
                # The Add joins the later of its two producers: the other input
                # must be known already (a ResNet block's conv3 and downsample
                # both feed one Add; only the second can take it).
                if len(other) != 1 or other[0] in g.inits or other[0] not in self.exprs:
                    break
                inputs.append(self.tensor(other[0]))
                sources.append(self.producer.get(other[0], -1))
            elif nxt.op_type in FUSED_ACTIVATIONS and not any(
                f in FUSED_ACTIVATIONS for f in fused
            ):
                act_attrs = _attrs(nxt)
                if nxt.op_type == "Clip":  # bounds are constant inputs in opset >= 11
                    bounds = [float(g.values[i]) if i in g.values else None for i in nxt.input[1:3]]
                    act_attrs = tuple(
                        (k, v)
                        for k, v in zip(("min", "max"), bounds, strict=False)
                        if v is not None
                    )
            else:
                break
            fused.append(nxt.op_type)
            names += [nxt.name, *nxt.output]
            outputs += nxt.output
            self.absorbed.add(nxt.name)
            self.exprs[nxt.output[0]] = out_expr
            if out_name in self.axes:
                self.axes[nxt.output[0]] = self.axes[out_name]
            current = nxt.output[0]
        return act_attrs
