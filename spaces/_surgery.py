"""Model surgery the techniques do in place: removing channels (Torch-Pruning) and
swapping activations."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from . import _graph
from ._forward import eval_mode, run_model
from ._plan import ActivationSwap, CompressionPlan, PlanError, check_names


class ApplyError(RuntimeError):
    """Applying a valid plan failed inside the model; the message names the layer."""


def kept_channels(channels: int, ratio: float, round_to: int) -> int:
    """How many of ``channels`` a prune ``ratio`` keeps, as a multiple of ``round_to``.

    Never fewer than one ``round_to`` (or all channels, if there are fewer than that) and
    never more than there are; a ratio of 0 keeps everything.
    """
    if ratio <= 0.0 or channels <= round_to:
        return channels
    keep = round(channels * (1.0 - ratio) / round_to) * round_to
    return min(channels, max(round_to, keep))


def swap_activations(model: nn.Module, swap: ActivationSwap) -> nn.Module:
    """Replace, in place, every module of class ``swap.replace`` in ``model`` with a
    fresh ``swap.to`` activation; returns ``model``."""
    make = {"relu": nn.ReLU, "hardswish": nn.Hardswish}[swap.to]
    targets = [n for n, m in model.named_modules() if n and type(m).__name__ == swap.replace]
    for name in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make())
    return model


def prune_model(model: nn.Module, plan: CompressionPlan, example_inputs: Any) -> None:
    """Remove, in place, the channels ``plan.prune`` asks for (Torch-Pruning)."""
    ratios = {name: r for name, r in plan.prune.items() if r > 0}
    if not ratios:
        return
    modules = dict(model.named_modules())
    check_names(
        "prune", ratios, [n for n, m in modules.items() if isinstance(m, _graph.ROOT_TYPES)]
    )
    with eval_mode(model):
        graph = _graph.build_graph(model, example_inputs)
        if graph is None or graph.dg is None:
            raise ApplyError(
                f"Torch-Pruning cannot trace {type(model).__name__}: "
                f"{graph.failure if graph else 'unknown'}"
            )
        try:
            _prune(model, graph, ratios, modules, plan, example_inputs)
        finally:
            _graph.release(graph)  # no copy of the weights as they were stays alive
    model.zero_grad(set_to_none=True)


def _prune(
    model: nn.Module,
    graph: _graph.Graph,
    ratios: dict[str, float],
    modules: dict[str, nn.Module],
    plan: CompressionPlan,
    example_inputs: Any,
) -> None:
    order = {name: i for i, name in enumerate(modules)}
    for name in sorted(ratios, key=order.__getitem__):
        module = modules[name]
        try:
            channels = _graph.output_channels(graph, module)
            if channels is None:
                raise PlanError(f"prune: {name!r} has no output channels to prune")
            group = _graph.pruning_group(graph, module, list(range(channels)))
            # Grouped convolutions shrink every channel group alike, so the kept
            # count is a multiple of both round_to and the number of groups.
            n_groups = _graph.channel_groups(graph, group)
            step = math.lcm(plan.round_to, n_groups)
            keep = kept_channels(channels, ratios[name], step)
            if keep >= channels:
                continue
            if plan.importance == "taylor":
                _taylor_gradients(model, example_inputs)
                group = _graph.pruning_group(graph, module, list(range(channels)))
            scores = _graph.group_importance(graph, group, plan.importance)
            per_group = channels // n_groups
            ranked = torch.argsort(scores.view(n_groups, per_group).mean(dim=0))
            drop_local = ranked[: per_group - keep // n_groups].tolist()
            drop = sorted(i + g * per_group for g in range(n_groups) for i in drop_local)
            _graph.pruning_group(graph, module, drop).prune()
        except PlanError:
            raise
        except Exception as err:
            raise ApplyError(
                f"pruning group {name!r} of {type(model).__name__} failed: "
                f"{type(err).__name__}: {err}"
            ) from err


def _taylor_gradients(model: nn.Module, example_inputs: Any) -> None:
    # First-order Taylor importance needs gradients; without labels, use the gradient
    # of the outputs' squared norm on the example inputs, which ranks channels by how
    # much their removal would change the output.
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        out = run_model(model, example_inputs)
        out = out[0] if isinstance(out, tuple | list) else out
        out.float().pow(2).mean().backward()
