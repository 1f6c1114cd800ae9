"""Why a model is (not) faster: each layer's time inside the whole model, from ONNX
Runtime's profiler, beside its MACs, the kernels it ran and its precision, and the same
layers of a baseline.

A layer is the PyTorch module an exported node came from (the exporter names nodes
``/features/features.0/Conv``: layer ``features.0``). ONNX Runtime fuses nodes and
names the fused node after the chain's last output (a Conv+Relu runs as
``/features/features.2/Relu_output_0_nchwc``), so each profiled node goes to the
original node or output whose name is the longest prefix of its own, and an activation
or normalisation fused after a Conv or Gemm goes to that Conv's layer. Nodes no layer
owns (layout reorders, quantize/dequantize between layers) are the glue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..device._devices import CPU_1T, LocalDevice
from ..device._table import TableError

#: ops that follow a compute op into its fused kernel: timed with the producer's layer
_FOLLOWERS = {
    "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Mul",
    "BatchNormalization", "Add", "QuantizeLinear", "DequantizeLinear",
}  # fmt: skip
_COMPUTE = {"Conv", "Gemm", "MatMul", "ConvInteger", "MatMulInteger", "QLinearConv",
            "QLinearMatMul", "QGemm", "ConvTranspose"}  # fmt: skip
#: where the weight is among a compute op's inputs (ONNX Runtime's INT8 forms carry
#: each operand's scale and zero point after it)
_WEIGHT_INPUT = {"QLinearConv": 3, "QLinearMatMul": 3, "QGemm": 3}
_INT8 = ("QLinear", "Integer", "QGemm", "DynamicQuantize")
GLUE = "(glue)"
#: layers summing to more than this times the measured run: the profiler's cost shows
OVERSUM = 1.1


@dataclass
class LayerTime:
    """One layer of a profiled model."""

    layer: str
    ms: float = 0.0
    macs: int = 0
    kernels: list[str] = field(default_factory=list)

    @property
    def precision(self) -> str:
        int8 = any(k.startswith(_INT8) or k.endswith(_INT8) for k in self.kernels)
        return "int8" if int8 else "fp32"


@dataclass
class ModelProfile:
    """A model's layers in execution order, and how long a whole run took."""

    layers: list[LayerTime]
    run_ms: float  # the profiler's median whole run
    measured_ms: float | None = None  # the timing protocol's measurement, when taken

    @property
    def layers_ms(self) -> float:
        return sum(layer.ms for layer in self.layers)

    def by_name(self) -> dict[str, LayerTime]:
        return {layer.layer: layer for layer in self.layers}

    def caution(self) -> str | None:
        """A warning when the layers' times add up to more than the model measured
        (by a tenth or more): the profiler's own cost, a few microseconds a node, then
        weighs on short kernels (an INT8 model's), so read shares, not milliseconds."""
        if not self.measured_ms or self.layers_ms <= OVERSUM * self.measured_ms:
            return None
        ratio = self.layers_ms / self.measured_ms
        return (
            f"the layers' profiled times sum to {ratio:.2f}x the model's measured "
            f"{self.measured_ms:.4g} ms: ONNX Runtime's profiler costs a few microseconds "
            "a node, which shows on short kernels; compare layers by share, not by ms"
        )

    def summary(self) -> dict[str, Any]:
        """The whole run three ways: the layers' kernel times summed, the profiler's own
        run, and the timing protocol (no profiler attached)."""
        measured = self.measured_ms
        return {
            "layers_ms": round(self.layers_ms, 4),
            "profiled_run_ms": round(self.run_ms, 4),
            "measured_ms": round(measured, 4) if measured else None,
            "layers/measured": round(self.layers_ms / measured, 3) if measured else None,
        }


def layer_of(node_name: str) -> str:
    """The module path the exporter named a node after: its scopes, each a child of the
    one before (``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``)."""
    path: list[str] = []
    for part in [p for p in node_name.split("/") if p][:-1]:  # the last: the op's name
        if path and part.startswith(path[-1] + "."):
            path[-1] = part  # a child named with its parent's name (``layer1.0``)
        else:
            path.append(part)
    return ".".join(path) or GLUE


def _owners(graph: Any) -> dict[str, str]:
    """Every original node name and output name -> the layer that owns it."""
    producer = {out: node for node in graph.node for out in node.output}
    memo: dict[str, str] = {}

    def owner(node: Any, depth: int = 0) -> str:
        if node.name in memo:
            return memo[node.name]
        found = layer_of(node.name)
        if node.op_type in _FOLLOWERS and node.input and depth < 4:
            src = producer.get(node.input[0])
            if src is not None and (src.op_type in _COMPUTE or src.op_type in _FOLLOWERS):
                found = owner(src, depth + 1)
        memo[node.name] = found
        return found

    names: dict[str, str] = {}
    for node in graph.node:
        who = owner(node)
        names[node.name] = who
        for out in node.output:
            names[out] = who
    return names


def _macs(model: Any, owners: dict[str, str]) -> dict[str, int]:
    """MACs per layer (``owners``: node name -> layer) of Conv / Gemm / MatMul nodes
    (and their INT8 forms), from ONNX shape inference; other ops count 0."""
    from onnx import numpy_helper

    inferred = _infer_through_contrib(model)
    shapes: dict[str, list[int]] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    for init in inferred.graph.initializer:
        shapes[init.name] = list(numpy_helper.to_array(init).shape)
    macs: dict[str, int] = {}
    for node in inferred.graph.node:
        weight_index = _WEIGHT_INPUT.get(node.op_type, 1)
        if node.op_type not in _COMPUTE or len(node.input) <= weight_index:
            continue
        out = shapes.get(node.output[0])
        w = shapes.get(node.input[weight_index])
        if not out or not w:
            continue
        size = math.prod(out)
        if "Conv" in node.op_type:
            per_output = math.prod(w[1:])  # Cin/groups x kernel
        else:
            per_output = w[1] if "Gemm" in node.op_type and _trans_b(node) else w[0]
        macs[owners[node.name]] = macs.get(owners[node.name], 0) + size * per_output
    return macs


#: ONNX Runtime's contrib ops whose output has the shape of their first input: ONNX's
#: shape inference does not know them and stops there
_SAME_SHAPE = {"QLinearAdd", "QLinearMul", "QLinearLeakyRelu", "QLinearSigmoid"}
#: ... and the one that pools every spatial dimension to 1 (a ResNet's head)
_GLOBAL_POOL = "QLinearGlobalAveragePool"
_INFERRED_HERE = {*_SAME_SHAPE, _GLOBAL_POOL, "QGemm"}


def _infer_through_contrib(model: Any) -> Any:
    """ONNX shape inference, carried past the contrib ops of ``_SAME_SHAPE`` (a static
    INT8 ResNet's ``QLinearAdd`` ends it after the first residual block otherwise), its
    ``QLinearGlobalAveragePool`` and the ``QGemm`` after it."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    inits = {init.name: init for init in model.graph.initializer}
    for _ in range(len(model.graph.node)):
        graph = inferred.graph
        known = {vi.name: vi for vi in [*graph.value_info, *graph.input, *graph.output]}
        added = False
        for node in graph.node:
            source = known.get(node.input[0]) if node.input else None
            kind = node.op_type
            if kind in _INFERRED_HERE and node.output[0] not in known and source:
                info = onnx.ValueInfoProto()
                info.CopyFrom(source)
                info.name = node.output[0]
                if kind == "QGemm" and len(node.input) > 3:  # A [M, K] x B -> [M, N]
                    weight = inits.get(node.input[3])
                    if weight is None:
                        continue
                    n = weight.dims[0] if _trans_b(node) else weight.dims[1]
                    info.type.tensor_type.shape.dim[-1].Clear()
                    info.type.tensor_type.shape.dim[-1].dim_value = n
                if kind == _GLOBAL_POOL:
                    last = any(a.name == "channels_last" and a.i for a in node.attribute)
                    dims = info.type.tensor_type.shape.dim
                    for d in list(dims)[1:-1] if last else list(dims)[2:]:
                        d.Clear()
                        d.dim_value = 1
                graph.value_info.append(info)
                known[info.name] = info
                added = True
        if not added:
            break
        inferred = onnx.shape_inference.infer_shapes(inferred)
    return inferred


def _trans_b(node: Any) -> bool:
    return any(a.name == "transB" and a.i == 1 for a in node.attribute)


def read_onnx(model: Path, data: bytes | None = None) -> Any:
    """``model`` (its bytes ``data`` where read already) as an ONNX proto; a file that is
    not one, or holds no graph, is a ``TableError`` naming it."""
    import onnx

    try:
        proto = onnx.load_from_string(Path(model).read_bytes() if data is None else data)
    except Exception as err:  # protobuf's DecodeError and kin: not an ONNX file
        raise TableError(f"{model}: not an ONNX model ({type(err).__name__})") from None
    if not proto.graph.node:
        raise TableError(f"{model}: an ONNX file with no graph (empty, or not a model)")
    return proto


def profile_layers(
    model: Path, *, device: LocalDevice = CPU_1T, runs: int = 200, measure: bool = True
) -> ModelProfile:
    """``model``'s layers timed inside the whole model on ``device`` (ONNX Runtime's
    profiler at the device's threads, the median of the later half of ``runs`` runs,
    batch 1, random inputs), with MACs and kernels; ``measure`` also times the whole
    model on ``device`` by the timing protocol. ``device`` must run on ONNX Runtime's
    CPU provider (``Runtime.profiles_layers``)."""
    from ..runner import open_session, profile_nodes, session_options
    from ._local import measure_models

    data = Path(model).read_bytes()
    proto = read_onnx(model, data)
    if not device.runtime.profiles_layers:
        raise TableError(
            f"{device.name}: layers are profiled by ONNX Runtime's CPU profiler, "
            "which this device does not run on"
        )
    threads = device.threads
    owners = _owners(proto.graph)
    _, feeds = open_session(data, session_options(threads))  # the runner's seeded inputs
    nodes = profile_nodes(data, feeds, threads, "CPUExecutionProvider", runs=runs)
    ranked = sorted(owners, key=len, reverse=True)
    layers: dict[str, LayerTime] = {}
    for name, (kind, us) in nodes.items():
        if name == "model_run":
            continue
        # ONNX Runtime calls a Gemm+activation "fused NAME"; NCHWc convs after outputs
        plain = name.removeprefix("fused ")
        layer = next((owners[o] for o in ranked if plain.startswith(o)), GLUE)
        if kind in ("ReorderInput", "ReorderOutput"):
            layer = GLUE
        entry = layers.setdefault(layer, LayerTime(layer))
        entry.ms += float(us) / 1000.0
        if kind not in entry.kernels:
            entry.kernels.append(kind)
    for layer, count in _macs(proto, owners).items():
        layers.setdefault(layer, LayerTime(layer)).macs += count
    run_ms = float(nodes.get("model_run", ["", 0.0])[1]) / 1000.0
    measured = measure_models([data], device=device)[0] if measure else None
    return ModelProfile(list(layers.values()), run_ms, measured)


def layer_prices(op_nodes: Sequence[Sequence[str]], prices_ms: Sequence[float]) -> dict[str, float]:
    """A device table's op prices summed per layer: each op (its ONNX nodes, as
    ``plan_op_nodes`` lists them) belongs to the layer of its first node."""
    out: dict[str, float] = {}
    for nodes, ms in zip(op_nodes, prices_ms, strict=True):
        layer = layer_of(nodes[0]) if nodes else GLUE
        out[layer] = out.get(layer, 0.0) + ms
    return out


def _significant(ms: float, digits: int = 4) -> float:
    """``ms`` to ``digits`` significant figures: an op of a few nanoseconds keeps its price."""
    return float(f"{ms:.{digits}g}")


def compare_layers(
    model: ModelProfile,
    baseline: ModelProfile | None,
    *,
    prices: dict[str, float] | None = None,
    base_prices: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """One row per layer (the model's, then the baseline's that the model dropped):
    its time, share, MACs and precision, beside the baseline's; ``note`` flags a layer
    whose MACs fell by a fifth or more while its time did not fall by a tenth.
    ``prices``/``base_prices`` (``layer_prices``) add each layer's table price
    (``table_ms``, ``base_table_ms``): what the device table says its ops cost alone."""
    base = baseline.by_name() if baseline else {}
    ours = model.by_name()
    total = model.layers_ms or 1.0
    rows = []
    for layer in [*model.layers, *(b for n, b in base.items() if n not in ours)]:
        mine = ours.get(layer.layer)
        theirs = base.get(layer.layer)
        row: dict[str, Any] = {
            "layer": layer.layer,
            "ms": round(mine.ms, 5) if mine else 0.0,
            "share": round((mine.ms if mine else 0.0) / total, 4),
            "macs": mine.macs if mine else 0,
            "precision": mine.precision if mine else "-",
            "kernels": ",".join(mine.kernels) if mine else "(dropped)",
        }
        if prices is not None:
            row["table_ms"] = _significant(prices.get(layer.layer, 0.0))
        if baseline is not None:
            if base_prices is not None:
                row["base_table_ms"] = _significant(base_prices.get(layer.layer, 0.0))
            row["base_ms"] = round(theirs.ms, 5) if theirs else 0.0
            row["base_macs"] = theirs.macs if theirs else 0
            row["base_precision"] = theirs.precision if theirs else "-"
            note = ""
            fell = bool(theirs and mine and theirs.macs and mine.macs <= 0.8 * theirs.macs)
            if fell and mine and theirs and mine.ms >= 0.9 * theirs.ms:
                note = "MACs fell, time did not"
            row["note"] = note
        rows.append(row)
    return rows


def plot_layers(rows: Sequence[dict[str, Any]], out: Path, title: str) -> Path:
    """Per-layer times as horizontal bars (the baseline's beside, where given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["layer"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(rows) + 1)))
    ys = range(len(rows))
    if rows and "base_ms" in rows[0]:
        ax.barh([y + 0.2 for y in ys], [r["base_ms"] for r in rows], 0.4, label="baseline")
        ax.barh([y - 0.2 for y in ys], [r["ms"] for r in rows], 0.4, label="model")
        ax.legend()
    else:
        ax.barh(list(ys), [r["ms"] for r in rows])
    ax.set_yticks(list(ys), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("kernel time inside the model (ms, ONNX Runtime profiler)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
