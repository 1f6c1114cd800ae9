"""What a worker runs: one trial of a config, on the accelerator its slot or Ray gives
it, with the ``TrialRunner`` built once per worker process, config and accelerator."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from frontier.spaces import Accelerator

from .._interrupt import ignore_sigint
from ..config._config import Config, config_from_json
from ._accelerator import ray_gpus, resolve
from ._trials import TrialResult, TrialRunner

#: this worker process's slot (``LocalProcesses`` numbers its workers 0, 1, ...)
_WORKER_SLOT = [0]
_WORKER_CACHE: dict[tuple[str, Accelerator], TrialRunner] = {}


def set_worker_slot(counter: Any) -> None:
    """A ``--workers N`` process's initializer: take the next slot of ``counter`` (a
    shared ``multiprocessing.Value``), which picks its GPU round-robin. It ignores
    Ctrl-C, which a terminal sends to every worker too: the driver decides
    (``_interrupt``), and an idle worker interrupted would break the pool. The worker
    started with SIGINT blocked (``sigint_blocked``): a Ctrl-C pending since is dropped
    as the block lifts."""
    ignore_sigint()
    with counter.get_lock():
        _WORKER_SLOT[0] = counter.value
        counter.value += 1


@functools.lru_cache(maxsize=2)
def _worker_config(config_json: str) -> Config:
    return config_from_json(config_json, source="the worker's config")


def run_trial(
    config_json: str,
    tables: Mapping[str, Any],
    plan: dict[str, Any],
    rung: int | str,
    *,
    gpus: int | None = None,
) -> TrialResult:
    """The unit of work a worker runs: score one plan, on the accelerator this worker
    resolves (``gpus``: how many GPUs it may use; None: every one PyTorch sees). The
    TrialRunner is built once per worker process, config and accelerator, then reused."""
    config = _worker_config(config_json)
    b = config.backend
    found = resolve(
        b.accelerator,
        b.mixed_precision,
        slot=_WORKER_SLOT[0],
        gpus=gpus,
        where=f"worker {_WORKER_SLOT[0]}" if gpus is None else "this Ray task",
    )
    evaluation = _WORKER_CACHE.get((config_json, found))
    if evaluation is None:
        evaluation = TrialRunner(config, tables, accelerator=found)
        _WORKER_CACHE.clear()
        _WORKER_CACHE[(config_json, found)] = evaluation
    return evaluation.run_job(plan, rung)


def run_trial_on_ray(
    config_json: str, tables: Mapping[str, Any], plan: dict[str, Any], rung: int | str
) -> TrialResult:
    """``run_trial`` as a Ray task, on the GPU Ray assigned to it (none where
    ``backend.gpus_per_trial`` is 0): the result says which node scored it."""
    import ray

    result = run_trial(config_json, tables, plan, rung, gpus=ray_gpus())
    result.node = ray.util.get_node_ip_address()
    return result
