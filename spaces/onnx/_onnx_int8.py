"""ONNX Runtime's INT8 as Frontier uses it: which nodes of an exported graph run INT8
(``fp32_nodes``), static quantization with the settings measured op models and exported
whole models share (``quantize_onnx_int8``), and the module each node came from
(``onnx_module_name``), which export, pruning and the latency models read."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._onnx_files import data_file, load_onnx, open_onnx, save_onnx

#: Node types whose weights ``onnxruntime.quantization`` quantizes per channel.
WEIGHTED_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}


@functools.lru_cache(maxsize=65536)
def onnx_module_name(node_name: str) -> str:
    """The module a TorchScript-exported node came from: '/layer1/layer1.0/conv1/Conv' ->
    'layer1.0.conv1' (a scope segment repeats its parent's name for container children)."""
    parts = node_name.strip("/").split("/")[:-1]
    names: list[str] = []
    previous = ""
    for seg in parts:
        if previous and seg.startswith(previous + "."):
            names.append(seg[len(previous) + 1 :])
        else:
            names.append(seg)
        previous = seg
    return ".".join(names)


@functools.cache
def int8_op_types() -> frozenset[str]:
    """The op types ONNX Runtime's static quantizer can run as INT8 (QOperator format):
    QLinear kernels (Add, GlobalAveragePool, Concat, ...) and ops that pass 8-bit tensors
    through (MaxPool, Flatten, Reshape, ...)."""
    from onnxruntime.quantization.registry import QLinearOpsRegistry

    return frozenset(QLinearOpsRegistry)


def fp32_nodes(proto: Any, int8_layers: set[str]) -> list[str]:
    """The nodes of an FP32 graph to keep in FP32 when ``int8_layers`` go INT8: weighted
    nodes of other layers, and every other node unless all its tensor inputs come from
    INT8 nodes and ONNX Runtime can run its type in INT8 (``int8_op_types``). A residual
    Add, a pooling or a reshape between FP32 layers then stays FP32 (fused into the
    convolution before it) instead of being wrapped in Quantize and Dequantize nodes of
    its own; one inside or right after an INT8 region runs INT8. ``plan_ops`` of the
    latency models follows the same rule to price each op at the precision it runs."""
    constants = {i.name for i in proto.graph.initializer}
    int8_tensors: set[str] = set()
    exclude = []
    for node in proto.graph.node:  # ONNX graphs are topologically sorted
        if node.op_type == "Constant":
            constants.update(node.output)
            continue
        if node.op_type in WEIGHTED_OPS:
            int8 = onnx_module_name(node.name) in int8_layers
        else:
            data = [i for i in node.input if i and i not in constants]
            int8 = (
                node.op_type in int8_op_types()
                and bool(data)
                and all(i in int8_tensors for i in data)
            )
        if int8:
            int8_tensors.update(node.output)
        else:
            exclude.append(node.name)
    return exclude


@functools.cache
def saturating_int8_cpu() -> bool:
    """Whether this is an x86 CPU without VNNI, whose INT8 kernels (AVX2 ``vpmaddubsw``)
    add pairs of u8 x s8 products in saturating 16 bits. ONNX Runtime then needs 7-bit
    weights (``reduce_range``) to compute what the model says: with full 8-bit weights
    a digits CNN's INT8 export agreed with its simulation on 89% of test images on an
    AVX2-only AMD EPYC, against 98% or more where VNNI runs it."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "vnni" not in flags


def quantize_onnx_int8(
    src: str | Path,
    dst: str | Path,
    feeds: Iterable[dict[str, np.ndarray]],
    *,
    exclude: Sequence[str] = (),
    qdq: bool = False,
) -> None:
    """Static INT8 quantization as Frontier exports it: QOperator format, per-channel
    symmetric INT8 weights, UINT8 activations calibrated on ``feeds`` (input name ->
    array). The one place these settings live, so measured op models and exported whole
    models are quantized alike. With ``qdq``, the same quantization in QDQ format
    (QuantizeLinear/DequantizeLinear pairs around FP32 operators), which OpenVINO reads
    and fuses into its INT8 kernels; ONNX Runtime's QOperator ops it does not read.

    Args:
        src: the FP32 ONNX file.
        dst: where to write the INT8 file.
        feeds: calibration batches.
        exclude: node names to keep in FP32.
        qdq: write QDQ format (OpenVINO's) instead of QOperator (ONNX Runtime's).
    """
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader

    iterator = iter(feeds)

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(iterator, None)

    # its calibration sessions log graph clean-ups ([W:onnxruntime]) and, for a graph that
    # cannot run, the failing node ([E:onnxruntime]) straight to the terminal; the error
    # reaches the caller as the exception, so nothing is lost
    onnxruntime.set_default_logger_severity(4)
    try:
        _quantize_static(src, dst, Reader(), exclude, qdq)
    finally:
        onnxruntime.set_default_logger_severity(2)  # ONNX Runtime's default: warnings
    quantized, stale = open_onnx(dst)
    # the FP32 model for its shapes only: its weights may be too large for one message
    fp32 = load_onnx(src, weights=False)
    save_onnx(keep_fp32_layers_fp32(quantized, fp32), dst, replaces=stale)


def _quantize_static(src: Any, dst: Any, reader: Any, exclude: Sequence[str], qdq: bool) -> None:
    """ONNX Runtime's static quantization with Frontier's settings (``quantize_onnx_int8``)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(
        str(src),
        str(dst),
        reader,
        quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
        per_channel=True,
        reduce_range=saturating_int8_cpu(),
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QUInt8,
        nodes_to_exclude=list(exclude),
        # a model too large for one message keeps its weights beside it as it is
        # quantized (its calibration copy is as large)
        use_external_data_format=data_file(src).exists(),
    )


def keep_fp32_layers_fp32(quantized: Any, fp32: Any) -> Any:
    """Stop ONNX Runtime from running the FP32 layers of a mixed-precision model as INT8.

    ONNX Runtime's WeightBiasQuantization optimizer quantizes (per tensor) the weights of
    any Conv or Gemm whose input comes from a per-tensor DequantizeLinear and whose
    output goes, through at most Relu or Clip, to a QuantizeLinear: an FP32 layer
    between two INT8 layers then runs as INT8, unlike what the plan (and its
    accuracy) said. Giving each activation DequantizeLinear a per-channel scale and
    zero point (the same value repeated; axis 1) computes the same and does not match.
    Channel counts come from shape inference on ``fp32`` (the model before
    quantization, whose tensor names the DequantizeLinear outputs keep).
    """
    import onnx
    from onnx import helper, numpy_helper

    inferred = onnx.shape_inference.infer_shapes(fp32)
    channels = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output]:
        dims = v.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[1].HasField("dim_value"):
            channels[v.name] = dims[1].dim_value
    inits = {i.name: i for i in quantized.graph.initializer}
    for node in quantized.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] in inits:
            continue  # weights are dequantized per channel already
        c = channels.get(node.output[0])
        scale = inits.get(node.input[1])
        zero = inits.get(node.input[2]) if len(node.input) > 2 else None
        if c is None or scale is None or zero is None or len(scale.dims):
            continue
        names = (f"{node.output[0]}_channel_scale", f"{node.output[0]}_channel_zero_point")
        for name, init in zip(names, (scale, zero), strict=True):
            value = numpy_helper.to_array(init)
            quantized.graph.initializer.append(
                numpy_helper.from_array(np.full(c, value, value.dtype), name)
            )
        del node.input[1:]
        node.input.extend(names)
        node.attribute.append(helper.make_attribute("axis", 1))
    return quantized
