"""Uniform plans: every layer at one prune ratio and one bit width, as trial
parameters. The search starts from some (``search.anchors``); latency tables are
calibrated on others (the corners of a space)."""

from __future__ import annotations

from typing import Any

from ._space import SearchSpace


def _closest(value: Any, choices: tuple[Any, ...]) -> Any:
    if value in choices:
        return value
    numeric = [c for c in choices if isinstance(c, int | float) and not isinstance(c, bool)]
    if numeric and isinstance(value, int | float):
        return min(numeric, key=lambda c: abs(c - value))
    return choices[0]


def uniform_params(
    space: SearchSpace,
    *,
    prune: float,
    weight_bits: int,
    act_bits: int,
    activation: str = "keep",
) -> dict[str, Any]:
    """Trial parameters (``space.dimensions()`` names) of the uniform plan: every group
    at ``prune``, every layer at ``weight_bits``/``act_bits``, no sparsity, no
    distillation, no student, the given activation choice; every other technique's
    dimension at its uncompressed choice (``Dimension.uncompressed``)."""
    fixed = {"distill": False, "student": "none", "activation": activation}
    per_layer = {"prune": prune, "wbits": weight_bits, "abits": act_bits, "sparse": 0.0}
    params: dict[str, Any] = {}
    for d in space.dimensions():
        if "/" in d.name or d.name.startswith("distill."):
            continue  # student and distillation sub-choices do not apply
        want = fixed.get(d.name, per_layer.get(d.name.split(".")[0]))
        params[d.name] = d.uncompressed if want is None else _closest(want, d.choices)
    return params
