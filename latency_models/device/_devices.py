"""Devices measured on this machine, resolved by name through a registry of runtimes.

A device a search names is either a stored table (measured elsewhere, imported) or a
*local* device that Frontier measures here the first time it is used. A local device is
one object (``LocalDevice``): its runtime (what runs and times its models), the batch
it is priced at, the precisions it runs, and where its energy comes from. Every caller
that times or prices takes the device, never a thread count. A runtime is one
``Runtime`` subclass registered once (``register_runtime``): the names it answers to,
why this machine cannot run it, and its runner backend; nothing else names a kind.

- ``local-cpu`` (1 thread) and ``local-cpu-Nt`` (N threads): ONNX Runtime's CPU provider,
  timed by the wall clock; energy is latency times CodeCarbon's power for this CPU.
- ``local-openvino`` and ``local-openvino-Nt``: OpenVINO's CPU plugin on the same
  exports (the ``openvino`` package), 1 or N threads, FP32 inference precision (its own
  default here would be BF16); INT8 exported in QDQ format, as OpenVINO reads it.
- ``local-cuda`` (batch 1) and ``local-cuda-bN`` (batch N): this machine's first CUDA
  GPU, each model replayed in a captured CUDA graph and timed by CUDA events
  (``runner_torch.GraphBackend``); energy read from the GPU's own counter (NVML).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
        kind: its runtime's kind (``cpu``: ONNX Runtime; ``openvino``; ``cuda``).
        threads: ONNX Runtime intra-op threads (CPU devices).
        batch_size: the batch every model is timed and priced at.
        precisions: the precisions its table prices (``fp32``, ``fp16``, ``int8``...). A
            CPU's 16-bit layers are exported and priced FP32 (their bits simulated), as
            ONNX Runtime's CPU provider then runs them; a GPU's run FP16 (``half``).
        provider: the ONNX Runtime execution provider (CPU devices).
        int8_qdq: its INT8 models are exported in QDQ format (``export_onnx(qdq=True)``,
            what OpenVINO reads); else in ONNX Runtime's QOperator format.
        timing: how one run is timed, in words (the table's metadata keeps it).
        energy: where energy per inference comes from, in words.
    """

    name: str
    kind: str = "cpu"
    threads: int = 1
    batch_size: int = 1
    precisions: tuple[str, ...] = ("fp32", "int8")
    provider: str = "CPUExecutionProvider"
    int8_qdq: bool = False
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

    @property
    def runtime(self) -> Runtime:
        """The registered runtime of its kind."""
        return runtime_of(self.kind)

    def unavailable(self) -> str:
        """Why this machine cannot measure the device ("" when it can)."""
        return self.runtime.unavailable(self)

    def require(self) -> None:
        """Raise ``DeviceUnavailable`` where this machine cannot measure the device."""
        reason = self.unavailable()
        if reason:
            raise DeviceUnavailable(reason)

    def backend(self) -> Any:
        """The runner backend that opens, times and profiles a model on this device
        (``runner.Backend``), with the device's threads."""
        self.require()
        return self.runtime.backend(self)


class Runtime:
    """One kind of local device: what runs and times its models. Subclass it once per
    runtime and ``register_runtime`` an instance; every other module asks the device.

    Attributes:
        kind: the ``LocalDevice.kind`` it serves.
        names: the device names it answers to, in words, for messages.
        measures_energy: its backend reads energy from a counter (else energy is
            latency times a stated power).
        sparse_kernels: sparse FP32 layers get rows of this machine's CPU sparse kernels
            (PyTorch CSR), as a CPU runtime would run them; else they are priced dense.
        profiles_layers: ONNX Runtime's CPU profiler times its models layer by layer
            (``profile_layers``, the front's ``profile/`` artifacts).
    """

    kind: str = ""
    names: str = ""
    measures_energy: bool = False
    sparse_kernels: bool = False
    profiles_layers: bool = False
    #: the device names it answers to, its options as named groups
    pattern: re.Pattern[str] = re.compile(r"(?!)")

    def resolve(self, name: str) -> LocalDevice | None:
        """The device ``name`` names, or None for a name this runtime does not know."""
        m = self.pattern.fullmatch(name)
        return self.device(name, m) if m else None

    def device(self, name: str, match: re.Match[str]) -> LocalDevice:
        """The device of a name ``pattern`` matched (``match``)."""
        raise NotImplementedError

    def unavailable(self, device: LocalDevice) -> str:
        """Why this machine cannot run ``device`` ("" when it can)."""
        return ""

    def backend(self, device: LocalDevice) -> Any:
        """The runner backend of ``device`` (``runner.Backend``)."""
        raise NotImplementedError

    def deploy(self, onnx_path: Path) -> dict[str, Path]:
        """Write beside ``onnx_path`` what this runtime loads in deployment, where that
        is not the ONNX file itself; the files written, by name (none by default)."""
        return {}


#: A CPU device at one thread: what a caller times on when it names no device.
CPU_1T = LocalDevice(LOCAL_CPU)

Resolver = Callable[[str], LocalDevice | None]
_RESOLVERS: list[Resolver] = []
_RUNTIMES: dict[str, Runtime] = {}


def register_local(resolver: Resolver) -> Resolver:
    """Add a resolver: a function from a device name to its ``LocalDevice``, or None
    for a name it does not know. Later registrations are asked first."""
    _RESOLVERS.insert(0, resolver)
    return resolver


def register_runtime(runtime: Runtime) -> Runtime:
    """Register a runtime: its devices resolve by name, and a device of its kind runs
    on it. A kind registered again is replaced."""
    if not runtime.kind:
        raise ValueError(f"{type(runtime).__name__}: a runtime needs a kind")
    _RUNTIMES[runtime.kind] = runtime
    register_local(runtime.resolve)
    return runtime


def runtime_of(kind: str) -> Runtime:
    """The runtime registered for ``kind``."""
    if kind not in _RUNTIMES:
        raise ValueError(f"no runtime is registered for devices of kind {kind!r}")
    return _RUNTIMES[kind]


def local_device(name: str) -> LocalDevice | None:
    """The local device ``name`` names, or None (a stored table's device)."""
    for resolve in _RESOLVERS:
        found = resolve(name)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class Device:
    """A device a search names, resolved once from its name: where its table comes
    from, and for a device of this machine, how its models run (``local``).

    Attributes:
        name: as the config names it.
        source: ``local`` (measured here the first time: ``local``), ``derived``
            (priced from ``like``'s table) or ``stored`` (a table imported from elsewhere).
        local: the device of this machine (``source == "local"``).
        like, offload, unsupported, transfer_gbps: a derived device's table, where its
            ``unsupported`` op kinds run, and the bandwidth to it (``source == "derived"``).
    """

    name: str
    source: Literal["local", "stored", "derived"]
    local: LocalDevice | None = None
    like: str | None = None
    offload: str | None = None
    unsupported: tuple[str, ...] = ()
    transfer_gbps: float = 1.0


def resolve_device(name: str, derived: Mapping[str, Any] | None = None) -> Device:
    """The device ``name`` names: one of ``derived`` (a config's derived devices by
    name: anything with ``like``, ``offload``, ``unsupported`` and ``transfer_gbps``),
    else a local device, else a stored table's."""
    spec = (derived or {}).get(name)
    if spec is not None:
        return Device(
            name,
            "derived",
            like=spec.like,
            offload=spec.offload or spec.like,
            unsupported=tuple(spec.unsupported),
            transfer_gbps=float(spec.transfer_gbps),
        )
    here = local_device(name)
    return Device(name, "local", local=here) if here else Device(name, "stored")


def local_names() -> str:
    """The local device names, in words, for a message."""
    return ", ".join(r.names for r in _RUNTIMES.values() if r.names)


class OnnxRuntimeCpu(Runtime):
    """``local-cpu`` (1 thread) or ``local-cpu-Nt`` (N threads): ONNX Runtime's CPU
    provider on this machine."""

    kind = "cpu"
    names = "local-cpu, local-cpu-Nt (N threads)"
    sparse_kernels = True
    profiles_layers = True
    pattern = re.compile(r"local-cpu(?:-(?P<threads>[1-9]\d*)t)?")

    def device(self, name: str, match: re.Match[str]) -> LocalDevice:
        return LocalDevice(name, threads=int(match["threads"] or 1))

    def backend(self, device: LocalDevice) -> Any:
        from ..runner import OrtBackend

        return OrtBackend(device.provider, device.threads)


class OpenVinoCpu(Runtime):
    """``local-openvino`` (1 thread) or ``local-openvino-Nt`` (N threads): OpenVINO's
    CPU plugin on this machine, reading the same ONNX exports at FP32 inference
    precision (its own default on a CPU with BF16 units would be BF16). Its INT8 models
    are exported in QDQ format (``int8_qdq``), which OpenVINO fuses into its INT8
    kernels; ONNX Runtime's QOperator operators (QLinearConv, QGemm, ...) its ONNX
    frontend does not convert."""

    kind = "openvino"
    names = "local-openvino, local-openvino-Nt (N threads)"
    pattern = re.compile(r"local-openvino(?:-(?P<threads>[1-9]\d*)t)?")

    def device(self, name: str, match: re.Match[str]) -> LocalDevice:
        return LocalDevice(
            name,
            kind=self.kind,
            threads=int(match["threads"] or 1),
            precisions=("fp32", "int8"),
            provider="openvino-CPU",
            int8_qdq=True,
            timing="OpenVINO infer request (CPU plugin, latency hint, f32), wall clock",
        )

    def unavailable(self, device: LocalDevice) -> str:
        import importlib.util

        if importlib.util.find_spec("openvino") is None:
            return (
                f"{device.name} is timed with OpenVINO, which is not installed: "
                "pip install 'frontier[openvino]' (or pip install openvino)"
            )
        return ""

    def backend(self, device: LocalDevice) -> Any:
        from ..runner import OvBackend

        return OvBackend(device.threads, "f32")

    def deploy(self, onnx_path: Path) -> dict[str, Path]:
        """OpenVINO's IR (``model.xml`` and its weights ``model.bin``) beside the ONNX
        file, weights kept FP32 (``compress_to_fp16=False``: the table priced FP32)."""
        import openvino as ov

        xml = onnx_path.with_suffix(".xml")
        ov.save_model(ov.convert_model(str(onnx_path)), str(xml), compress_to_fp16=False)
        return {xml.name: xml, xml.with_suffix(".bin").name: xml.with_suffix(".bin")}


class CudaGraphs(Runtime):
    """``local-cuda`` (batch 1) or ``local-cuda-bN`` (batch N): this machine's GPU.
    INT8 is left out: no runtime Frontier times on a GPU has INT8 kernels. BF16 too: no
    plan chooses it and no export writes it (a GPU trial's training may still run under
    bf16 autocast, ``search.train.mixed_precision``; that is not a precision a table
    prices)."""

    kind = "cuda"
    names = "local-cuda, local-cuda-bN (batch N)"
    measures_energy = True
    pattern = re.compile(r"local-cuda(?:-b(?P<batch>[1-9]\d*))?")

    def device(self, name: str, match: re.Match[str]) -> LocalDevice:
        return LocalDevice(
            name,
            kind=self.kind,
            batch_size=int(match["batch"] or 1),
            precisions=("fp32", "fp16"),
            provider="torch-cuda",
            timing="CUDA graph replay (PyTorch), CUDA events",
            energy="the GPU's total-energy counter (NVML) over the timed replays",
        )

    def unavailable(self, device: LocalDevice) -> str:
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            return "PyTorch is not installed"
        if not torch.cuda.is_available():
            return (
                f"{device.name} is timed on this machine's CUDA GPU, and PyTorch sees none "
                "(torch.cuda.is_available() is False); measure a GPU elsewhere with "
                "runner_torch.py and `frontier lut import` its table under another name"
            )
        return ""

    def backend(self, device: LocalDevice) -> Any:
        from ..runner_torch import GraphBackend

        return GraphBackend("cuda")


for _runtime in (OnnxRuntimeCpu(), OpenVinoCpu(), CudaGraphs()):
    register_runtime(_runtime)
