"""Applying a plan: a new, physically pruned and quantization-simulating model."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable
from typing import Any

from torch import nn

from ._forward import check_forward, input_shapes
from ._plan import CompressionPlan
from ._students import build_student
from ._techniques import ApplyInputs, plan_techniques

#: model -> (the shapes of the example inputs it was checked on, its output's last
#: dimension): a search applies plans to one teacher thousands of times, and a teacher's
#: forward pass (a check per plan) cost a text-student plan a quarter of its structure build
_checked: weakref.WeakKeyDictionary[nn.Module, tuple[str, int]] = weakref.WeakKeyDictionary()


def _outputs(model: nn.Module, example_inputs: Any) -> int:
    """The last dimension of ``model``'s output (``check_forward`` once per model and
    shape of example inputs)."""
    shapes = input_shapes(example_inputs)
    known = _checked.get(model)
    if known is None or known[0] != shapes:
        known = (shapes, int(check_forward(model, example_inputs).shape[-1]))
        _checked[model] = known
    return known[1]


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
    outputs = _outputs(model, example_inputs)
    if plan.student is not None:
        new = build_student(plan.student, num_classes=outputs, example_inputs=example_inputs)
        new.train(model.training)
    else:
        new = copy.deepcopy(model)
    inputs = ApplyInputs(example_inputs, calibration_data)
    for technique in plan_techniques(plan):
        technique.apply(new, plan, inputs)
    return new
