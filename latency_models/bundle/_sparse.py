"""Sparse-kernel rows: unstructured sparsity measured through PyTorch's CSR matmul.

ONNX Runtime's CPU provider has no sparse Conv or Gemm kernel, so a table measured with
the device runner prices a sparse layer as its dense twin. On this machine Frontier can
also measure each sparse FP32 layer the way a sparse runtime would run it: the weight
in CSR format times the input (``torch.sparse.mm``; convolutions through im2col). Those
rows go into the table under the sparse op's key, so a plan's unstructured sparsity
changes its predicted latency by what the sparse kernel actually costs here, which for
small layers is usually more than the dense kernel.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import runner
from ..device._table import Row
from ..ops._ops import OpSpec
from ..runner import ROUND_S, ROUNDS

#: Row op types of sparse-kernel rows: the kind plus this suffix, so fallback fits of
#: dense kernels never mix them in.
SPARSE_SUFFIX = "-sparse"


def sparse_variants(ops: Iterable[OpSpec], sparsities: Iterable[float]) -> Iterator[OpSpec]:
    """The sparse versions of ``ops`` a CSR kernel can run: FP32 dense convolutions
    (groups 1) and linear layers, at each sparsity above 0."""
    shares = sorted({float(s) for s in sparsities if s > 0})
    for spec in ops:
        if spec.sparsity or spec.precision != "fp32" or spec.kind not in ("conv", "linear"):
            continue
        for share in shares:
            yield dataclasses.replace(spec, sparsity=share)


def _sparse_weight(shape: tuple[int, int], share: float, gen: torch.Generator) -> torch.Tensor:
    """A random weight with its ``share`` smallest magnitudes zeroed (magnitude pruning)."""
    w = torch.randn(shape, generator=gen)
    k = round(share * w.numel())
    if k:
        threshold = w.abs().flatten().kthvalue(k).values
        w = torch.where(w.abs() <= threshold, torch.zeros_like(w), w)
    return w


def sparse_kernel(spec: OpSpec, *, dense: bool = False, seed: int = 0) -> Callable[[], Any]:
    """A call that runs ``spec`` through a CSR matmul (``dense``: the same im2col/matmul
    computation with a dense weight, for comparison)."""
    gen = torch.Generator().manual_seed(seed)
    attrs = dict(spec.attrs)
    x = torch.randn(spec.input_shapes[0], generator=gen)
    residual = torch.randn(spec.input_shapes[1], generator=gen) if "Add" in spec.fused else None
    relu = "Relu" in spec.fused
    out_shape = spec.output_shape
    if spec.kind == "conv":
        cout, cin = out_shape[1], spec.input_shapes[0][1]
        kernel = tuple(spec.kernel)
        fan_in = cin * int(torch.tensor(kernel).prod())
        pads = tuple(attrs.get("pads", (0,) * (2 * len(kernel))))[: len(kernel)]
        stride = tuple(attrs.get("strides", (1,) * len(kernel)))
        dilation = tuple(attrs.get("dilations", (1,) * len(kernel)))
    else:
        cout, fan_in = out_shape[-1], spec.input_shapes[0][-1]
    w = _sparse_weight((cout, fan_in), spec.sparsity, gen)
    with warnings.catch_warnings():  # "sparse CSR support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        weight = w if dense else w.to_sparse_csr()
    bias = torch.randn(cout, 1, generator=gen)

    def run() -> torch.Tensor:
        with torch.no_grad():
            if spec.kind == "conv":
                cols = F.unfold(x, kernel, dilation=dilation, padding=pads, stride=stride)[0]
                y = (weight @ cols + bias).reshape(out_shape)
            else:
                y = (weight @ x.reshape(-1, fan_in).T + bias).T.reshape(out_shape)
            if residual is not None:
                y = y + residual
            return torch.relu(y) if relu else y

    return run


def measure_sparse_rows(
    specs: Iterable[OpSpec],
    *,
    overhead_ms: float,
    threads: int = 1,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    progress: Callable[[int, int], None] | None = None,
) -> list[Row]:
    """Measure sparse ``specs`` with the CSR kernel as table rows, by the timing
    protocol every table row follows (``runner.time_models``). ``overhead_ms`` (the
    table's per-run session overhead) is added, since predictions subtract it from every
    row: what is left is the kernel call as timed here."""
    specs = list(specs)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        stats = runner.time_chunked(
            specs, sparse_kernel, rounds=rounds, round_s=round_s, progress=progress
        )
    finally:
        torch.set_num_threads(previous)
    return [
        Row(
            model_id=f"sparse-{i:05d}",
            kind="op",
            key=spec.key,
            op_type=spec.kind + SPARSE_SUFFIX,
            precision=spec.precision,
            status="ok",
            median_ms=st["median_ms"] + overhead_ms,
            p10_ms=st["p10_ms"] + overhead_ms,
            p90_ms=st["p90_ms"] + overhead_ms,
            runs=int(st["runs"]),
        )
        for i, (spec, st) in enumerate(zip(specs, stats, strict=True))
    ]
