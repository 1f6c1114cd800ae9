"""Devices measured on this machine, resolved by name through a registry.

A device a search names is either a stored table (measured elsewhere, imported) or a
*local* device that Frontier measures here the first time it is used. A local device is
one object (``LocalDevice``): what runs and times its models (its runner backend), the
batch it is priced at, the precisions it runs, and where its energy comes from. Every
caller that times or prices takes the device, never a thread count, so a new kind of
local device is one ``register_local`` call:

- ``local-cpu`` (1 thread) and ``local-cpu-Nt`` (N threads): ONNX Runtime's CPU provider,
  timed by the wall clock; energy is latency times CodeCarbon's power for this CPU.
- ``local-cuda`` (batch 1) and ``local-cuda-bN`` (batch N): this machine's first CUDA
  GPU, each model replayed in a captured CUDA graph and timed by CUDA events
  (``runner_torch.GraphBackend``); energy read from the GPU's own counter (NVML).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOCAL_CPU = "local-cpu"
LOCAL_CUDA = "local-cuda"


class DeviceUnavailable(ValueError):
    """A local device this machine cannot measure (a GPU device without a GPU)."""


@dataclass(frozen=True)
class LocalDevice:
    """A device timed on this machine by the timing protocol.

    Attributes:
        name: as configs and tables name it (``local-cpu``, ``local-cpu-2t``,
            ``local-cuda-b32``).
        kind: ``cpu`` or ``cuda``.
        threads: ONNX Runtime intra-op threads (CPU devices).
        batch_size: the batch every model is timed and priced at.
        precisions: the precisions its table prices (``fp32``, ``fp16``, ``int8``...). A
            CPU's 16-bit layers are exported and priced FP32 (their bits simulated), as
            ONNX Runtime's CPU provider then runs them; a GPU's run FP16 (``half``).
        provider: the ONNX Runtime execution provider (CPU devices).
        timing: how one run is timed, in words (the table's metadata keeps it).
        energy: where energy per inference comes from, in words.
    """

    name: str
    kind: str = "cpu"
    threads: int = 1
    batch_size: int = 1
    precisions: tuple[str, ...] = ("fp32", "int8")
    provider: str = "CPUExecutionProvider"
    timing: str = "ONNX Runtime session.run, wall clock"
    energy: str = "latency x CodeCarbon's power for this CPU (stated, not measured)"

    @property
    def half(self) -> bool:
        """Whether its models run 16-bit layers in FP16 (``export_onnx(half=True)``)."""
        return "fp16" in self.precisions

    def runs_like(self, other: LocalDevice | None) -> bool:
        """Whether ``other`` times models as this device does (its name aside:
        ``local-cpu`` and ``local-cpu-1t`` are one device)."""
        return other is not None and dataclasses.replace(other, name=self.name) == self

    def unavailable(self) -> str:
        """Why this machine cannot measure the device ("" when it can)."""
        if self.kind == "cuda":
            try:
                import torch
            except ImportError:  # pragma: no cover - torch is a dependency
                return "PyTorch is not installed"
            if not torch.cuda.is_available():
                return (
                    f"{self.name} is timed on this machine's CUDA GPU, and PyTorch sees none "
                    "(torch.cuda.is_available() is False); measure a GPU elsewhere with "
                    "runner_torch.py and `frontier lut import` its table under another name"
                )
        return ""

    def require(self) -> None:
        """Raise ``DeviceUnavailable`` where this machine cannot measure the device."""
        reason = self.unavailable()
        if reason:
            raise DeviceUnavailable(reason)

    def backend(self) -> Any:
        """The runner backend that opens, times and profiles a model on this device
        (``runner.Backend``)."""
        self.require()
        if self.kind == "cuda":
            from .runner_torch import GraphBackend

            return GraphBackend("cuda")
        from .runner import OrtBackend

        return OrtBackend(self.provider, self.threads)


#: A CPU device at one thread: what a caller times on when it names no device.
CPU_1T = LocalDevice(LOCAL_CPU)

Resolver = Callable[[str], LocalDevice | None]
_RESOLVERS: list[Resolver] = []


def register_local(resolver: Resolver) -> Resolver:
    """Add a resolver: a function from a device name to its ``LocalDevice``, or None
    for a name it does not know. Later registrations are asked first."""
    _RESOLVERS.insert(0, resolver)
    return resolver


def local_device(name: str) -> LocalDevice | None:
    """The local device ``name`` names, or None (a stored table's device)."""
    for resolve in _RESOLVERS:
        found = resolve(name)
        if found is not None:
            return found
    return None


def local_names() -> str:
    """The local device names, in words, for a message."""
    return "local-cpu, local-cpu-Nt (N threads), local-cuda, local-cuda-bN (batch N)"


_LOCAL_CPU = re.compile(r"local-cpu(?:-(?P<threads>[1-9]\d*)t)?")
_LOCAL_CUDA = re.compile(r"local-cuda(?:-b(?P<batch>[1-9]\d*))?")


@register_local
def _local_cpu(name: str) -> LocalDevice | None:
    """``local-cpu`` (1 thread) or ``local-cpu-Nt`` (N threads): this machine's CPU."""
    m = _LOCAL_CPU.fullmatch(name)
    return LocalDevice(name, threads=int(m["threads"] or 1)) if m else None


@register_local
def _local_cuda(name: str) -> LocalDevice | None:
    """``local-cuda`` (batch 1) or ``local-cuda-bN`` (batch N): this machine's GPU.
    INT8 is left out: no runtime Frontier times on a GPU has INT8 kernels. BF16 too: no
    plan chooses it and no export writes it (a GPU trial's training may still run under
    bf16 autocast, ``search.train.mixed_precision``; that is not a precision a table
    prices)."""
    m = _LOCAL_CUDA.fullmatch(name)
    if not m:
        return None
    return LocalDevice(
        name,
        kind="cuda",
        batch_size=int(m["batch"] or 1),
        precisions=("fp32", "fp16"),
        provider="torch-cuda",
        timing="CUDA graph replay (PyTorch), CUDA events",
        energy="the GPU's total-energy counter (NVML) over the timed replays",
    )
