"""Kernels in context: what each op costs inside a whole model, from profiled calibration
models, and what the glue between ops costs.

An op measured alone pays what a whole graph pays once: layout reorders around NCHWc
convolutions, quantize/dequantize around INT8 ones. The device runner profiles the
calibration models (ONNX Runtime's profiler reports each node's kernel time inside the
graph); this module attributes those nodes to Frontier's ops by name and learns each
op's in-context time (and, for ops no calibration model ran, the in-context/isolated
ratio of its kind). Whole-model latency is then fitted, by non-negative least squares
on the calibration models' unprofiled latencies, to the sum of in-context op times, the
in-context glue of the plan's gaps between ops, and the glue predictors of its precision
boundaries. The glue of a gap (the quantize, dequantize, transpose and reorder nodes
run between two ops) is learnt per gap from the profiles, keyed by the tensor crossing
it and what runs either side, because it is not linear in the tensor's size: a
transpose into 8 channels costs other than one into 144 channels of the same size. Its
weight in the line is fitted to unprofiled latency rather than taken from the profile:
the profiler's own cost per node inflates the many small glue nodes most.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ops._ops import OpSpec

#: Node types that move or convert tensors between ops rather than compute an op.
GLUE = {
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "Transpose",
    "ReorderInput",
    "ReorderOutput",
    "Reorder",  # OpenVINO's layout conversions
}


def split_profile(
    nodes: dict[str, Any], op_nodes: list[list[str]]
) -> tuple[list[float], dict[int, float], float]:
    """Split a profile into per-op kernel times (ms), glue time per gap between ops (ms)
    and the run (ms).

    A node belongs to the op whose ONNX node or output name is the longest prefix of the
    node's name (ONNX Runtime names fused nodes after the fused chain's output). Glue
    (GLUE types, and nodes no op owns) goes to the gap it runs in, by the profile's
    execution order: after op ``i`` and before the next op, gap ``i``; before any op, -1.
    """
    ids = sorted(
        ((name, i) for i, names in enumerate(op_nodes) for name in names),
        key=lambda t: -len(t[0]),
    )
    per_op = [0.0] * len(op_nodes)
    gaps: dict[int, float] = {}
    last = -1
    for node, (op_name, us) in nodes.items():
        if node == "model_run":
            continue
        ms = float(us) / 1000.0
        owner = None
        if op_name not in GLUE:
            owner = next((i for name, i in ids if node.startswith(name)), None)
        if owner is None:
            gaps[last] = gaps.get(last, 0.0) + ms
        else:
            per_op[owner] += ms
            last = max(last, owner)
    run_ms = float(nodes.get("model_run", ["", math.nan])[1]) / 1000.0
    return per_op, gaps, run_ms


def _gap_tensor(specs: list[OpSpec], i: int) -> tuple[int, ...]:
    return specs[i].output_shape if i >= 0 else specs[0].input_shapes[0]


def gap_keys(specs: list[OpSpec], i: int) -> tuple[str, str, str]:
    """Keys of the gap after op ``i`` (-1: before the first op): a fine one (the tensor
    crossing it, the precisions and the kinds of the ops either side), a coarse one (the
    tensor and the precisions) and the direction (the precisions)."""
    a = specs[i] if i >= 0 else None
    b = specs[i + 1] if i + 1 < len(specs) else None
    direction = f"{a.precision if a else 'fp32'}>{b.precision if b else 'fp32'}"
    coarse = "x".join(map(str, _gap_tensor(specs, i))) + "|" + direction
    kinds = [f"{s.kind}{len(s.input_shapes)}" if s else "-" for s in (a, b)]
    return f"{coarse}|{kinds[0]}|{kinds[1]}", coarse, direction


@dataclass
class GapGlue:
    """In-context glue per gap between ops, learnt from profiled calibration models: by
    the gap's fine key where a calibration model had that gap, else by its coarse key,
    else from a line in the crossing tensor's size fitted per direction."""

    fine: dict[str, float]
    coarse: dict[str, float]
    #: per direction: ms per million elements of the crossing tensor, and ms per gap
    lines: dict[str, tuple[float, float]]

    def cost(self, specs: list[OpSpec]) -> float:
        total = 0.0
        for i in range(-1, len(specs)):
            fine, coarse, direction = gap_keys(specs, i)
            ms = self.fine.get(fine)
            if ms is None:
                ms = self.coarse.get(coarse)
            if ms is None:
                slope, const = self.lines.get(direction, (0.0, 0.0))
                ms = slope * math.prod(_gap_tensor(specs, i)) / 1e6 + const
            total += ms
        return total


def fit_gap_glue(samples: list[tuple[list[OpSpec], dict[int, float]]]) -> GapGlue:
    """Median glue per gap key over the calibration models' gaps (from ``split_profile``
    of each profile), and a non-negative line per direction for gaps none of them had."""
    from scipy.optimize import nnls

    fine: dict[str, list[float]] = {}
    coarse: dict[str, list[float]] = {}
    points: dict[str, list[tuple[float, float]]] = {}
    for specs, gaps in samples:
        for i in range(-1, len(specs)):
            ms = gaps.get(i, 0.0)
            f, c, direction = gap_keys(specs, i)
            fine.setdefault(f, []).append(ms)
            coarse.setdefault(c, []).append(ms)
            points.setdefault(direction, []).append((math.prod(_gap_tensor(specs, i)) / 1e6, ms))
    lines = {}
    for direction, xy in points.items():
        x = np.array([[e, 1.0] for e, _ in xy])
        coef, _ = nnls(x, np.array([ms for _, ms in xy]))
        lines[direction] = (float(coef[0]), float(coef[1]))
    return GapGlue(
        {k: statistics.median(v) for k, v in fine.items()},
        {k: statistics.median(v) for k, v in coarse.items()},
        lines,
    )


def boundary_features(specs: list[OpSpec]) -> np.ndarray:
    """Glue predictors of a plan: elements entering and leaving INT8 regions (millions),
    the number of such boundaries, and a constant. An op enters an INT8 region when it
    runs INT8 after one that does not, and leaves it when it runs FP32 after an INT8 one;
    an INT8 op with an FP32 residual Add leaves it by itself."""
    q = dq = 0.0
    n = 0
    previous = "fp32"  # what the graph input comes in
    for s in specs:
        runs_int8 = s.precision.startswith("int8")
        if runs_int8 and previous == "fp32":
            q += math.prod(s.input_shapes[0])
            n += 1
        elif not runs_int8 and previous == "int8":
            dq += math.prod(s.input_shapes[0])
            n += 1
        previous = "int8" if s.precision == "int8" else "fp32"
        if runs_int8 and previous == "fp32":
            dq += math.prod(s.output_shape)
            n += 1
    if previous == "int8":
        dq += math.prod(specs[-1].output_shape)
        n += 1
    return np.array([q / 1e6, dq / 1e6, float(n), 1.0])


@dataclass
class ContextModel:
    """In-context op times, per-kind ratios, in-context gap glue, and the fitted
    whole-model line: latency = ``scale`` * (sum of in-context op times) + ``gap_coef``
    * (the gaps' glue) + boundary glue predictors @ ``glue_coef``."""

    op_ms: dict[str, float]
    ratio: dict[str, float]
    glue_coef: np.ndarray
    scale: float
    models: int
    gaps: GapGlue | None = None
    gap_coef: float = 0.0
    residual_mape: float = field(default=math.nan)

    def op_cost(self, spec: OpSpec, isolated_ms: Callable[[OpSpec], float]) -> float:
        if spec.key in self.op_ms:
            return self.op_ms[spec.key]
        ratio = self.ratio.get(f"{spec.kind}/{spec.precision}", self.ratio.get("*", 1.0))
        return isolated_ms(spec) * ratio

    def predict(self, specs: list[OpSpec], isolated_ms: Callable[[OpSpec], float]) -> float:
        ops = sum(self.op_cost(s, isolated_ms) for s in specs)
        glue = float(boundary_features(specs) @ self.glue_coef)
        if self.gaps is not None and self.gap_coef:
            glue += self.gap_coef * self.gaps.cost(specs)
        return self.scale * ops + glue


def fit_context(
    samples: list[tuple[list[OpSpec], list[list[str]], dict[str, Any], float]],
    isolated_ms: Callable[[OpSpec], float],
    *,
    gaps: bool = True,
) -> ContextModel | None:
    """Fit a ContextModel from calibration models.

    Args:
        samples: per calibration model, its ops, their ONNX names, its profile and its
            measured (unprofiled) latency in ms.
        isolated_ms: an op's isolated latency (table minus overhead, or the fallback).
        gaps: learn the glue per gap between ops (``GapGlue``); without it, only the
            boundary predictors price the glue.
    """
    from scipy.optimize import nnls

    if len(samples) < 6:
        return None
    in_context: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    gap_samples = []
    for specs, op_nodes, nodes, _ in samples:
        per_op, gaps_ms, _ = split_profile(nodes, op_nodes)
        gap_samples.append((specs, gaps_ms))
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
    gap_fit = fit_gap_glue(gap_samples) if gaps else None
    model = ContextModel(op_ms, ratio, np.zeros(4), 1.0, len(samples), gap_fit)
    # latency ~ scale * in-context op sum + gap glue + boundary glue, all coefficients >= 0
    x = np.array(
        [
            [
                sum(model.op_cost(s, isolated_ms) for s in specs),
                gap_fit.cost(specs) if gap_fit is not None else 0.0,
                *boundary_features(specs),
            ]
            for specs, _, _, _ in samples
        ]
    )
    measured = np.array([m for _, _, _, m in samples])
    scale_cols = np.maximum(np.abs(x).max(axis=0), 1e-12)
    coef, _ = nnls(x / scale_cols, measured)
    coef = coef / scale_cols
    model.scale, model.gap_coef, model.glue_coef = float(coef[0]), float(coef[1]), coef[2:]
    fitted = x @ coef  # what model.predict gives, without pricing every model again
    model.residual_mape = float(np.mean(np.abs(fitted / measured - 1)))
    return model
