"""The one-op ONNX models a bundle holds: each op as it runs inside a whole model (FP32,
FP16, or INT8 cut to the kernel on 8-bit tensors), its large weights left out for the
runner to draw from a seed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from frontier.spaces import quantize_onnx_int8, to_half

from ._ops import DEQUANTIZE, INT8_FP32_ADD, QUANTIZE, OpSpec, build_onnx

#: Inputs that hold a layer's weights, by op type: a bundle stores these initializers
#: as seeded external data (``strip_weights``) instead of their values.
WEIGHT_INPUTS = {
    "Conv": (1,),
    "ConvTranspose": (1,),
    "Gemm": (0, 1),
    "MatMul": (0, 1),
    "QLinearConv": (3,),
    "QLinearMatMul": (0, 3),
    "QGemm": (3,),
    "ConvInteger": (1,),
    "MatMulInteger": (0, 1),
    "DequantizeLinear": (0,),
    "Gather": (0,),  # an embedding table (a shape's Gather reads no initializer)
}
#: Initializers smaller than this many elements stay in the model (cheap, and exact).
STRIP_MIN_ELEMENTS = 256
#: Where a stripped initializer's data is said to be: nowhere, the runner draws it.
SEEDED = "frontier-seeded-weights"
#: onnx.TensorProto data types stripped, as ``runner.seeded_weights`` draws them
_STRIPPED_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 10: "float16"}


def strip_weights(model_bytes: bytes) -> tuple[bytes, list[list[Any]]]:
    """``model_bytes`` without the values of its large weight initializers, and their
    layout (``[name, dtype, dims]`` each) for the runner to draw them from a seed.

    A dense kernel's latency depends on the shapes and types of its weights, not on
    their values, and a bundle of random-weight models does not compress (a mobilenet_v2
    bundle was 64.5 MB of ops and 12.5 MB a whole model). The initializers stay in the
    graph, marked as external data, so ONNX Runtime treats the drawn values as the
    constants they were (prepacked, folded), not as inputs."""
    import onnx

    proto = onnx.load_from_string(model_bytes)
    weight_names = {
        node.input[i]
        for node in proto.graph.node
        for i in WEIGHT_INPUTS.get(node.op_type, ())
        if i < len(node.input)
    }
    layout: list[list[Any]] = []
    for tensor in proto.graph.initializer:
        dtype = _STRIPPED_DTYPES.get(tensor.data_type)
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            # seeded already, or held by reference to a file beside a model too large
            # for one message (``spaces.save_onnx``): those are seeded too, weights or not
            strip = not any(e.value == SEEDED for e in tensor.external_data)
        else:
            strip = tensor.name in weight_names and int(np.prod(tensor.dims)) >= STRIP_MIN_ELEMENTS
        if dtype is None or not strip:
            continue
        layout.append([tensor.name, dtype, [int(d) for d in tensor.dims]])
        for data_field in ("raw_data", "float_data", "int32_data"):
            tensor.ClearField(data_field)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", SEEDED
    return bytes(proto.SerializeToString()), layout


def _int8(model_bytes: bytes, spec: OpSpec, qdq: bool = False) -> bytes:
    """The op model in INT8 as it runs inside a whole model: a weighted op quantized
    (with its residual Add in FP32 for ``INT8_FP32_ADD``), any other op on 8-bit tensors
    (``_prefixed``)."""
    rng = np.random.default_rng(0)
    feeds = [
        {
            f"x{i}": rng.standard_normal(s).astype(np.float32)
            for i, s in enumerate(spec.input_shapes)
        }
        for _ in range(2)
    ]
    weighted = spec.weighted
    if qdq and not weighted:
        return _qdq_interior(model_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model_bytes if weighted else _prefixed(model_bytes))
        quantize_onnx_int8(
            src, dst, feeds, exclude=["add"] if spec.precision == INT8_FP32_ADD else (), qdq=qdq
        )
        return dst.read_bytes() if weighted else _unprefixed(dst.read_bytes())


#: The scale and zero point of a QDQ pass-through op's 8-bit tensors (what they are does
#: not move its latency: the kernel OpenVINO fuses is the same).
_QDQ_SCALE, _QDQ_ZERO = 0.05, 128


def _qdq_interior(model_bytes: bytes) -> bytes:
    """A pass-through op (MaxPool, Add, Flatten...) as it runs inside a QDQ INT8 chain:
    each input an 8-bit tensor through DequantizeLinear, each output back through
    QuantizeLinear, which OpenVINO fuses into one 8-bit kernel. Written directly: the
    quantizer's QDQ pairs around a lone op do not survive ``_prefixed`` and ``_interior``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    proto = onnx.load_from_string(model_bytes)
    graph = proto.graph
    graph.initializer.extend([
        numpy_helper.from_array(np.array(_QDQ_SCALE, dtype=np.float32), "qdq_scale"),
        numpy_helper.from_array(np.array(_QDQ_ZERO, dtype=np.uint8), "qdq_zero"),
    ])  # fmt: skip
    front, back = [], []
    for value in graph.input:
        name = value.name
        front.append(
            helper.make_node(
                "DequantizeLinear",
                [f"{name}_q", "qdq_scale", "qdq_zero"],
                [name],
                name=f"dq_{name}",
            )
        )
        value.name = f"{name}_q"
        value.type.tensor_type.elem_type = TensorProto.UINT8
    for value in graph.output:
        name = value.name
        back.append(
            helper.make_node(
                "QuantizeLinear", [name, "qdq_scale", "qdq_zero"], [f"{name}_q"], name=f"q_{name}"
            )
        )
        value.name = f"{name}_q"
        value.type.tensor_type.elem_type = TensorProto.UINT8
    nodes = [*front, *graph.node, *back]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(proto)
    return bytes(proto.SerializeToString())


#: Name of the Add (of zero) put before each input of a pass-through op's model.
_PREFIX = "int8_source"


def _rename_inputs(graph: Any, names: dict[str, str]) -> None:
    """Feed every node the tensor ``names`` maps each of its inputs to."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in names:
                node.input[k] = names[name]


def _prefixed(model_bytes: bytes) -> bytes:
    """The op model with an Add of zero before each input. The quantizer runs an op such
    as MaxPool or Flatten in INT8 only when its input comes quantized, as it does from an
    INT8 layer in a whole model; the Add (which it always quantizes) plays that layer."""
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load_from_string(model_bytes)
    graph = proto.graph
    inputs = [i.name for i in graph.input]
    zero = numpy_helper.from_array(np.zeros(1, dtype=np.float32), f"{_PREFIX}_zero")
    graph.initializer.append(zero)
    _rename_inputs(graph, {name: f"{_PREFIX}_{name}" for name in inputs})
    adds = [
        helper.make_node("Add", [name, zero.name], [f"{_PREFIX}_{name}"], name=f"{_PREFIX}{i}")
        for i, name in enumerate(inputs)
    ]
    for i, node in enumerate(adds):
        graph.node.insert(i, node)
    return bytes(proto.SerializeToString())


def _unprefixed(model_bytes: bytes) -> bytes:
    """The quantized op model without the Adds ``_prefixed`` put in: each input goes,
    quantized, straight to the op."""
    import onnx

    proto = onnx.load_from_string(model_bytes)
    graph = proto.graph
    adds = [n for n in graph.node if n.name.startswith(_PREFIX)]
    _rename_inputs(graph, {n.output[0]: n.input[0] for n in adds})
    for node in adds:
        graph.node.remove(node)
    return bytes(proto.SerializeToString())


def op_model_bytes(spec: OpSpec, qdq: bool = False) -> bytes:
    """The serialized ONNX model that measures ``spec``: an FP32 op as it is; an INT8 op
    quantized by ONNX Runtime's quantizer (in QDQ format where ``qdq``, OpenVINO's) and
    then cut to the kernel on 8-bit tensors (``_interior``), as it runs inside an INT8
    chain; a precision boundary (``QuantizeLinear``, ``DequantizeLinear``) on its own."""
    if spec.precision == "fp16":  # as ``export_onnx(half=True)`` writes its layer
        return bytes(to_half(build_onnx(spec)).SerializeToString())
    data: bytes = build_onnx(spec).SerializeToString()
    if spec.op_type in (QUANTIZE, DEQUANTIZE):
        return data
    if not spec.precision.startswith("int8"):
        return data
    int8 = _int8(data, spec, qdq)
    return int8 if qdq and not spec.weighted else _interior(int8)


def _interior(model_bytes: bytes) -> bytes:
    """A quantized op model without the QuantizeLinear of its graph inputs and the
    DequantizeLinear of its graph outputs: the model reads and writes the 8-bit tensors
    an INT8 chain passes from kernel to kernel. Those boundary ops are priced apart,
    where a plan's graph changes precision (``_ops.boundaries``)."""
    import onnx

    proto = onnx.load_from_string(model_bytes)
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}

    def rewire(node: Any, value_info: Any, tensor: str) -> None:
        """Make the graph input or output ``value_info`` the 8-bit ``tensor`` (its type
        from the node's zero point: UINT8 unless it says otherwise), dropping ``node``."""
        zero = inits.get(node.input[2]) if len(node.input) > 2 else None
        value_info.name = tensor
        value_info.type.tensor_type.elem_type = zero.data_type if zero is not None else 2
        graph.node.remove(node)

    for node in list(graph.node):
        if node.op_type == "QuantizeLinear" and node.input[0] in inputs:
            rewire(node, inputs[node.input[0]], node.output[0])
        elif node.op_type == "DequantizeLinear" and node.output[0] in outputs:
            rewire(node, outputs[node.output[0]], node.input[0])
    return bytes(proto.SerializeToString())
