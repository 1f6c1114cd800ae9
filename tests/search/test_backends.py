"""Where trials run: the local worker processes, beside a terminal's Ctrl-C."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from frontier.search import TrialResult, TrialRunner, load_config
from frontier.search._backends import Job, LocalProcesses


def _all(backend: LocalProcesses, handles: list[Any]) -> list[tuple[Any, Any]]:
    outcomes: list[tuple[Any, Any]] = []
    while len(outcomes) < len(handles):
        seen = {h for h, _ in outcomes}
        outcomes += backend.wait([h for h in handles if h not in seen])
    return outcomes


def _ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (Linux: its SigIgn mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(line for line in status if line.startswith("SigIgn:")).split()[1]
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def test_a_terminal_s_ctrl_c_leaves_the_local_workers_working(write_config, workdir) -> None:
    """A terminal sends Ctrl-C to every worker too, and the driver decides what it means
    (``_interrupt``): a worker interrupted while idle would break the pool (its trials
    run again on a new one) and print its traceback on the user's terminal."""
    config = load_config(write_config(backend={"workers": 2}))
    evaluation = TrialRunner(config)
    job = Job(evaluation.space.plan_of({}).to_dict(), 0)
    # as at a terminal: a shell's background job would start the workers with it ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    backend = LocalProcesses(config.model_dump_json(), evaluation.tables, workers=2)
    try:
        _all(backend, [backend.submit(job), backend.submit(job)])  # both workers up, idle
        pool = backend._pool
        assert len(pool._processes) == 2
        # one worker may have run both jobs while the other still starts (imports
        # torch): a Ctrl-C in that window is not what this test is about
        deadline = time.monotonic() + 120
        while not all(map(_ignores_sigint, pool._processes)):
            assert time.monotonic() < deadline, "the workers never set up their SIGINT"
            time.sleep(0.2)
        for pid in list(pool._processes):
            os.kill(pid, signal.SIGINT)
        time.sleep(1.0)
        outcomes = _all(backend, [backend.submit(job), backend.submit(job)])
        assert backend._pool is pool  # not broken, not rebuilt
    finally:
        backend.close()
        signal.signal(signal.SIGINT, previous)
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
