"""Kernels in context: what each op costs inside a whole model, from profiled calibration
models, and what the glue between ops costs.

An op measured alone pays what a whole graph pays once: layout reorders around NCHWc
convolutions, quantize/dequantize around INT8 ones. The device runner profiles the
calibration models (ONNX Runtime's profiler reports each node's kernel time inside the
graph); this module attributes those nodes to Frontier's ops by name and learns each
op's in-context time (and, for ops no calibration model ran, the in-context/isolated
ratio of its kind). Whole-model latency is then fitted, by non-negative least squares
on the calibration models' unprofiled latencies, to the sum of in-context op times and
the glue predictors of the plan's precision boundaries. The glue is fitted to unprofiled
latency rather than taken from the profile: the profiler's own cost per node inflates
the many small quantize, dequantize and reorder nodes most.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._ops import OpSpec

#: Node types that move or convert tensors between ops rather than compute an op.
GLUE = {
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "Transpose",
    "ReorderInput",
    "ReorderOutput",
}


def attribute(nodes: dict[str, Any], op_nodes: list[list[str]]) -> tuple[list[float], float, float]:
    """Split a profile into per-op kernel times (ms), glue time (ms) and the run (ms).

    A node belongs to the op whose ONNX node or output name is the longest prefix of the
    node's name (ONNX Runtime names fused nodes after the fused chain's output).
    """
    ids = sorted(
        ((name, i) for i, names in enumerate(op_nodes) for name in names),
        key=lambda t: -len(t[0]),
    )
    per_op = [0.0] * len(op_nodes)
    glue = 0.0
    for node, (op_name, us) in nodes.items():
        if node == "model_run":
            continue
        ms = float(us) / 1000.0
        if op_name in GLUE:
            glue += ms
            continue
        owner = next((i for name, i in ids if node.startswith(name)), None)
        if owner is None:
            glue += ms
        else:
            per_op[owner] += ms
    run_ms = float(nodes.get("model_run", ["", math.nan])[1]) / 1000.0
    return per_op, glue, run_ms


def boundary_features(specs: list[OpSpec]) -> np.ndarray:
    """Glue predictors of a plan: elements entering and leaving INT8 regions (millions),
    the number of such boundaries, and a constant."""
    weighted = [s for s in specs if s.op_type in ("Conv", "Gemm", "MatMul")]
    q = dq = 0.0
    n = 0
    previous = "fp32"
    last: OpSpec | None = None
    for s in weighted:
        if s.precision != previous:
            n += 1
            if s.precision == "int8":
                q += math.prod(s.input_shapes[0])
            elif last is not None:
                dq += math.prod(last.output_shape)
        previous, last = s.precision, s
    if previous == "int8" and last is not None:
        dq += math.prod(last.output_shape)
        n += 1
    return np.array([q / 1e6, dq / 1e6, float(n), 1.0])


@dataclass
class ContextModel:
    """In-context op times, per-kind ratios, and the fitted whole-model line:
    latency = ``scale`` * (sum of in-context op times) + glue predictors @ ``glue_coef``."""

    op_ms: dict[str, float]
    ratio: dict[str, float]
    glue_coef: np.ndarray
    scale: float
    models: int
    residual_mape: float = field(default=math.nan)

    def op_cost(self, spec: OpSpec, isolated_ms: Callable[[OpSpec], float]) -> float:
        if spec.key in self.op_ms:
            return self.op_ms[spec.key]
        ratio = self.ratio.get(f"{spec.kind}/{spec.precision}", self.ratio.get("*", 1.0))
        return isolated_ms(spec) * ratio

    def predict(self, specs: list[OpSpec], isolated_ms: Callable[[OpSpec], float]) -> float:
        ops = sum(self.op_cost(s, isolated_ms) for s in specs)
        return self.scale * ops + float(boundary_features(specs) @ self.glue_coef)


def fit_context(
    samples: list[tuple[list[OpSpec], list[list[str]], dict[str, Any], float]],
    isolated_ms: Callable[[OpSpec], float],
) -> ContextModel | None:
    """Fit a ContextModel from calibration models.

    Args:
        samples: per calibration model, its ops, their ONNX names, its profile and its
            measured (unprofiled) latency in ms.
        isolated_ms: an op's isolated latency (table minus overhead, or the fallback).
    """
    from scipy.optimize import nnls

    if len(samples) < 6:
        return None
    in_context: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    for specs, op_nodes, nodes, _ in samples:
        per_op, _, _ = attribute(nodes, op_nodes)
        for spec, ms in zip(specs, per_op, strict=True):
            if ms <= 0:
                continue
            in_context.setdefault(spec.key, []).append(ms)
            iso = isolated_ms(spec)
            if iso > 0:
                ratios.setdefault(f"{spec.kind}/{spec.precision}", []).append(ms / iso)
    op_ms = {k: statistics.median(v) for k, v in in_context.items()}
    ratio = {k: statistics.median(v) for k, v in ratios.items()}
    all_ratios = [r for v in ratios.values() for r in v]
    ratio["*"] = statistics.median(all_ratios) if all_ratios else 1.0
    model = ContextModel(op_ms, ratio, np.zeros(4), 1.0, len(samples))
    # latency ~ scale * in-context op sum + boundary glue, all coefficients >= 0
    x = np.array(
        [
            [sum(model.op_cost(s, isolated_ms) for s in specs), *boundary_features(specs)]
            for specs, _, _, _ in samples
        ]
    )
    measured = np.array([m for _, _, _, m in samples])
    scale_cols = np.maximum(np.abs(x).max(axis=0), 1e-12)
    coef, _ = nnls(x / scale_cols, measured)
    coef = coef / scale_cols
    model.scale, model.glue_coef = float(coef[0]), coef[1:]
    fitted = np.array([model.predict(specs, isolated_ms) for specs, _, _, _ in samples])
    model.residual_mape = float(np.mean(np.abs(fitted / measured - 1)))
    return model
