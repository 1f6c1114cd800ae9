"""Local devices are resolved through one registry: the built-in CPU names, and any
resolver a user adds."""

import pytest

from frontier.latency_models import (
    LocalDevice,
    _devices,
    local_device,
    local_threads,
    register_local,
)


@pytest.mark.parametrize(
    ("name", "threads"),
    [("local-cpu", 1), ("local-cpu-4t", 4), ("local-cpu-0t", None), ("pi4", None)],
    ids=["one-thread", "four-threads", "zero-threads", "stored-table"],
)
def test_builtin_cpu_names(name: str, threads: int | None) -> None:
    assert local_threads(name) == threads


def test_a_registered_resolver_is_asked_first(monkeypatch) -> None:
    monkeypatch.setattr(_devices, "_RESOLVERS", list(_devices._RESOLVERS))
    gpu = LocalDevice("local-gpu", threads=1, provider="CUDAExecutionProvider")
    register_local(lambda name: gpu if name == "local-gpu" else None)
    assert local_device("local-gpu") == gpu
    assert local_device("local-cpu") == LocalDevice("local-cpu", 1)
