"""Devices measured on this machine, resolved by name through a registry.

A device a search names is either a stored table (measured elsewhere, imported) or a
*local* device that Frontier measures here the first time it is used. Which names are
local, and how they are timed, is asked of the registered resolvers, so a new kind of
local device (a GPU execution provider with its own timer) is one ``register_local``
call, not a new branch wherever a device name is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

LOCAL_CPU = "local-cpu"


@dataclass(frozen=True)
class LocalDevice:
    """A device timed on this machine by the timing protocol.

    Attributes:
        name: as configs and tables name it (``local-cpu``, ``local-cpu-2t``).
        threads: ONNX Runtime intra-op threads.
        provider: the ONNX Runtime execution provider.
    """

    name: str
    threads: int
    provider: str = "CPUExecutionProvider"


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


def local_threads(device: str) -> int | None:
    """The threads of a device measured on this machine; None for any other device."""
    found = local_device(device)
    return found.threads if found is not None else None


_LOCAL_CPU = re.compile(r"local-cpu(?:-(?P<threads>[1-9]\d*)t)?")


@register_local
def _local_cpu(name: str) -> LocalDevice | None:
    """``local-cpu`` (1 thread) or ``local-cpu-Nt`` (N threads): this machine's CPU."""
    m = _LOCAL_CPU.fullmatch(name)
    return LocalDevice(name, int(m["threads"] or 1)) if m else None
