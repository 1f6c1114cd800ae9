"""The device runner for a GPU: a bundle's models run as PyTorch, timed by CUDA events.

ONNX Runtime's GPU build is not on every GPU machine; PyTorch with CUDA usually is. This
runner reads the same bundles as ``runner.py`` and writes the same files, by the same
timing protocol (``runner.time_models``: warm-up, interleaved rounds, the median of
round medians), but it runs each ONNX model as eager PyTorch on the GPU, node by node,
and times each run with a pair of CUDA events (``cuda_events_ms``): the GPU time from
the first kernel's launch to the last one's end, launch gaps included, which is what a
PyTorch user's loop with ``torch.cuda.Event`` measures. cuDNN and TF32 settings are
PyTorch's defaults, and are recorded in the table's metadata.

It runs the FP32 ONNX operators Frontier's bundles use (convolutions, GEMMs, pooling,
activations, elementwise and shape ops). Eager PyTorch has no CUDA kernel for ONNX's
INT8 operators (QLinearConv, QGemm, QuantizeLinear, ...): those models are recorded as
``unsupported``, the way ``runner.py`` records an op its provider cannot run, so measure
a GPU with a bundle of a space without INT8 (``quantize`` left out).

Needs torch, onnx and numpy, and ``runner.py`` beside this file::

    python runner_torch.py ops.zip --device h200 --out h200.csv

(``--torch-device cpu`` runs it on the CPU with the wall clock: for tests.)
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
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
    }


class TorchGraph:
    """An ONNX graph run node by node as eager PyTorch on ``device``.

    Integer and scalar initializers and constants (shapes, axes, Clip's bounds) stay on
    the host, so reading them never waits for the GPU; the others, and the weights a
    bundle left out (drawn from ``weights_seed`` as ``runner.seeded_weights`` draws them
    for ONNX Runtime), go to the device. Raises ``Unsupported`` for an operator or input
    type it cannot run, before anything runs.
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
            if inp.type.tensor_type.elem_type != 1:  # float32
                raise Unsupported(f"input {inp.name!r} is not float32 (an INT8 model)")

    def feeds(self, batch_size: int, rng: Any) -> dict[str, Any]:
        """Seeded standard-normal inputs, dynamic dimensions at ``batch_size``."""
        import torch

        out = {}
        for inp in self.inputs:
            dims = [
                d.dim_value if d.HasField("dim_value") else batch_size
                for d in inp.type.tensor_type.shape.dim
            ]
            array = rng.standard_normal(dims).astype("float32")
            out[inp.name] = torch.from_numpy(array).to(self.device)
        return out

    def run(self, feeds: dict[str, Any], hook: Callable[[str], None] | None = None) -> list[Any]:
        """The graph's outputs on ``feeds``; ``hook(node name)`` is called before each
        node and with ``""`` after the last (the profiler's event marks)."""
        env = {**self.constants, **feeds}
        for name, fn, inputs, outputs, attrs in self.nodes:
            if hook is not None:
                hook(name)
            args = [env[i] if i else None for i in inputs]
            while args and args[-1] is None:
                args.pop()
            result = fn(*args, **attrs)
            env[outputs[0]] = result
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
        self.provider = f"torch-{device}"
        self.timer_name = "cuda-events" if device.startswith("cuda") else ""
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

        def run() -> Any:
            with torch.inference_mode():
                return graph.run(feeds)

        run.graph = graph  # type: ignore[attr-defined]
        return run, feeds

    def timer(self, run: Callable[[], Any]) -> float:
        return self._timer(run)

    def profile(
        self, data: bytes, feeds: dict[str, Any], entry: dict[str, Any], runs: int = 30
    ) -> dict[str, Any]:
        """Each node's median time (us) inside the model, between CUDA events recorded
        before and after it (the wall clock on a CPU), and ``model_run``."""
        import time

        import torch

        graph = TorchGraph(data, self.device, **runner.weights_of(entry))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="frontier-runner-torch",
        description="Measure a Frontier op bundle with PyTorch on a GPU (CUDA events).",
    )
    parser.add_argument("bundle", help="the ops.zip bundle")
    parser.add_argument("--device", required=True, help="a name for this device, e.g. h200")
    parser.add_argument("--out", required=True, help="the CSV to write (resumed if it exists)")
    parser.add_argument("--torch-device", default="cuda", help="cuda (default), cuda:1, cpu")
    parser.add_argument("--batch-size", type=runner.at_least(1), default=1)
    parser.add_argument("--rounds", type=runner.at_least(1), default=runner.ROUNDS)
    parser.add_argument("--round-s", type=runner.at_least(0.001, float), default=runner.ROUND_S)
    args = parser.parse_args(argv)
    return runner.report_measure(
        lambda: runner.measure_bundle(
            args.bundle,
            args.out,
            device=args.device,
            batch_size=args.batch_size,
            rounds=args.rounds,
            round_s=args.round_s,
            backend=TorchBackend(args.torch_device),
        )
    )


if __name__ == "__main__":
    sys.exit(main())
