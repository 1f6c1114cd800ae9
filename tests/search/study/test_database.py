"""The search on a real database: PostgreSQL (started here, on loopback) as the Optuna
storage and as the MLflow tracking server's backend store, the set-up of a team whose
drivers and workers do not share a disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mlflow import MlflowClient

from frontier.search import open_storage, run
from frontier.search.cli import main
from tests import services

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    if services.postgres_bindir() is None:
        if os.environ.get(services.REQUIRE_POSTGRES):
            pytest.fail("PostgreSQL is required here but initdb was not found")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    with services.postgres() as url:
        yield url


@pytest.fixture(scope="module")
def tracking(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An MLflow tracking server whose runs live in PostgreSQL."""
    backend = services.create_database(pg_server, "mlflow")
    with services.mlflow_server(tmp_path_factory.mktemp("mlflow"), backend) as url:
        yield url


def _complete(storage: str, study_name: str | None = None) -> list[tuple[int, dict]]:
    import optuna
    from optuna.trial import TrialState

    opened = open_storage(storage)
    names = optuna.get_all_study_names(opened)
    if not names:
        return []
    study = optuna.load_study(study_name=study_name or names[0], storage=opened)
    return [(t.number, t.params) for t in study.get_trials(states=(TrialState.COMPLETE,))]


def _trial_runs(tracking: str, experiment: str) -> list[Any]:
    client = MlflowClient(tracking_uri=tracking)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r}"
    return [
        r
        for r in client.search_runs([exp.experiment_id], max_results=1000)
        if "frontier.trial" in r.data.tags
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "NO_PROXY": "127.0.0.1"}


def test_a_killed_driver_resumes_from_postgresql(
    write_config, pg_server: str, tracking: str, capsys
) -> None:
    storage = services.create_database(pg_server, "study_resume")
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 150}}, "size_bytes"],
        # every trial fine-tunes (a proxy-rung trial takes milliseconds: the whole budget
        # would finish between two looks at the database)
        search={"anchors": False, "population": 10, "fidelity": {"rungs": ["short"]}},
        storage=storage,
        tracking={"uri": tracking},
    )
    cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path), "--no-progress"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(_complete(storage)) < 4:
        time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    before = _complete(storage)
    assert 4 <= len(before) < 12

    result = run(path, resume=True, progress=False)
    after = [(t.number, t.params) for t in result.study.trials if t.state.name == "COMPLETE"]
    assert len(after) == 12  # the budget, no more
    assert before == after[: len(before)]  # nothing completed was lost or run again
    plans = {
        json.dumps(t.user_attrs["plan"], sort_keys=True)
        for t in result.study.trials
        if t.state.name == "COMPLETE"
    }
    assert len(plans) == 12
    # one finished run per trial in the PostgreSQL-backed tracking server, none RUNNING
    runs = _trial_runs(tracking, "tiny")
    numbers = [int(r.data.tags["frontier.trial"]) for r in runs]
    assert len(numbers) == len(set(numbers))
    assert {n for n, _ in after} <= set(numbers)
    assert {r.info.status for r in runs} <= {"FINISHED", "FAILED"}
    capsys.readouterr()
    assert main(["pareto", "--tracking-uri", tracking, "--experiment", "tiny",
                 "--format", "json"]) == 0  # fmt: skip
    logged = {r["trial"] for r in json.loads(capsys.readouterr().out)}
    assert logged == set(result.pareto.trial)


def test_two_searches_share_one_database_without_mixing(
    write_config, pg_server: str, tracking: str
) -> None:
    """Two drivers of different configs at once, one study database, one tracking
    server: each study holds its own trials, from its own space, and each MLflow
    experiment its own runs."""
    storage = services.create_database(pg_server, "study_shared")
    spaces = {
        "alpha": {"prune_ratios": [0.0, 0.5, 0.75], "weight_bits": [8, 32]},
        "beta": {"prune_ratios": [0.0, 0.25], "weight_bits": [4, 32]},
    }
    procs = {}
    for name, space in spaces.items():
        path = write_config(
            f"{name}.yaml",
            name=name,
            space={**space, "act_bits": [32], "round_to": 8},
            storage=storage,
            tracking={"uri": tracking},
            search={"trials": 8, "anchors": False},
        )
        cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path), "--no-progress"]
        procs[name] = subprocess.Popen(
            cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {err[-3000:]}"
        assert "8 trials (0 failed" in out, out[-2000:]

    import optuna

    opened = open_storage(storage)
    assert sorted(optuna.get_all_study_names(opened)) == ["alpha", "beta"]
    for name, space in spaces.items():
        study = optuna.load_study(study_name=name, storage=opened)
        trials = [t for t in study.trials if t.state.name == "COMPLETE"]
        assert len(trials) == 8
        # the rest are plans the driver refused as repeats of its own earlier ones
        assert {t.state.name for t in study.trials} <= {"COMPLETE", "PRUNED"}
        allowed = {*space["prune_ratios"], *space["weight_bits"]}
        seen = {v for t in trials for v in t.params.values()}
        assert seen <= allowed, (name, seen - allowed)
        runs = _trial_runs(tracking, name)
        assert sorted(int(r.data.tags["frontier.trial"]) for r in runs) == [
            t.number for t in trials
        ]
        parents = {r.data.tags.get("mlflow.parentRunId") for r in runs}
        assert len(parents) == 1
        parent = MlflowClient(tracking_uri=tracking).get_run(parents.pop())
        assert parent.data.tags["frontier.study"] == name


def _snapshot(trials: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (t.number, t.state.name, t.params, t.values, t.user_attrs, t.system_attrs) for t in trials
    ]


def test_the_database_holds_the_study_the_driver_held(write_config, workdir) -> None:
    """The driver reads its study from memory and writes behind: what lands in the
    database (read back as any Optuna study) is the study the search ended with, its
    promotions, constraints and refused repeats included. SQLite, so it runs anywhere."""
    import optuna

    storage = f"sqlite:///{workdir / 'study.db'}"
    path = write_config(storage=storage, search={"trials": 10, "population": 4})
    result = run(path, progress=False)
    stored = optuna.load_study(study_name=result.study_name, storage=storage)
    assert _snapshot(stored.trials) == _snapshot(result.study.trials)
    assert stored.user_attrs == result.study.user_attrs
    assert any(k.startswith("frontier.rungs.") for k in stored.user_attrs)  # promotions
    resumed = run(path, resume=True, trials=14, progress=False)
    stored = optuna.load_study(study_name=result.study_name, storage=storage)
    assert _snapshot(stored.trials) == _snapshot(resumed.study.trials)
    assert sum(t.state.name == "COMPLETE" for t in stored.trials) == 14


def test_a_second_driver_on_a_held_study_is_refused(write_config, pg_server: str) -> None:
    from frontier.search import SearchError, StudyStore

    storage = services.create_database(pg_server, "study_locked")
    path = write_config(storage=storage, search={"trials": 2})
    run(path, progress=False)
    first = StudyStore(storage)
    first.open("tiny", ["maximize", "minimize"], None, resume=True)
    try:
        with pytest.raises(SearchError, match="another frontier search is running study"):
            run(path, resume=True, trials=4, progress=False)
    finally:
        first.close()
    resumed = run(path, resume=True, trials=4, progress=False)  # the lock went with it
    assert sum(t.state.name == "COMPLETE" for t in resumed.study.trials) == 4


def test_a_new_study_beside_an_unfinished_one_is_refused_until_asked_for(tmp_path) -> None:
    import optuna

    from frontier.search import SearchError
    from frontier.search.study._storage import FINISHED_ATTR, StudyStore

    url = str(tmp_path / "study.journal")
    store = StudyStore(url)
    first = store.open(
        "tiny", ["maximize"], optuna.samplers.RandomSampler(0), resume=False, trials=5
    )
    first.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    store.flush()
    with pytest.raises(SearchError, match=r"study 'tiny' of config 'tiny' .* stopped after 2 of 5 "
                       r"trials: --resume continues it, --new starts another beside it"):  # fmt: skip
        store.open("tiny", ["maximize"], None, resume=False, trials=5)
    assert store.open("tiny", ["maximize"], None, resume=True).study_name == "tiny"
    second = store.open("tiny", ["maximize"], None, resume=False, new=True, trials=5)
    assert second.study_name == "tiny-2"
    second.set_user_attr(FINISHED_ATTR, True)
    store.flush()
    # the latest study finished: another starts as before, no question asked
    assert store.open("tiny", ["maximize"], None, resume=False, trials=5).study_name == "tiny-3"
    store.close()
