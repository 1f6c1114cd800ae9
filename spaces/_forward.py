"""Running a user's model on its example inputs, with clear errors when that fails."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn


class SpaceError(ValueError):
    """A model, its example inputs or the space options cannot make a search space."""


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run a block with ``model`` in eval mode (no BN statistics updated), then restore."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for m, mode in modes.items():
            m.training = mode


def run_model(model: nn.Module, example_inputs: Any) -> Any:
    """Call ``model`` on example inputs given as a tensor, a tuple of tensors or a dict."""
    if isinstance(example_inputs, Mapping):
        return model(**example_inputs)
    if isinstance(example_inputs, tuple | list):
        return model(*example_inputs)
    return model(example_inputs)


def recalibrate_bn(model: nn.Module, batches: Iterable[Any]) -> None:
    """Re-estimate batch-norm statistics as the average over ``batches`` of
    ``(inputs, targets)`` or inputs (forward passes, no gradient step), then leave the
    model in eval mode. Pruning and quantization shift activations, and stale statistics
    hide what survives; a random-weight model needs them to mean anything at all."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    batches = list(batches)
    if not norms or not batches:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches
    model.train()
    with torch.no_grad():
        for batch in batches:
            run_model(model, batch[0] if isinstance(batch, tuple | list) else batch)
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    model.eval()


def check_forward(model: nn.Module, example_inputs: Any) -> torch.Tensor:
    """Run the model once; raise SpaceError saying what failed. Returns the (first) output."""
    if not isinstance(model, nn.Module):
        raise SpaceError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    try:
        with torch.no_grad(), eval_mode(model):
            out = run_model(model, example_inputs)
    except Exception as err:
        shapes = input_shapes(example_inputs)
        raise SpaceError(
            f"{type(model).__name__} forward failed on the example inputs {shapes}: "
            f"{type(err).__name__}: {err}"
        ) from err
    first = out[0] if isinstance(out, tuple | list) else out
    if not isinstance(first, torch.Tensor):
        raise SpaceError(f"{type(model).__name__} must return a tensor, got {type(first).__name__}")
    return first


def input_shapes(example_inputs: Any) -> str:
    """The shapes of a batch of inputs, for messages (a dict or other object: its type)."""
    if isinstance(example_inputs, torch.Tensor):
        return str(tuple(example_inputs.shape))
    if isinstance(example_inputs, tuple | list):
        return str([input_shapes(x) for x in example_inputs])
    return type(example_inputs).__name__
