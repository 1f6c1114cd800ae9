"""Applying a plan: a new, physically pruned and quantization-simulating model."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from torch import nn

from ._forward import check_forward
from ._plan import CompressionPlan
from ._students import build_student
from ._techniques import ApplyContext, plan_techniques


def apply_plan(
    model: nn.Module,
    plan: CompressionPlan,
    example_inputs: Any,
    *,
    calibration_data: Iterable[Any] | None = None,
) -> nn.Module:
    """Return a new model compressed as ``plan`` says; ``model`` is left untouched.

    Pruning physically removes channels through Torch-Pruning (least important first,
    by ``plan.importance``); unstructured sparsity then zeroes each layer's smallest
    weights behind a fixed mask. Bit widths below 32 are simulated with fake quantization
    (straight-through gradients); activation ranges are calibrated on
    ``calibration_data`` (batches of inputs, or (inputs, targets) pairs), or on the
    example inputs when none is given. Loader-style (inputs, targets) batches are read as
    their inputs.

    Args:
        model: the model to compress (the teacher when the plan names a student).
        plan: the compression plan.
        example_inputs: a batch the model accepts.
        calibration_data: batches for activation-range calibration.
    """
    output = check_forward(model, example_inputs)
    if plan.student is not None:
        new = build_student(
            plan.student, num_classes=int(output.shape[-1]), example_inputs=example_inputs
        )
        new.train(model.training)
    else:
        new = copy.deepcopy(model)
    context = ApplyContext(example_inputs, calibration_data)
    for technique in plan_techniques(plan):
        technique.apply(new, plan, context)
    return new
