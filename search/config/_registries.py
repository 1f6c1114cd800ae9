"""The names a config may give a sampler (``search.sampler``) and a backend
(``backend.kind``): registries below the config, filled by ``_samplers`` and
``_backends`` (and by plugins) so that validating a config imports neither."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from frontier.spaces import Registry

#: (population size, seed) -> an Optuna sampler
SamplerFactory = Callable[[int, int], Any]
#: (config, the driver's TrialRunner) -> a Backend
BackendFactory = Callable[[Any, Any], Any]

SAMPLERS: Registry[SamplerFactory] = Registry("sampler")
BACKENDS: Registry[BackendFactory] = Registry("backend")


def register_sampler(name: str) -> Callable[[SamplerFactory], SamplerFactory]:
    """Register ``factory(population, seed) -> optuna sampler`` under ``name``, which a
    config's ``search.sampler`` may then name."""
    return SAMPLERS.register(name)


def sampler_names() -> list[str]:
    return SAMPLERS.names()


def register_backend(name: str) -> Callable[[BackendFactory], BackendFactory]:
    """Register ``factory(config, evaluation) -> Backend`` under ``name``, which a
    config's ``backend.kind`` may then name."""
    return BACKENDS.register(name)


def backend_names() -> list[str]:
    return BACKENDS.names()
