"""The device runner for a GPU: a bundle's models run as PyTorch, priced as deployed.

ONNX Runtime's GPU build is not on every GPU machine; PyTorch with CUDA usually is. This
runner reads the same bundles as ``runner.py`` and writes the same files, by the same
timing protocol (``runner.time_models``: warm-up, interleaved rounds, the median of
round medians). It runs each ONNX model as PyTorch on the GPU (``TorchGraph``), and by
default (``GraphBackend``) captures it once in a CUDA graph and times each replay with
a pair of CUDA events (``CudaEventTimer``), the way TensorRT, ``torch.compile`` and ONNX
Runtime's CUDA graphs deploy a model: eager PyTorch at batch 1 is bound by kernel
launches and says no compression pays. Each whole model's row also records the eager
time (``eager_ms``, the launch floor), a replay's host time (``host_ms``) and its energy
from the GPU's counter (``energy_mj``, NVML). ``--execution eager`` (``TorchBackend``)
prices eager runs instead. cuDNN and TF32 settings are PyTorch's defaults, and are
recorded in the table's metadata.

It runs the FP32 and FP16 ONNX operators Frontier's bundles and exports use
(convolutions, GEMMs, pooling, activations, elementwise, shape ops and casts). PyTorch
has no CUDA kernel for ONNX's INT8 operators (QLinearConv, QGemm, QuantizeLinear, ...):
those models are recorded as ``unsupported``, the way ``runner.py`` records an op its
provider cannot run, so measure a GPU with a bundle of a space without INT8.

Needs torch, onnx and numpy (and nvidia-ml-py for energy), and ``runner.py`` beside
this file::

    python runner_torch.py ops.zip --device h200 --out h200.csv

(``--torch-device cpu`` runs it on the CPU with the wall clock: for tests.)

Over 500 lines on purpose, as ``runner.py``: it is copied to a GPU machine with
``runner.py`` alone, so its ONNX operators, its backends and its energy counter cannot
live in other modules.

Over 500 lines: like ``runner.py``, it is one file a user copies to a GPU machine that
has PyTorch and numpy, and nothing of Frontier.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:  # inside the package
    from . import runner
except ImportError:  # copied to a device beside runner.py and run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import runner  # type: ignore[no-redef]

#: ONNX integer element types, kept on the host: they are shapes and axes, not data.
_INT_TYPES = {6, 7}  # int32, int64
#: ONNX element types of the graph inputs this runner feeds (numpy's names): float
#: tensors and token ids. An INT8 op model's 8-bit inputs are not among them.
_INPUT_TYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32"}


def _is_int8(op_type: str) -> bool:
    """ONNX's and ONNX Runtime's 8-bit operators (QLinearConv, QGemm, QuantizeLinear,
    DequantizeLinear, ConvInteger, MatMulInteger, ...)."""
    return op_type.startswith("Q") or "quantize" in op_type.lower() or op_type.endswith("Integer")


class Unsupported(Exception):
    """A model holds an operator this runner has no PyTorch kernel for."""


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads(pads: list[int], spatial: int) -> tuple[list[int], bool]:
    """ONNX pads (begins then ends) as F.pad's (last dim first), and whether they are
    symmetric (then the convolution or pooling pads itself)."""
    if not pads:
        return [0] * (2 * spatial), True
    begins, ends = pads[:spatial], pads[spatial:]
    out: list[int] = []
    for b, e in zip(reversed(begins), reversed(ends), strict=True):
        out += [b, e]
    return out, begins == ends


def _conv(x: Any, w: Any, b: Any = None, **a: Any) -> Any:
    import torch.nn.functional as F

    spatial = w.dim() - 2
    pads, symmetric = _pads(list(a.get("pads", [])), spatial)
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise Unsupported(f"Conv with auto_pad={a['auto_pad']!r}")
    padding: Any = pads[::2][::-1] if symmetric else 0
    if not symmetric:
        x = F.pad(x, pads)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    return conv(
        x,
        w,
        b,
        stride=a.get("strides", 1),
        padding=padding,
        dilation=a.get("dilations", 1),
        groups=a.get("group", 1),
    )


def _pool(kind: str) -> Callable[..., Any]:
    def pool(x: Any, **a: Any) -> Any:
        import torch.nn.functional as F

        kernel = list(a["kernel_shape"])
        spatial = len(kernel)
        pads, symmetric = _pads(list(a.get("pads", [])), spatial)
        padding: Any = pads[::2][::-1] if symmetric else 0
        if not symmetric:
            x = F.pad(x, pads, value=float("-inf") if kind == "max" else 0.0)
        stride = a.get("strides", kernel)
        ceil = bool(a.get("ceil_mode", 0))
        if kind == "max":
            maxf: Any = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[spatial]
            return maxf(x, kernel, stride, padding, a.get("dilations", 1), ceil)
        avgf: Any = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[spatial]
        return avgf(x, kernel, stride, padding, ceil, bool(a.get("count_include_pad", 0)))

    return pool


def _gemm(a_: Any, b_: Any, c: Any = None, **a: Any) -> Any:
    import torch.nn.functional as F

    if a.get("transA", 0):
        a_ = a_.t()
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    if a.get("transB", 0) and alpha == 1.0 and beta == 1.0:
        return F.linear(a_, b_, c)  # one cuBLAS call with the bias, as in nn.Linear
    y = alpha * (a_ @ (b_.t() if a.get("transB", 0) else b_))
    return y if c is None else y + beta * c


def _clip(x: Any, lo: Any = None, hi: Any = None, **a: Any) -> Any:
    lo = lo if lo is not None else a.get("min")
    hi = hi if hi is not None else a.get("max")
    return x.clamp(min=None if lo is None else float(lo), max=None if hi is None else float(hi))


def _axes(a: dict[str, Any], axes: Any) -> list[int] | None:
    if axes is not None:  # a tensor input, or a list where shape ops ran on the host
        return [int(v) for v in (axes.tolist() if hasattr(axes, "tolist") else axes)]
    return list(a["axes"]) if "axes" in a else None


def _reduce_mean(x: Any, axes: Any = None, **a: Any) -> Any:
    dims = _axes(a, axes)
    keep = bool(a.get("keepdims", 1))
    return x.mean(dim=dims, keepdim=keep) if dims else x.mean()


def _reshape(x: Any, shape: Any, **a: Any) -> Any:
    dims = [int(v) for v in shape.tolist()]
    if not a.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def _flatten(x: Any, **a: Any) -> Any:
    axis = int(a.get("axis", 1)) % max(x.dim(), 1)
    return x.reshape(int(x.shape[:axis].numel()), -1)


def _squeeze(x: Any, axes: Any = None, **a: Any) -> Any:
    dims = _axes(a, axes)
    return x.squeeze() if dims is None else x.squeeze(dims)


def _unsqueeze(x: Any, axes: Any = None, **a: Any) -> Any:
    for d in sorted(_axes(a, axes) or []):
        x = x.unsqueeze(d)
    return x


def _reduce_sum(x: Any, axes: Any = None, **a: Any) -> Any:
    dims = _axes(a, axes)
    keep = bool(a.get("keepdims", 1))
    if not dims:
        return x if a.get("noop_with_empty_axes", 0) else x.sum()
    return x.sum(dim=dims, keepdim=keep)


def _gather(data: Any, indices: Any, axis: int = 0) -> Any:
    """ONNX Gather: an embedding lookup on the device, or a dimension of a shape on the
    host; negative indices count from the end, a scalar index drops the axis."""
    import torch

    axis %= data.dim()
    idx = indices.to(data.device).long()
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    picked = torch.index_select(data, axis, idx.reshape(-1))
    shape = [*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :]]
    return picked.reshape(shape)


def _shape(x: Any, start: int = 0, end: int | None = None) -> Any:
    """A tensor's shape as an int64 tensor on the host (never on the GPU: the shape
    arithmetic after it is folded before capture, ``TorchGraph.fold``)."""
    import torch

    return torch.tensor(list(x.shape)[start:end], dtype=torch.int64)


def _range(start: Any, limit: Any, delta: Any) -> Any:
    import torch

    return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype,
                        device=start.device)  # fmt: skip


def _layer_norm(x: Any, scale: Any, bias: Any = None, axis: int = -1, epsilon: float = 1e-5,
                **a: Any) -> Any:  # fmt: skip
    import torch.nn.functional as F

    axis %= x.dim()
    return F.layer_norm(x, x.shape[axis:], scale, bias, float(epsilon))


def _ops() -> dict[str, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    return {
        "Conv": _conv,
        "Gemm": _gemm,
        "MatMul": lambda a_, b_: a_ @ b_,
        "Relu": lambda x: torch.relu(x),
        "Sigmoid": lambda x: torch.sigmoid(x),
        "Tanh": lambda x: torch.tanh(x),
        "LeakyRelu": lambda x, alpha=0.01: F.leaky_relu(x, alpha),
        "HardSigmoid": lambda x, alpha=0.2, beta=0.5: (alpha * x + beta).clamp(0.0, 1.0),
        "HardSwish": lambda x: F.hardswish(x),
        "Clip": _clip,
        "Add": lambda a_, b_: a_ + b_,
        "Sub": lambda a_, b_: a_ - b_,
        "Mul": lambda a_, b_: a_ * b_,
        "Div": lambda a_, b_: a_ / b_,
        "MaxPool": _pool("max"),
        "AveragePool": _pool("avg"),
        "GlobalAveragePool": lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
        "GlobalMaxPool": lambda x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True),
        "ReduceMean": _reduce_mean,
        "Flatten": _flatten,
        "Reshape": _reshape,
        "Squeeze": _squeeze,
        "Unsqueeze": _unsqueeze,
        "Transpose": lambda x, perm=None: x.permute(*(perm or reversed(range(x.dim())))),
        "Concat": lambda *xs, axis: torch.cat(xs, dim=axis),
        "Softmax": lambda x, axis=-1: torch.softmax(x, dim=axis),
        "Identity": lambda x: x,
        "Cast": lambda x, to: x.to(_dtype(to)),
        # a text model's: its norms, GELU, masked mean pooling, embeddings and mask
        "LayerNormalization": _layer_norm,
        "Erf": lambda x: torch.erf(x),
        "Sqrt": lambda x: torch.sqrt(x),
        "Pow": lambda a_, b_: torch.pow(a_, b_),
        "ReduceSum": _reduce_sum,
        "Gather": _gather,
        "Shape": _shape,
        "Range": _range,
        "Equal": lambda a_, b_: torch.eq(a_, b_),
        "Not": lambda x: torch.logical_not(x),
        "Where": lambda c, a_, b_: torch.where(c, a_, b_),
        "Expand": lambda x, shape: x.expand(
            torch.broadcast_shapes(x.shape, tuple(int(v) for v in shape.tolist()))
        ),
    }


def _dtype(onnx_type: int) -> Any:
    """The torch dtype of an ONNX element type (Cast's ``to``)."""
    import torch

    types = {1: torch.float32, 10: torch.float16, 16: torch.bfloat16, 11: torch.float64,
             6: torch.int32, 7: torch.int64, 9: torch.bool}  # fmt: skip
    if onnx_type not in types:
        raise Unsupported(f"Cast to ONNX element type {onnx_type}")
    return types[onnx_type]


class TorchGraph:
    """An ONNX graph run node by node as eager PyTorch on ``device``.

    Integer and scalar initializers and constants (shapes, axes, Clip's bounds) stay on
    the host, so reading them never waits for the GPU; the others, and the weights a
    bundle left out (drawn from ``weights_seed`` as ``runner.seeded_weights`` draws them
    for ONNX Runtime), go to the device. Inputs are float (FP32, FP16) or integer token
    ids (int64, int32). Raises ``Unsupported`` for an operator or input type it cannot
    run (an INT8 model's), before anything runs. ``fold`` then computes, once, what
    depends on constants and input shapes alone.
    """

    def __init__(
        self,
        data: bytes,
        device: str,
        *,
        weights: list[Any] | None = None,
        weights_seed: int = 0,
    ) -> None:
        import onnx
        import torch
        from onnx import numpy_helper

        model = onnx.load_from_string(data)
        ops = _ops()
        missing = sorted({n.op_type for n in model.graph.node} - set(ops) - {"Constant"})
        if missing:
            int8 = [op for op in missing if _is_int8(op)]
            raise Unsupported(
                f"no PyTorch kernel in this runner for ONNX {', '.join(missing)}"
                + (" (INT8: eager PyTorch has no CUDA kernel for it)" if int8 else "")
            )
        self.device = device
        values: dict[str, Any] = {}
        for name, array in runner.seeded_weights(weights or [], weights_seed).items():
            if array.dtype.kind != "f":
                raise Unsupported(f"{name}: {array.dtype} weights (an INT8 model)")
            values[name] = torch.from_numpy(array).to(device)
        for init in model.graph.initializer:
            if init.name in values:  # a weight the bundle left out, drawn above
                continue
            array = numpy_helper.to_array(init)
            on = "cpu" if init.data_type in _INT_TYPES or array.ndim == 0 else device
            values[init.name] = torch.from_numpy(array.copy()).to(on)
        self.constants = values
        self.op_types: dict[str, str] = {}
        self.nodes: list[tuple[str, Callable[..., Any], list[str], list[str], dict[str, Any]]] = []
        for k, node in enumerate(model.graph.node):
            attrs = _attrs(node)
            if node.op_type == "Constant":
                tensor = numpy_helper.to_array(attrs["value"])
                on = "cpu" if tensor.dtype.kind in "iu" or tensor.ndim == 0 else device
                values[node.output[0]] = torch.from_numpy(tensor.copy()).to(on)
                continue
            name = node.name or node.output[0] or f"{node.op_type}_{k}"
            self.op_types[name] = node.op_type
            self.nodes.append((name, ops[node.op_type], list(node.input), list(node.output), attrs))
        self.inputs = [i for i in model.graph.input if i.name not in values]
        self.outputs = [o.name for o in model.graph.output]
        for inp in self.inputs:
            if inp.type.tensor_type.elem_type not in _INPUT_TYPES:
                raise Unsupported(
                    f"input {inp.name!r} is not float or token ids (ONNX element type "
                    f"{inp.type.tensor_type.elem_type}: an INT8 model)"
                )

    def feeds(self, batch_size: int, rng: Any) -> dict[str, Any]:
        """Seeded inputs, dynamic dimensions at ``batch_size``: floats standard normal,
        token ids 1 to 4 (as ``runner.open_session`` draws them for ONNX Runtime)."""
        import torch

        inputs = [
            (
                inp.name,
                _INPUT_TYPES[inp.type.tensor_type.elem_type],
                [d.dim_value if d.HasField("dim_value") else None
                 for d in inp.type.tensor_type.shape.dim],
            )
            for inp in self.inputs
        ]  # fmt: skip
        feeds = runner.seeded_feeds(inputs, batch_size, rng)
        return {name: torch.from_numpy(a).to(self.device) for name, a in feeds.items()}

    def fold(self, feeds: dict[str, Any]) -> None:
        """Run the graph once on ``feeds`` and keep, as constants, the outputs of every
        node computed from constants and input shapes alone (``Shape`` and the
        arithmetic after it, a position embedding's ``Range`` and lookup, a weight's
        ``Cast``); those nodes no longer run. Shapes are fixed once the inputs are, as
        in a TensorRT engine built for them: nothing left to run reads a value back to
        the host, and a CUDA graph captures kernels only. A ``Gather`` left to run with
        an index computed here gets the index on the device, copied once."""
        static = set(self.constants)
        env = {**self.constants, **feeds}
        kept = []
        for node in self.nodes:
            name, fn, inputs, outputs, attrs = node
            result = fn(*self._args(env, inputs), **attrs)
            env[outputs[0]] = result
            if self.op_types[name] == "Shape" or all(i in static for i in inputs if i):
                static.add(outputs[0])
                self.constants[outputs[0]] = result
                del self.op_types[name]
            else:
                kept.append(node)
        for k, (name, fn, inputs, outputs, attrs) in enumerate(kept):
            if fn is not _gather or len(inputs) < 2 or inputs[1] not in static:
                continue
            moved = f"{inputs[1]}@{self.device}"
            self.constants[moved] = self.constants[inputs[1]].to(self.device)
            kept[k] = (name, fn, [inputs[0], moved, *inputs[2:]], outputs, attrs)
        self.nodes = kept

    @staticmethod
    def _args(env: dict[str, Any], inputs: list[str]) -> list[Any]:
        args = [env[i] if i else None for i in inputs]
        while args and args[-1] is None:
            args.pop()
        return args

    def run(self, feeds: dict[str, Any], hook: Callable[[str], None] | None = None) -> list[Any]:
        """The graph's outputs on ``feeds``; ``hook(node name)`` is called before each
        node and with ``""`` after the last (the profiler's event marks)."""
        env = {**self.constants, **feeds}
        for name, fn, inputs, outputs, attrs in self.nodes:
            if hook is not None:
                hook(name)
            env[outputs[0]] = fn(*self._args(env, inputs), **attrs)
        if hook is not None:
            hook("")
        return [env[o] for o in self.outputs]


class CudaEventTimer:
    """Times a run with a pair of CUDA events: from the first kernel's launch to the
    last one's end on the GPU, waiting for the GPU to finish."""

    def __init__(self) -> None:
        import torch

        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, run: Callable[[], Any]) -> float:
        self.start.record()
        run()
        self.end.record()
        self.end.synchronize()
        return float(self.start.elapsed_time(self.end))


class TorchBackend:
    """``runner.Backend`` for eager PyTorch on ``device`` (``cuda``: CUDA events;
    ``cpu``: the wall clock, for tests on a machine without a GPU)."""

    def __init__(self, device: str = "cuda") -> None:
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("no CUDA GPU is visible to PyTorch (torch.cuda.is_available())")
        self.device = device
        self.threads = 1  # the table's threads field: a GPU's engine takes no count
        self.provider = f"torch-{device}"
        self.timer_name = "cuda-events" if device.startswith("cuda") else ""
        self.layout_glue = False  # eager kernels: no layout conversions between them
        self._timer: Callable[[Callable[[], Any]], float] = (
            CudaEventTimer() if device.startswith("cuda") else runner.wall_clock_ms
        )

    def describe(self) -> dict[str, Any]:
        import torch

        info: dict[str, Any] = {"torch": torch.__version__, "provider": self.provider}
        if self.device.startswith("cuda"):
            info.update(
                gpu=torch.cuda.get_device_name(self.device),
                cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
                cudnn_benchmark=torch.backends.cudnn.benchmark,
                tf32_conv=torch.backends.cudnn.allow_tf32,
                tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
            )
        return info

    def open(
        self, data: bytes, entry: dict[str, Any], *, batch_size: int, rng: Any
    ) -> tuple[Callable[[], Any], dict[str, Any]]:
        import torch

        graph = TorchGraph(data, self.device, **runner.weights_of(entry))
        feeds = graph.feeds(batch_size, rng)
        with torch.inference_mode():
            graph.fold(feeds)

        def run() -> Any:
            with torch.inference_mode():
                return graph.run(feeds)

        run.graph = graph  # type: ignore[attr-defined]
        return run, feeds

    def timer(self, run: Callable[[], Any]) -> float:
        return self._timer(run)

    def diagnose(
        self, run: Callable[[], Any], data: bytes, entry: dict[str, Any]
    ) -> dict[str, Any]:
        return {}

    def profile(
        self,
        data: bytes,
        feeds: dict[str, Any],
        entry: dict[str, Any],
        runs: int = runner.CALIBRATION_PROFILE_RUNS,
    ) -> dict[str, Any]:
        """Each node's median time (us) inside the model, between CUDA events recorded
        before and after it (the wall clock on a CPU), and ``model_run``."""
        import time

        import torch

        graph = TorchGraph(data, self.device, **runner.weights_of(entry))
        with torch.inference_mode():
            graph.fold(feeds)
        cuda = self.device.startswith("cuda")
        times: dict[str, list[float]] = {}
        for _ in range(runs):
            marks: list[tuple[str, Any]] = []

            def hook(name: str, marks: list[tuple[str, Any]] = marks) -> None:
                if cuda:
                    event = torch.cuda.Event(enable_timing=True)
                    event.record()
                    marks.append((name, event))
                else:
                    marks.append((name, time.perf_counter()))

            with torch.inference_mode():
                graph.run(feeds, hook)
            if cuda:
                torch.cuda.synchronize()
            for (name, a), (_, b) in itertools.pairwise(marks):
                us = a.elapsed_time(b) * 1000.0 if cuda else (b - a) * 1e6
                times.setdefault(name, []).append(us)
            whole = (
                marks[0][1].elapsed_time(marks[-1][1]) * 1000.0
                if cuda
                else (marks[-1][1] - marks[0][1]) * 1e6
            )
            times.setdefault("model_run", []).append(whole)
        # the first runs warm caches up; keep the later half, as runner.profile_nodes
        return {
            k: [graph.op_types.get(k, ""), statistics.median(v[len(v) // 2 :])]
            for k, v in times.items()
        }


#: A GPU warms up for this long before its rounds (its clocks rise under load), as
#: ``trtexec --warmUp`` (200 ms by default) does.
GRAPH_WARMUP_S = 0.2
#: Eager runs timed for the launch-floor column of a whole model's row.
EAGER_RUNS = 20
#: Seconds of replays over which a whole model's energy is read from the GPU's
#: counter (NVML updates it every few tens of ms: a second keeps that under ~5%).
ENERGY_WINDOW_S = 1.0


def capture(run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` captured in a CUDA graph: warmed up on a side stream (cuDNN picks its
    algorithms, the allocator settles), captured once, and returned as the graph's
    replay, which launches every kernel of the model in one call, as TensorRT's
    ``--useCudaGraph``, ``torch.compile(mode="reduce-overhead")`` and ONNX Runtime's
    CUDA graphs deploy it. Inputs and outputs stay at the addresses captured: a call of
    the replay returns the captured run's outputs, rewritten by that replay, so it can
    be checked against ``run`` itself."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = run()

    def replay() -> Any:
        graph.replay()
        return outputs

    replay.graph = graph  # type: ignore[attr-defined]  # kept alive with the call
    return replay


class NvmlEnergy:
    """The GPU's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ
    since the driver loaded), for the GPU PyTorch calls ``device``."""

    def __init__(self, device: str = "cuda") -> None:
        import pynvml
        import torch

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(torch.device(device))
        bus = getattr(props, "pci_bus_id", None)
        if bus is not None:
            domain, slot = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
            pci = f"{domain:08X}:{bus:02X}:{slot:02X}.0"
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci)
        else:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.device(device).index or 0)
        self.read_mj()  # a GPU without the counter fails here, not mid-table

    def read_mj(self) -> float:
        import pynvml

        return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))


def open_energy(device: str) -> NvmlEnergy | None:
    """The energy counter of ``device``'s GPU, or None (no NVML, no counter, a CPU)."""
    if not device.startswith("cuda"):
        return None
    try:
        return NvmlEnergy(device)
    except Exception as err:  # NVML missing or the GPU has no counter: energy unmeasured
        print(f"no GPU energy counter ({err}); energy left to the stated power", file=sys.stderr)
        return None


def energy_per_run(
    run: Callable[[], Any],
    read_mj: Callable[[], float],
    *,
    window_s: float = ENERGY_WINDOW_S,
    sync: Callable[[], Any] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, float]:
    """Energy (mJ) and host time (ms) per run of ``run``, replayed back to back for
    ``window_s`` between two readings of the energy counter ``read_mj`` (``sync``
    waits for the device before each reading)."""
    sync()
    e0, t0, n = read_mj(), clock(), 0
    while n < 2 or clock() - t0 < window_s:
        run()
        n += 1
    sync()
    e1, t1 = read_mj(), clock()
    return (e1 - e0) / n, (t1 - t0) * 1000.0 / n


class GraphBackend(TorchBackend):
    """``runner.Backend`` that prices a model as it is deployed on a GPU: captured once
    in a CUDA graph (``capture``) and replayed, each replay timed by CUDA events, after
    a warm-up of ``GRAPH_WARMUP_S``. Beside each whole model's price its row records
    ``eager_ms`` (the same graph run node by node, eager: the launch floor, a
    diagnostic), ``host_ms`` (a replay's wall-clock time with the GPU waited for) and
    ``energy_mj`` per replay from the GPU's energy counter over ``ENERGY_WINDOW_S``.

    On a CPU (``device="cpu"``, tests) there is no graph to capture and no clock to
    raise: the eager run stands in for the replay, timed by the wall clock, with the
    protocol's warm-up by runs, and no energy is read unless a counter is given."""

    def __init__(
        self,
        device: str = "cuda",
        *,
        energy: Callable[[], float] | None = None,
        energy_window_s: float = ENERGY_WINDOW_S,
        warmup_s: float = GRAPH_WARMUP_S,
    ) -> None:
        super().__init__(device)
        self.cuda = device.startswith("cuda")
        self.warmup_s = warmup_s if self.cuda else 0.0
        self.provider = f"torch-{device}-graph"
        self.timer_name = "cuda-graph-replay/cuda-events" if self.cuda else ""
        counter = open_energy(device) if energy is None else None
        self.read_energy = energy if energy is not None else (counter and counter.read_mj)
        self.energy_window_s = energy_window_s

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "execution": "CUDA graph replay" if self.cuda else "eager (no graph on a CPU)",
            "energy": "NVML total-energy counter" if self.read_energy else "",
        }

    def open(
        self, data: bytes, entry: dict[str, Any], *, batch_size: int, rng: Any
    ) -> tuple[Callable[[], Any], dict[str, Any]]:
        eager, feeds = super().open(data, entry, batch_size=batch_size, rng=rng)
        if not self.cuda:
            return eager, feeds
        replay = capture(eager)
        replay.eager = eager  # type: ignore[attr-defined]
        return replay, feeds

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def diagnose(
        self, run: Callable[[], Any], data: bytes, entry: dict[str, Any]
    ) -> dict[str, Any]:
        eager = getattr(run, "eager", run)
        out = {"eager_ms": statistics.median(self.timer(eager) for _ in range(EAGER_RUNS))}
        read = self.read_energy or (lambda: 0.0)
        window = self.energy_window_s if self.read_energy else 0.05
        energy_mj, host_ms = energy_per_run(run, read, window_s=window, sync=self._sync)
        out["host_ms"] = host_ms
        if self.read_energy:
            out["energy_mj"] = energy_mj
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="frontier-runner-torch",
        description="Measure a Frontier op bundle with PyTorch on a GPU (CUDA events).",
    )
    parser.add_argument("bundle", help="the ops.zip bundle")
    parser.add_argument("--device", required=True, help="a name for this device, e.g. h200")
    parser.add_argument("--out", required=True, help="the CSV to write (resumed if it exists)")
    parser.add_argument("--torch-device", default="cuda", help="cuda (default), cuda:1, cpu")
    parser.add_argument(
        "--execution",
        choices=("graph", "eager"),
        default="graph",
        help="graph (default): each model replayed in a captured CUDA graph, as deployed; "
        "eager: node by node (the launch floor, a diagnostic)",
    )
    parser.add_argument(
        "--batch-size", type=runner.at_least(1), default=None, help=runner.BATCH_SIZE_HELP
    )
    parser.add_argument("--rounds", type=runner.at_least(1), default=runner.ROUNDS)
    parser.add_argument("--round-s", type=runner.at_least(0.001, float), default=runner.ROUND_S)
    parser.add_argument(
        "--energy-window-s",
        type=runner.at_least(0.01, float),
        default=ENERGY_WINDOW_S,
        help=f"seconds of replays a whole model's energy is read over (default "
        f"{ENERGY_WINDOW_S}; the counter updates every few tens of ms)",
    )
    parser.add_argument(
        "--warmup-s",
        type=runner.at_least(0.0, float),
        default=GRAPH_WARMUP_S,
        help=f"seconds each model warms up for on a GPU (default {GRAPH_WARMUP_S}: its "
        "clocks rise under load; a GPU kept busy from model to model needs less)",
    )
    args = parser.parse_args(argv)

    def measure() -> Path:
        backend = (
            GraphBackend(
                args.torch_device,
                energy_window_s=args.energy_window_s,
                warmup_s=args.warmup_s,
            )
            if args.execution == "graph"
            else TorchBackend(args.torch_device)
        )
        return runner.measure_bundle(
            args.bundle,
            args.out,
            device=args.device,
            batch_size=args.batch_size,
            rounds=args.rounds,
            round_s=args.round_s,
            backend=backend,
        )

    return runner.report_measure(measure)


if __name__ == "__main__":
    sys.exit(main())
