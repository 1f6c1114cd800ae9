"""ONNX export: FP32 for any plan, real INT8 through ONNX Runtime where the plan allows,
real FP16 for its 16-bit layers where asked (a GPU's export)."""

from __future__ import annotations

import copy
import json
import logging
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .._forward import SpaceError, eval_mode
from .._plan import CompressionPlan
from .._quant import strip
from ._onnx_files import open_onnx, save_onnx
from ._onnx_int8 import WEIGHTED_OPS, fp32_nodes, onnx_module_name, quantize_onnx_int8

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportResult:
    """What ``export_onnx`` wrote.

    Attributes:
        path: the ONNX file.
        precision: "fp32", "int8" (INT8 for the layers in ``int8_layers``) or "fp16"
            (FP16 for the layers in ``fp16_layers``).
        int8_layers: layers stored and run as INT8.
        fp32_layers: quantizable layers kept in FP32 in the file.
        simulated_bits: layer -> [weight bits, activation bits] the plan simulates but the
            file does not run (also written to the ONNX metadata).
        note: a sentence saying what was exported and why.
    """

    path: Path
    precision: str
    int8_layers: tuple[str, ...]
    fp32_layers: tuple[str, ...]
    simulated_bits: dict[str, list[int]]
    note: str
    #: layers stored and run as FP16 (``export_onnx(half=True)``)
    fp16_layers: tuple[str, ...] = ()


def _as_args(example_inputs: Any) -> tuple[Any, ...]:
    return tuple(example_inputs) if isinstance(example_inputs, tuple | list) else (example_inputs,)


def _plan_bits(plan: CompressionPlan) -> dict[str, list[int]]:
    return {
        n: [plan.weight_bits.get(n, 32), plan.act_bits.get(n, 32)]
        for n in sorted(set(plan.weight_bits) | set(plan.act_bits))
    }


def int8_layers(plan: CompressionPlan) -> list[str]:
    """The layers ``export_onnx`` runs as INT8 for ``plan``: those at 8-bit weights and
    inputs, unless some layer is below 8 bits (then the whole export is FP32)."""
    bits = _plan_bits(plan)
    if any(min(b) < 8 for b in bits.values()):
        return []
    return sorted(n for n, (w, a) in bits.items() if w == 8 and a == 8)


def half_layers(plan: CompressionPlan) -> list[str]:
    """The layers ``export_onnx(half=True)`` runs in half precision: 16-bit weights,
    inputs at 16 bits or more."""
    return sorted(n for n, (w, a) in _plan_bits(plan).items() if w == 16 and a >= 16)


def _export_fp32(
    model: nn.Module, args: tuple[Any, ...], path: Path, input_names: list[str], opset: int
) -> None:
    """``model`` with its simulation stripped, exported by PyTorch as FP32 to ``path``,
    its batch dimension dynamic. A model PyTorch cannot export is a ``SpaceError``
    naming what the exporter refused: nothing of it can be timed or deployed."""
    fp32 = strip(copy.deepcopy(model)).eval()
    axes = {name: {0: "batch"} for name in [*input_names, "output"]}
    with (
        warnings.catch_warnings(),
        torch.no_grad(),
        eval_mode(fp32),
        _mha_as_ops(),
        _pools_as_matmuls(),
        _exportable(args),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            fp32,
            args,
            str(path),
            dynamo=False,  # the TorchScript exporter keeps module scopes in node names
            opset_version=opset,
            input_names=input_names,
            output_names=["output"],
            dynamic_axes=axes,
        )


@contextmanager
def _mha_as_ops() -> Iterator[None]:
    """``nn.MultiheadAttention`` traced as its matmuls and softmax: in eval mode under
    ``no_grad`` PyTorch runs it as one fused ``_native_multi_head_attention`` kernel,
    which ONNX has no form for (every torchvision ViT failed to export)."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def _averaging(out_size: int, in_size: int, like: torch.Tensor) -> torch.Tensor:
    """The ``out_size`` x ``in_size`` matrix whose rows average the windows adaptive
    average pooling takes along one axis: row i over ``floor(i * in / out)`` to
    ``ceil((i + 1) * in / out)``, as PyTorch's kernel does."""
    rows = torch.zeros(out_size, in_size, dtype=like.dtype, device=like.device)
    for i in range(out_size):
        start, end = (i * in_size) // out_size, -(-((i + 1) * in_size) // out_size)
        rows[i, start:end] = 1.0 / (end - start)
    return rows


@contextmanager
def _pools_as_matmuls() -> Iterator[None]:
    """Adaptive average pooling whose output size does not divide its input's (VGG's
    7x7 and AlexNet's 6x6 pools at a 96x96 input) traced as two matmuls with averaging
    matrices: the same values, which ONNX's fixed-window pooling cannot express and
    PyTorch's exporter refuses. Pools that divide export as before."""
    original = torch.nn.functional.adaptive_avg_pool2d

    def pool(
        input: torch.Tensor, output_size: int | tuple[int | None, int | None] | None
    ) -> torch.Tensor:
        in_h, in_w = int(input.shape[-2]), int(input.shape[-1])
        sizes: Any = output_size if isinstance(output_size, tuple | list) else [output_size] * 2
        out_h, out_w = (
            n if s is None else int(s) for s, n in zip(sizes, (in_h, in_w), strict=True)
        )
        if in_h % out_h == 0 and in_w % out_w == 0:
            return original(input, output_size)
        rows, cols = _averaging(out_h, in_h, input), _averaging(out_w, in_w, input)
        return torch.matmul(torch.matmul(rows, input), cols.t())

    torch.nn.functional.adaptive_avg_pool2d = pool
    try:
        yield
    finally:
        torch.nn.functional.adaptive_avg_pool2d = original


@contextmanager
def _exportable(args: tuple[Any, ...]) -> Iterator[None]:
    """PyTorch's refusal to export (an operator ONNX has no form for at these shapes)
    as a ``SpaceError`` in one line."""
    try:
        yield
    except torch.onnx.errors.OnnxExporterError as err:
        # its first sentence: the rest asks for a PyTorch issue and dumps a graph value
        said = str(err).strip().split(". Please")[0].split(" [Caused by")[0].splitlines()
        what = said[0] if said else type(err).__name__
        shapes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
        raise SpaceError(
            f"the model cannot be exported to ONNX, which Frontier times and deploys it "
            f"as (example inputs {shapes}): PyTorch says: {what}. "
            "Change that layer, or the example inputs' size where the operator depends "
            "on it"
        ) from err


def export_onnx(
    model: nn.Module,
    plan: CompressionPlan,
    example_inputs: Any,
    path: str | Path,
    calibration_data: Iterable[Any] | None = None,
    *,
    opset: int = 17,
    half: bool = False,
    qdq: bool = False,
) -> ExportResult:
    """Export a compressed model to ONNX.

    Every plan exports as FP32 (the simulation stripped; weights keep the quantized
    values the simulated model computed with, so the file scores what it scored).
    When the plan's quantized layers are at 8 bits (weights and input activations),
    the file is a real INT8 model made by ONNX Runtime's static quantization
    (per-channel symmetric weights, activations calibrated on ``calibration_data``);
    layers kept above 8 bits are excluded from quantization. A plan with bit widths ONNX
    Runtime cannot run (below 8 bits) is exported as FP32 with a warning. The plan and
    any simulated-only bits are stored in the ONNX metadata.

    Args:
        model: the model the plan was applied to (``apply_plan`` output).
        plan: the plan.
        example_inputs: a batch the model accepts; its batch dimension is exported dynamic.
        path: where to write the ``.onnx`` file.
        calibration_data: batches (tensors or (inputs, targets) pairs) for INT8
            calibration; the example inputs when None.
        opset: the ONNX opset.
        half: run the plan's 16-bit layers (``half_layers``) in FP16 in the file: their
            weights stored as FP16 and their inputs cast to FP16 and outputs back, as a
            GPU deploys them (``to_half``); else they are FP32 with simulated bits.
        qdq: write INT8 layers in QDQ format (QuantizeLinear/DequantizeLinear around FP32
            operators), as OpenVINO reads them, instead of ONNX Runtime's QOperator
            format (``QLinearConv``...); the same quantization either way.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    args = _as_args(example_inputs)
    input_names = [f"input{i}" if len(args) > 1 else "input" for i in range(len(args))]
    quantized = _plan_bits(plan)
    # a layer the plan gave bits to may be gone (a dropped encoder layer)
    present = {name for name, _ in model.named_modules()}
    int8 = [n for n in int8_layers(plan) if n in present]
    too_low = {n: b for n, b in quantized.items() if min(b) < 8}
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path = Path(tmp) / "fp32.onnx" if int8 and not too_low else path
        _export_fp32(model, args, fp32_path, input_names, opset)
        if too_low:
            sample = ", ".join(f"{n} {b[0]}/{b[1]}" for n, b in list(too_low.items())[:3])
            note = (
                f"ONNX Runtime cannot run bit widths below 8 ({sample}); exported FP32 with "
                "the simulated bits recorded in the metadata"
            )
            warnings.warn(note, stacklevel=2)
            int8 = []
        elif int8:
            _quantize_int8(fp32_path, path, int8, input_names, args, calibration_data, qdq)
            form = "QDQ" if qdq else "static"
            note = f"INT8 ({form}, per-channel weights) for {len(int8)} layer(s)"
        else:
            note = "FP32: the plan quantizes no layer at 8 bits"
    return _finish(path, plan, quantized, int8, too_low=bool(too_low), half=half, note=note)


def to_half(proto: Any, layers: set[str] | None = None) -> Any:
    """``proto`` with the weighted nodes (Conv, Gemm, MatMul) of ``layers`` (every one
    where None: an op model) in FP16:
    their float initializers stored as FP16, each data input cast to FP16 before the
    node and its output cast back to FP32 after it, so the rest of the graph (and its
    inputs and outputs) stays FP32. Casts between two FP16 layers cost a kernel each;
    ONNX Runtime's and TensorRT's optimizers fold such pairs.

    A weight or bias that reaches its node through an ``Identity`` of an initializer
    (the TorchScript exporter shares equal constants that way) is read as that
    initializer: stored as FP16, not cast at run time. Every Cast gets a name of its
    own (a model with two nodes of one name does not load)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    alias = {
        n.output[0]: n.input[0]
        for n in graph.node
        if n.op_type == "Identity" and n.input and n.input[0] in inits
    }
    converted: dict[str, str] = {}  # an FP32 initializer -> its FP16 copy
    nodes = []
    for node in graph.node:
        chosen = layers is None or onnx_module_name(node.name) in layers
        if node.op_type not in WEIGHTED_OPS or not chosen:
            nodes.append(node)
            continue
        for i, name in enumerate(node.input):
            if not name:
                continue
            name = alias.get(name, name)
            if name in inits:
                node.input[i] = name
                if inits[name].data_type != TensorProto.FLOAT:
                    continue
                if name not in converted:
                    half = numpy_helper.to_array(inits[name]).astype(np.float16)
                    converted[name] = f"{name}__fp16"
                    graph.initializer.append(numpy_helper.from_array(half, converted[name]))
                node.input[i] = converted[name]
            else:
                cast = f"{name}__to_fp16__{node.name}"
                suffix = "" if i == 0 else str(i)
                nodes.append(
                    helper.make_node(
                        "Cast",
                        [name],
                        [cast],
                        to=TensorProto.FLOAT16,
                        name=f"{node.name}/ToHalf{suffix}",
                    )
                )
                node.input[i] = cast
        out = node.output[0]
        node.output[0] = f"{out}__fp16"
        nodes.append(node)
        nodes.append(
            helper.make_node(
                "Cast", [node.output[0]], [out], to=TensorProto.FLOAT, name=f"{node.name}/ToFloat"
            )
        )
    outputs = {o.name for o in graph.output}
    used = {i for n in nodes for i in n.input} | outputs
    # an Identity whose every reader now reads its initializer directly is gone
    nodes = [
        n for n in nodes if not (n.output and n.output[0] in alias and n.output[0] not in used)
    ]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input} | outputs
    keep = [i for i in graph.initializer if i.name in used or i.name not in converted]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    del graph.value_info[:]  # the cast tensors change types: inferred again by runtimes
    return proto


def _inline_identity_initializers(proto: Any) -> Any:
    """Point consumers of ``Identity(initializer)`` at the initializer itself.

    The TorchScript exporter shares equal constants (the BN-folded biases of freshly
    initialised layers, say) through Identity nodes; ONNX Runtime's quantizer looks a
    bias up among the initializers by name and fails on such an alias.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in proto.graph.initializer}
    alias = {
        n.output[0]: n.input[0]
        for n in proto.graph.node
        if n.op_type == "Identity" and n.input[0] in inits
    }
    if not alias:
        return proto
    for node in proto.graph.node:
        for i, name in enumerate(node.input):
            if name in alias:
                # each consumer gets its own copy, as quantization rewrites initializers
                copy_name = f"{name}__{node.name or i}"
                array = numpy_helper.to_array(inits[alias[name]])
                proto.graph.initializer.append(numpy_helper.from_array(array, copy_name))
                node.input[i] = copy_name
    keep = [n for n in proto.graph.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    del proto.graph.node[:]
    proto.graph.node.extend(keep)
    return proto


def _quantize_int8(
    fp32_path: Path,
    out_path: Path,
    int8_layers: list[str],
    input_names: list[str],
    example_args: tuple[Any, ...],
    calibration_data: Iterable[Any] | None,
    qdq: bool = False,
) -> None:
    proto, stale = open_onnx(fp32_path)
    proto = _inline_identity_initializers(proto)
    save_onnx(proto, fp32_path, replaces=stale)
    wanted = set(int8_layers)
    exclude = fp32_nodes(proto, wanted)
    missing = wanted - {onnx_module_name(n.name) for n in proto.graph.node}
    if missing:
        raise RuntimeError(f"layers not found in the exported graph: {sorted(missing)}")

    def batches() -> Iterator[dict[str, np.ndarray]]:
        source = calibration_data if calibration_data is not None else [example_args]
        for batch in source:
            if isinstance(batch, torch.Tensor):
                tensors: tuple[Any, ...] = (batch,)
            elif calibration_data is not None and isinstance(batch, tuple | list):
                tensors = _as_args(batch[0])  # (inputs, targets) pairs
            else:
                tensors = _as_args(batch)
            yield {
                name: _feed(t, e)
                for name, t, e in zip(input_names, tensors, example_args, strict=True)
            }

    quantize_onnx_int8(fp32_path, out_path, batches(), exclude=exclude, qdq=qdq)


def _feed(t: torch.Tensor, example: Any) -> np.ndarray:
    """An ONNX Runtime input: floats as float32; integers (token ids) as they are,
    padded with id 0 to the exported length when a batch was cut shorter."""
    a = t.detach().cpu().numpy()
    if a.dtype.kind == "f":
        return a.astype(np.float32)
    if isinstance(example, torch.Tensor) and a.ndim == 2 and a.shape[1] < example.shape[1]:
        a = np.pad(a, ((0, 0), (0, example.shape[1] - a.shape[1])))
    return a


def _finish(
    path: Path,
    plan: CompressionPlan,
    quantized: dict[str, list[int]],
    int8: list[str],
    *,
    too_low: bool,
    half: bool,
    note: str,
) -> ExportResult:
    """The exported file at ``path`` with its 16-bit layers in FP16 where ``half`` and
    the plan's precision recorded in its metadata (``quantized``: the plan's bits per
    layer; ``too_low``: some are below 8, so the file is FP32); what it holds."""
    proto, stale = open_onnx(path)
    layer_names = sorted(
        {onnx_module_name(n.name) for n in proto.graph.node if n.op_type in WEIGHTED_OPS}
    )
    fp16 = [n for n in half_layers(plan) if n in layer_names] if half and not too_low else []
    if fp16:
        proto = to_half(proto, set(fp16))
        note += f"; FP16 for {len(fp16)} layer(s)"
    simulated = {
        n: b for n, b in quantized.items() if n not in int8 and n not in fp16 and min(b) < 32
    }
    if simulated and not too_low:
        note += f"; {len(simulated)} layer(s) keep simulated bits only (not 8/8), stored in FP32"
    precision = "int8" if int8 else "fp16" if fp16 else "fp32"
    meta = {
        "frontier.plan": plan.to_json(),
        "frontier.precision": precision,
        "frontier.fp16_layers": json.dumps(fp16),
        "frontier.simulated_bits": json.dumps(simulated, sort_keys=True),
    }
    for key, value in meta.items():
        proto.metadata_props.add(key=key, value=value)
    save_onnx(proto, path, replaces=stale)
    return ExportResult(
        path=path,
        precision=precision,
        int8_layers=tuple(int8),
        fp32_layers=tuple(n for n in layer_names if n not in int8 and n not in fp16),
        simulated_bits=simulated,
        note=note,
        fp16_layers=tuple(fp16),
    )
