"""Exact objectives from the compressed model itself: size, MACs, BOPs."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from frontier.spaces import export_onnx

from ._base import MINIMIZE, Candidate, EvalSetup, Evaluator, Measurement, register_evaluator


@register_evaluator("size_bytes")
class SizeEvaluator(Evaluator):
    """Model size in bytes at each layer's bit width (``model_cost``), or, with
    ``format="onnx"``, the size of the exported ONNX file (both go in the details).

    Args:
        format: None for the accounted size, "onnx" for the exported file's size.
    """

    name, unit, direction = "size_bytes", "bytes", MINIMIZE

    def __init__(self, *, format: str | None = None) -> None:
        if format not in (None, "onnx"):
            raise ValueError(f"size_bytes: format must be null or 'onnx', got {format!r}")
        self.format = format

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        cost = setup.cost(candidate, macs=False)  # no forward pass to count MACs
        details: dict[str, float | str] = {"accounted_bytes": cost.size_bytes}
        value = float(cost.size_bytes)
        if self.format == "onnx":
            model = setup.compressed(candidate)
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path = Path(tmp) / "m.onnx"
                result = export_onnx(
                    model,
                    candidate.plan,
                    setup.example_inputs,
                    path,
                    calibration_data=setup.calibration(),
                )
                value = float(path.stat().st_size)
                details.update(onnx_bytes=value, onnx_precision=result.precision)
        return Measurement(value, "bytes", "exact", 0.0, details)


class _CostField(Evaluator):
    field = "macs"
    direction = MINIMIZE

    def __init__(self) -> None:
        self.name = self.field
        self.unit = self.field.upper()

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        cost = setup.cost(candidate)
        return Measurement(
            float(getattr(cost, self.field)), self.unit, "exact", 0.0, {"params": cost.params}
        )


@register_evaluator("macs")
class MacsEvaluator(_CostField):
    """Multiply-accumulates of one inference (batch 1)."""

    field = "macs"


@register_evaluator("bops")
class BopsEvaluator(_CostField):
    """Bit operations: MACs x weight bits x activation bits."""

    field = "bops"
