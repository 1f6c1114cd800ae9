"""Where trials run: the local worker processes, beside a terminal's Ctrl-C."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from frontier.search import TrialResult, TrialRunner, load_config
from frontier.search.trials._backends import Job, LocalProcesses


def _all(backend: LocalProcesses, handles: list[Any]) -> list[tuple[Any, Any]]:
    outcomes: list[tuple[Any, Any]] = []
    while len(outcomes) < len(handles):
        seen = {h for h, _ in outcomes}
        outcomes += backend.wait([h for h in handles if h not in seen])
    return outcomes


def _holds_off_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores or blocks SIGINT (Linux: /proc's masks)."""
    with open(f"/proc/{pid}/status") as status:
        masks = dict(line.split(":", 1) for line in status if line.startswith("Sig"))
    bit = 1 << (signal.SIGINT - 1)
    return any(int(masks[m].strip(), 16) & bit for m in ("SigIgn", "SigBlk"))


@pytest.mark.usefixtures("sigint_as_at_a_terminal")  # workers start as at a terminal
def test_a_terminal_s_ctrl_c_leaves_the_local_workers_working(write_config, workdir) -> None:
    """A terminal sends Ctrl-C to every worker too, and the driver decides what it means
    (``_interrupt``): a worker interrupted would break the pool (its trials run again on
    a new one) and print its traceback on the user's terminal. Both Ctrl-Cs land while
    the workers may still be starting (importing torch) and once they are idle."""
    config = load_config(write_config(backend={"workers": 2}))
    evaluation = TrialRunner(config)
    job = Job(evaluation.space.plan_of({}).to_dict(), 0)
    backend = LocalProcesses(config.model_dump_json(), evaluation.tables, workers=2)
    try:
        handles = [backend.submit(job), backend.submit(job)]
        pool = backend._pool
        assert len(pool._processes) == 2  # spawned, their imports under way
        for pid in list(pool._processes):
            assert _holds_off_sigint(pid)
            os.kill(pid, signal.SIGINT)
        _all(backend, handles)
        assert backend._pool is pool  # not broken, not rebuilt
        for pid in list(pool._processes):
            assert _holds_off_sigint(pid)
            os.kill(pid, signal.SIGINT)  # idle now
        time.sleep(1.0)
        outcomes = _all(backend, [backend.submit(job), backend.submit(job)])
        assert backend._pool is pool
    finally:
        backend.close()
    assert all(isinstance(o, TrialResult) for _, o in outcomes)


def test_closed_with_a_job_running_it_ends_that_worker(write_config, workdir) -> None:
    """After a second Ctrl-C the search stops at once: a job still running in a worker
    (which ignores SIGINT) is ended, not waited for; ``--resume`` runs it again."""
    slow = [{"name": "accuracy", "options": {"steps": 3000}}, "size_bytes"]
    config = load_config(write_config(objectives=slow, backend={"workers": 1}))
    evaluation = TrialRunner(config)
    job = Job(evaluation.space.plan_of({}).to_dict(), 1)
    backend = LocalProcesses(config.model_dump_json(), evaluation.tables, workers=1)
    _all(backend, [backend.submit(Job(job.plan, 0))])  # the worker is up
    handle = backend.submit(job)
    time.sleep(1.0)  # it runs
    backend.close()
    assert not handle.future.done() or handle.future.exception() is not None
