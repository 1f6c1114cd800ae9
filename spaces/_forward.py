"""Running a user's model on its example inputs (on the device it lives on), with clear
errors when that fails."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Accelerator:
    """Where models train and are scored: a torch device (``cpu``, ``cuda``, ``cuda:1``)
    and whether their training forward passes run under bf16 autocast. Plain data: a
    worker is told its accelerator, it never finds one by itself.

    Attributes:
        device: the torch device.
        bf16: training forward passes under ``torch.autocast(dtype=torch.bfloat16)``
            (weights and optimiser state stay FP32).
        name: what the device is, for records (a GPU's name; ``cpu``).
    """

    device: str = "cpu"
    bf16: bool = False
    name: str = "cpu"

    @property
    def is_cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    def autocast(self) -> Any:
        """A context for training forward passes: bf16 autocast where ``bf16``, else
        nothing changes."""
        return torch.autocast(
            device_type=torch.device(self.device).type, dtype=torch.bfloat16, enabled=self.bf16
        )

    def describe(self) -> str:
        """``cpu``, or ``cuda:0 (NVIDIA H200, bf16)``: what a trial's record says."""
        if self.device == "cpu" and not self.bf16:
            return "cpu"
        extra = ", ".join(
            x
            for x in (self.name if self.name != self.device else "", "bf16" if self.bf16 else "")
            if x
        )
        return f"{self.device} ({extra})" if extra else self.device


CPU = Accelerator()


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter or buffer (the CPU for a model with
    neither): where its inputs must be."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def to_device(data: Any, device: torch.device | str) -> Any:
    """``data`` (a tensor, or tuples, lists and dicts of them; anything else as it is)
    on ``device``. A copy to a GPU from pinned memory does not wait for the host; on the
    CPU a CPU tensor is returned as it is."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=True)
    if isinstance(data, Mapping):
        return {k: to_device(v, device) for k, v in data.items()}
    if isinstance(data, tuple | list):
        return type(data)(to_device(v, device) for v in data)
    return data


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
    device = model_device(model)
    with torch.no_grad():
        for batch in batches:
            inputs = batch[0] if isinstance(batch, tuple | list) else batch
            run_model(model, to_device(inputs, device))
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
