"""A bundle's whole models: a plan's model as ``export_onnx`` writes it, built by as many
forked processes as the machine has cores, its INT8 ranges calibrated on a few samples
(they are timed, not scored)."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from frontier.spaces import apply_plan, export_onnx, model_bytes

#: a bundle's whole models calibrate their INT8 activation ranges on this many samples:
#: they are timed, not scored, and ranges move no latency (nor which layers run INT8)
TIMING_CALIBRATION_SAMPLES = 8


def timing_calibration(calibration_data: Any) -> Any:
    """The first batch of ``calibration_data`` cut to ``TIMING_CALIBRATION_SAMPLES``
    (tensors along their first dimension, in tuples, lists and dicts alike); None stays
    None (benchmarks/bench_latency_trust.py calibrates its tables the same way)."""
    if calibration_data is None:
        return None
    first = next(iter(calibration_data), None)
    return None if first is None else [_head(first, TIMING_CALIBRATION_SAMPLES)]


def _head(batch: Any, n: int) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[:n] if batch.dim() else batch
    if isinstance(batch, tuple | list):
        return type(batch)(_head(b, n) for b in batch)
    if isinstance(batch, dict):
        return {k: _head(v, n) for k, v in batch.items()}
    return batch


#: at most this many processes build a bundle's whole models at once
BUILD_WORKERS = 8
#: what building one whole model takes over the memory its process held before, in
#: multiples of the model's weights (pruning's copy, the export's trace,
#: the ONNX model and its INT8 calibration): regnet_y_128gf's 2.55 GB of weights took
#: 2.9x and 3.9x for two seeded plans (2026-12-06), and two forked builders of it went
#: past 20 GB of this machine's 24
BUILD_MEMORY_PER_WEIGHT = 4.0
_BUILDING: tuple[Any, ...] = ()  # (model, example, calibration, half, qdq) for the workers


def build_whole(
    model: nn.Module,
    plans: list[Any],
    example_inputs: Any,
    calibration_data: Any,
    *,
    half: bool = False,
    qdq: bool = False,
) -> Generator[bytes, None, None]:
    """``whole_model_bytes`` of each of ``plans``, in order, built by as many forked
    processes as the machine has cores (at most ``BUILD_WORKERS``; in this process where
    it has one core or no ``fork``): exporting a model is single-threaded Python, and a
    MobileNetV3 space's 200 calibration models took 170 s on one core of two."""
    global _BUILDING
    import multiprocessing

    workers = min(os.cpu_count() or 1, BUILD_WORKERS, len(plans), _fit_in_memory(model))
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for plan in plans:
            yield whole_model_bytes(
                model, plan, example_inputs, calibration_data, half=half, qdq=qdq
            )
        return
    _BUILDING = (model, example_inputs, calibration_data, half, qdq)
    try:
        with multiprocessing.get_context("fork").Pool(workers, _one_thread) as pool:
            yield from pool.imap(_build_one, plans)
    finally:
        _BUILDING = ()


def _fit_in_memory(model: nn.Module) -> int:
    """How many builders of ``model``'s whole models fit four fifths of the memory this
    machine has free (``MemAvailable``), at ``BUILD_MEMORY_PER_WEIGHT`` each; at least
    one (then the build runs here), and no limit where the system does not say."""
    from ..runner import MEMORY_SHARE, free_memory_bytes

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    need = BUILD_MEMORY_PER_WEIGHT * weights
    free = free_memory_bytes()
    if free is None:
        return BUILD_WORKERS
    return max(1, int(MEMORY_SHARE * free // max(need, 1)))


def _one_thread() -> None:
    torch.set_num_threads(1)  # the workers share the cores


def _build_one(plan: Any) -> bytes:
    model, example_inputs, calibration_data, half, qdq = _BUILDING  # inherited from the fork
    return whole_model_bytes(model, plan, example_inputs, calibration_data, half=half, qdq=qdq)


def whole_model_bytes(
    model: nn.Module,
    plan: Any,
    example_inputs: Any,
    calibration_data: Any = None,
    *,
    half: bool = False,
    qdq: bool = False,
) -> bytes:
    """The ONNX file ``export_onnx`` writes for ``plan`` (INT8 where the plan says so, in
    QDQ format where ``qdq``; FP16 for its 16-bit layers where ``half``)."""
    compressed = apply_plan(model, plan, example_inputs, calibration_data=calibration_data)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(tmp) / "m.onnx"
        export_onnx(
            compressed,
            plan,
            example_inputs,
            path,
            calibration_data=calibration_data,
            half=half,
            qdq=qdq,
        )
        # a model too large for one message: its weights as references (``put`` seeds them)
        return model_bytes(path)
