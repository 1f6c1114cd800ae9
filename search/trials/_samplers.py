"""Samplers by name: the names ``search.sampler`` accepts, each a factory of an Optuna
sampler object. ``frontier.search.run(config, sampler=...)`` takes any sampler object
instead; ``register_sampler`` adds a name."""

from __future__ import annotations

from typing import Any

from frontier.spaces import SearchSpace

from .._log import logger
from ..config._registries import SAMPLERS, register_sampler, sampler_names
from ..front._front import plan_key
from ._surrogate import SurrogateSampler

#: a sampler that proposes this many plans in a row that were already run gets one
#: seeded random plan instead; this many random draws that are all repeats mean the
#: space is exhausted
MAX_REPEATS = 3
MAX_RANDOM_DRAWS = 100
#: the trial attribute that marks a refused repeat (recorded as PRUNED)
DUPLICATE_ATTR = "frontier.duplicate_of"


def build_sampler(name: str, *, population: int, seed: int) -> Any:
    """The sampler ``name`` (see ``sampler_names()``), seeded."""
    factory = SAMPLERS.get(name)
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


@register_sampler("surrogate")
def _surrogate(population: int, seed: int) -> Any:
    return SurrogateSampler(seed=seed)


@register_sampler("random")
def _random(population: int, seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _grid_sampler_class() -> Any:
    import optuna

    class _Grid(optuna.samplers.BruteForceSampler):
        """Optuna's brute-force sampler in an ask-and-tell loop: where it would stop the
        study (``Study.stop`` works only inside ``optimize``) it says it is exhausted."""

        exhausted = False

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            try:
                super().after_trial(study, trial, state, values)
            except RuntimeError as err:  # its study.stop(), outside optimize
                if "Study.stop" not in str(err):
                    raise
                self.exhausted = True

    return _Grid


def GridSampler(*, seed: int) -> Any:
    """Every combination once (``grid``); ``.exhausted`` once all are tried."""
    import warnings

    import optuna

    with warnings.catch_warnings():  # experimental since Optuna 3.1, and stated so here
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _grid_sampler_class()(seed=seed)


@register_sampler("grid")
def _grid(population: int, seed: int) -> Any:
    """Every combination once, in a seeded order (Optuna's brute-force sampler): for a
    space small enough to enumerate, such as a pipeline's placements and a few choices."""
    return GridSampler(seed=seed)


def ask_unique(
    study: Any, space: SearchSpace, seen: set[str], seed: int
) -> tuple[Any, dict[str, Any]] | None:
    """Ask ``study`` for a trial whose plan's key (``plan_key``) is not in ``seen``:
    ``(trial, plan data)``, or None if none turned up. A sampler that repeats itself (a
    resumed first generation, a converged TPE) has each repeat told as PRUNED and marked
    ``frontier.duplicate_of``, never run; after ``MAX_REPEATS`` in a row, a random sampler
    seeded by ``seed`` and the study's length draws instead."""
    from optuna.samplers import RandomSampler
    from optuna.trial import TrialState

    sampler = study.sampler
    try:
        for repeats in range(MAX_REPEATS + MAX_RANDOM_DRAWS):
            if repeats == MAX_REPEATS:
                study.sampler = RandomSampler(seed=seed + len(study.trials))
            trial = study.ask()
            plan = space.suggest(trial).to_dict()
            key = plan_key(plan)
            if key not in seen:
                trial.set_user_attr("plan", plan)
                return trial, plan
            trial.set_user_attr(DUPLICATE_ATTR, key)
            study.tell(trial, state=TrialState.PRUNED)
        logger.info(
            "the space seems exhausted: %d random plans were all tried already (%d distinct "
            "plans)", MAX_RANDOM_DRAWS, len(seen),
        )  # fmt: skip
        return None
    finally:
        study.sampler = sampler
