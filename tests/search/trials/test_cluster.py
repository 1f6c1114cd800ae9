"""The search against real services started here, on loopback only: an MLflow tracking
server on 127.0.0.1 and a Ray head node on 127.0.0.2 (docs/design.md: Ray turns
127.0.0.1 into the machine's network address)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from frontier.search import run
from frontier.search.cli import main
from tests import services
from tests.search.config.test_plugins import PLUGIN
from tests.services import bin_path, free_port, ray_node_processes, stop_ray_node

pytestmark = pytest.mark.slow


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    with services.mlflow_server(tmp_path / "mlflow") as url:
        yield url


def test_remote_tracking_server(write_config, workdir: Path, mlflow_server: str, capsys) -> None:
    os.environ.setdefault("NO_PROXY", "127.0.0.1")
    path = write_config(constraints=["size_bytes <= 30000"])
    assert main(["search", str(path), "--trials", "8", "--tracking-uri", mlflow_server,
                 "--no-progress"]) == 0  # fmt: skip
    assert not (workdir / "mlflow.db").exists()  # everything went to the server
    capsys.readouterr()
    assert main(["pareto", "--tracking-uri", mlflow_server, "--format", "json"]) == 0
    front = json.loads(capsys.readouterr().out)
    assert front and all(r["size_bytes"] <= 30000 for r in front)
    assert main(["pick", "--tracking-uri", mlflow_server, "--best", "size_bytes",
                 "--export", "got"]) == 0  # fmt: skip
    assert (workdir / "got" / "model.onnx").stat().st_size > 0


def test_local_ray_backend(write_config, workdir: Path) -> None:
    # no --address: a Ray of its own, pinned to a loopback address, shut down after.
    # In a process of its own: Ray keeps per-process state (the auth token it read)
    # that would leak into the cluster test below.
    import secrets

    path = write_config(constraints=["size_bytes <= 30000"])
    # the file a stopped head leaves behind names a cluster that is gone: never joined
    # (a short folder: Ray's socket paths must fit in 107 bytes)
    import tempfile

    raytmp = Path(tempfile.mkdtemp(prefix="fr-ray-"))
    (raytmp / "ray").mkdir()
    (raytmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.2:{free_port('127.0.0.2')}")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_TMPDIR": str(raytmp)}  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path), "--trials", "4",
           "--backend", "ray", "--no-progress"]  # fmt: skip
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(raytmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "backend ray" in done.stderr
    assert "4 trials (0 failed" in done.stdout


def test_a_dead_ray_address_fails_fast(write_config, capsys) -> None:
    path = write_config()
    address = f"127.0.0.2:{free_port('127.0.0.2')}"  # nothing listens there
    start = time.monotonic()
    assert main(["search", str(path), "--address", address, "--no-progress"]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err
    assert f"nothing answers at {address}" in err and "Traceback" not in err


def test_a_missing_ray_token_says_how_to_give_one(
    write_config, capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = write_config()
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as head:  # something listens, as a head would
        head.bind(("127.0.0.2", 0))
        head.listen()
        address = f"127.0.0.2:{head.getsockname()[1]}"
        assert main(["search", str(path), "--address", address, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs an auth token" in err and "RAY_AUTH_TOKEN" in err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A head on 127.0.0.2 with a temp folder of this test's own, by which its processes
    are found and stopped by id (a user's own Ray on this machine survives):
    ``address`` and ``temp``."""
    port = free_port("127.0.0.2")
    temp = tmp_path_factory.mktemp("ray")
    import secrets

    # token authentication (Ray's default) with a token of this test's own, so nothing
    # is written to ~/.ray; the driver and every worker read it from the environment
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {**os.environ, **auth}
    cmd = [
        bin_path("ray"), "start", "--head", "--node-ip-address=127.0.0.2", f"--port={port}",
        "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
        f"--temp-dir={temp}",
    ]  # fmt: skip
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
    old = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    yield {"address": f"127.0.0.2:{port}", "temp": str(temp)}
    import ray

    if ray.is_initialized():
        ray.shutdown()
    stop_ray_node(temp, f"127.0.0.2:{port}")
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _kill_one_busy_worker(temp: Path, stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL one worker of the test's own head (``--temp-dir=temp``) while it scores a
    trial; another Ray's workers on this machine are never touched."""
    import psutil

    while not stop.is_set() and not killed:
        for p in ray_node_processes(temp):
            try:
                busy = " ".join(p.cmdline()).startswith("ray::run_trial")
            except psutil.Error:
                continue
            if busy:
                time.sleep(0.3)  # mid-trial, not at its first instruction
                try:
                    p.send_signal(signal.SIGKILL)
                    killed.append(p.pid)
                except psutil.NoSuchProcess:
                    continue
                return
        time.sleep(0.02)


def test_ray_cluster_search_survives_a_killed_worker(
    write_config, ray_head: dict[str, str]
) -> None:
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 200}}, "size_bytes"],
        constraints=["size_bytes <= 30000"],
    )
    stop, killed = threading.Event(), []
    killer = threading.Thread(
        target=_kill_one_busy_worker, args=(Path(ray_head["temp"]), stop, killed), daemon=True
    )
    killer.start()
    try:
        result = run(path, trials=8, address=ray_head["address"], progress=False)
    finally:
        stop.set()
        killer.join(timeout=5)
    assert killed, "no busy Ray worker was found to kill"
    trials = result.trials
    assert len(trials) == 8 and (trials.state == "complete").all()
    assert not result.pareto.empty and (result.pareto.size_bytes <= 30000).all()
    # same shape as the local backend's result
    local = run(path, trials=8, progress=False)
    assert list(local.pareto.columns) == list(result.pareto.columns)
    assert list(local.trials.columns) == list(result.trials.columns)


REMOTE_TASK = '''
from frontier.experiments import build_task


def build(model="mlp"):
    """The digits task, from a module the cluster's workers do not have."""
    return build_task("digits", model=model)
'''

#: the plugin technique of test_plugins, under a name of its own (this process may
#: have registered that one)
REMOTE_TECHNIQUE = PLUGIN.replace('"bias-off"', '"bias-off-remote"')


def test_the_users_task_and_technique_travel_to_the_cluster(
    write_config, workdir: Path, ray_head: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head's workers were started without this folder on their path: the task module
    and the plugin reach them with each task (Ray's runtime_env py_modules)."""
    code = workdir / "code"
    code.mkdir()
    (code / "remote_task_mod.py").write_text(REMOTE_TASK)
    (code / "remote_technique_mod.py").write_text(REMOTE_TECHNIQUE)
    monkeypatch.syspath_prepend(str(code))  # the driver has them; the workers do not
    path = write_config(
        plugins=["remote_technique_mod"],
        task={"name": "remote_task_mod:build", "options": {"model": "mlp"}},
        space={"techniques": {"bias-off-remote": {}}},
        objectives=["size_bytes"],
        constraints=[],
        search={"anchors": False, "seed": 1},
    )
    result = run(path, trials=4, address=ray_head["address"], progress=False)
    trials = result.study.trials
    assert [t.state.name for t in trials].count("COMPLETE") == 4, result.trials.error.tolist()
    assert any(t.user_attrs["plan"].get("techniques", {}).get("bias-off-remote") for t in trials)


def test_the_users_code_joins_a_ray_jobs_runtime_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside `ray job submit`, Ray merges the search's runtime environment with the
    job's: code in the job's working directory is not sent twice, other code goes as
    py_modules, and a job with py_modules of its own is told what to add."""
    import types

    from frontier.search import SearchError
    from frontier.search import ray_runtime_env as _runtime_env

    inside, outside = tmp_path / "job", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    mine, theirs = types.ModuleType("mine"), types.ModuleType("theirs")
    mine.__file__, theirs.__file__ = str(inside / "mine.py"), str(outside / "theirs.py")
    monkeypatch.chdir(inside)
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    assert _runtime_env([mine]) == {"py_modules": [mine.__file__]}  # no job: ship it
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_x.zip"}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    assert _runtime_env([mine]) is None
    assert _runtime_env([mine, theirs]) == {"py_modules": [theirs.__file__]}
    job["runtime_env"]["py_modules"] = ["gcs://_ray_pkg_y.zip"]
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    with pytest.raises(SearchError, match="--py-modules"):
        _runtime_env([theirs])
