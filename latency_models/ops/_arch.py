"""The architectures a space's plans run (the model's own, with an activation swapped,
each student) as op templates, and every op they can produce."""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

from torch import nn

from frontier.spaces import (
    ActivationSwap,
    CompressionPlan,
    SearchSpace,
    build_student,
    swap_activations,
)

from ._ops import OpSpec, enumerate_ops
from ._templates import Templates, build_templates

TEACHER = "teacher"


@dataclass
class SpaceOps:
    """The op templates of every architecture of a space, and the ops they produce."""

    templates: dict[str, Templates]
    ops: list[OpSpec]

    @property
    def count(self) -> int:
        return len(self.ops)


def arch_key(plan: CompressionPlan) -> str:
    """Which architecture's templates price ``plan``: the student's, the model's with
    its activations swapped, or the model's own."""
    if plan.student is not None:
        return plan.student.key
    if plan.activation is not None:
        return f"{TEACHER}+{plan.activation.to}"
    return TEACHER


def space_templates(
    model: nn.Module,
    example_inputs: Any,
    space: SearchSpace,
    *,
    batch_size: int = 1,
    half: bool = False,
) -> dict[str, Templates]:
    """Templates of the model, of the model with each activation swap of ``space``, and
    of each student architecture, at ``batch_size``, with 16-bit layers in FP16 where
    ``half`` (``Templates.half``)."""
    at: dict[str, Any] = {"batch_size": batch_size, "half": half}
    out = {TEACHER: build_templates(model, example_inputs, space, **at)}
    swap = space.options.activation_swap
    for to in swap.to if swap is not None else ():
        activation = ActivationSwap(swap.replace, to)
        swapped = swap_activations(copy.deepcopy(model), activation)
        out[arch_key(CompressionPlan(activation=activation))] = build_templates(
            swapped.eval(), example_inputs, space, **at
        )
    if space.students:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            num_classes = int(model(example_inputs).shape[-1])
        for spec in space.options.students:
            student = build_student(spec, num_classes=num_classes, example_inputs=example_inputs)
            out[spec.key] = build_templates(
                student.eval(), example_inputs, space.students[spec.key], **at
            )
    return out


def space_ops(
    model: nn.Module,
    example_inputs: Any,
    space: SearchSpace,
    *,
    batch_size: int = 1,
    half: bool = False,
) -> SpaceOps:
    """Every distinct operator instance any plan of ``space`` can produce, at
    ``batch_size``, 16-bit layers in FP16 where ``half``."""
    templates = space_templates(model, example_inputs, space, batch_size=batch_size, half=half)
    seen: dict[str, OpSpec] = {}
    for key, t in templates.items():
        sub = space.students.get(key, space)
        for spec in enumerate_ops(t, sub):
            seen.setdefault(spec.key, spec)
    return SpaceOps(templates=templates, ops=list(seen.values()))
