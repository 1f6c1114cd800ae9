"""Samplers by name: the names ``search.sampler`` accepts, each a factory of an Optuna
sampler object. ``frontier.search.run(config, sampler=...)`` takes any sampler object
instead; ``register_sampler`` adds a name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from frontier.spaces import Registry

#: (population size, seed) -> an Optuna sampler
SamplerFactory = Callable[[int, int], Any]

_SAMPLERS: Registry[SamplerFactory] = Registry("sampler")


def register_sampler(name: str) -> Callable[[SamplerFactory], SamplerFactory]:
    """Register ``factory(population, seed) -> optuna sampler`` under ``name``, which a
    config's ``search.sampler`` may then name."""
    return _SAMPLERS.register(name)


def sampler_names() -> list[str]:
    return _SAMPLERS.names()


def build_sampler(name: str, *, population: int, seed: int) -> Any:
    """The sampler ``name`` (see ``sampler_names()``), seeded."""
    factory = _SAMPLERS.get(name)
    if factory is None:
        raise ValueError(f"unknown sampler {name!r}; known: {', '.join(sampler_names())}")
    return factory(population, seed)


@register_sampler("nsga2")
def _nsga2(population: int, seed: int) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)


@register_sampler("tpe")
def _tpe(population: int, seed: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed, multivariate=True)


@register_sampler("gp")
def _gp(population: int, seed: int) -> Any:
    import optuna

    return optuna.samplers.GPSampler(seed=seed)


@register_sampler("random")
def _random(population: int, seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)
