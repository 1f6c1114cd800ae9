"""A search on a Ray cluster of two nodes, started as a user starts them (`ray start`)
on two loopback addresses, one of which dies mid-search. Each node has a temp folder of
this test's own; its processes are found by it and stopped by id (not by Ray's stop command,
which would stop a user's Ray on this machine too)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from frontier.search import open_storage
from tests.services import bin_path, free_port, ray_node_processes, stop_ray_node

pytestmark = pytest.mark.slow

HEAD_IP, SECOND_IP = "127.0.0.2", "127.0.0.3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A head on 127.0.0.2 (with its dashboard, the Ray Jobs server) and a second node
    on 127.0.0.3, one CPU each, with a token of this test's own: ``address`` (the
    head's GCS) and ``jobs`` (the dashboard's URL)."""
    port, dashboard = free_port(HEAD_IP), free_port(HEAD_IP)
    # a temp folder per node, as on two machines: nodes sharing one would share the
    # runtime environments' files, and one node's cleanup would delete the other's
    temp, temp2 = tmp_path_factory.mktemp("ray"), tmp_path_factory.mktemp("ray")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {**os.environ, **auth}
    common = ["--num-cpus=1", "--disable-usage-stats"]
    head = [bin_path("ray"), "start", "--head", f"--node-ip-address={HEAD_IP}",
            f"--port={port}", "--include-dashboard=true", f"--dashboard-host={HEAD_IP}",
            f"--dashboard-port={dashboard}", f"--temp-dir={temp}", *common]  # fmt: skip
    second = [bin_path("ray"), "start", f"--address={HEAD_IP}:{port}",
              f"--node-ip-address={SECOND_IP}", f"--temp-dir={temp2}", *common]  # fmt: skip
    old = {k: os.environ.get(k) for k in auth}
    try:
        subprocess.run(head, env=env, check=True, capture_output=True, timeout=120)
        subprocess.run(second, env=env, check=True, capture_output=True, timeout=120)
        os.environ.update(auth)
        yield {
            "address": f"{HEAD_IP}:{port}",
            "jobs": f"http://{HEAD_IP}:{dashboard}",
            "second_temp": str(temp2),
        }
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        stop_ray_node(temp2)
        stop_ray_node(temp, f"{HEAD_IP}:{port}")
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _finished_on(journal: Path, ip: str) -> bool:
    import optuna

    if not journal.exists():
        return False
    storage = open_storage(str(journal))
    return any(
        t.user_attrs.get("node") == ip
        for s in optuna.get_all_study_names(storage)
        for t in optuna.load_study(study_name=s, storage=storage).trials
    )


def _lose_the_node_mid_trial(
    ip: str, temp: Path, journal: Path, stop: threading.Event, lost: list[float]
) -> None:
    """Kill every process of the node at ``ip`` (started with ``--temp-dir=temp``;
    SIGKILL: a machine that vanished) once it has finished a trial and one of its
    workers has been scoring the next for a moment."""
    import psutil

    while not stop.is_set() and not _finished_on(journal, ip):
        time.sleep(0.1)
    busy_since: dict[int, float] = {}
    while not stop.is_set():
        for p in ray_node_processes(temp):
            try:
                busy = " ".join(p.cmdline()).startswith("ray::run_trial")
            except psutil.Error:
                continue
            if busy and time.monotonic() - busy_since.setdefault(p.pid, time.monotonic()) > 0.3:
                for q in ray_node_processes(temp):
                    with contextlib.suppress(psutil.Error):
                        q.send_signal(signal.SIGKILL)
                lost.append(time.monotonic())
                return
        time.sleep(0.05)


REMOTE_TASK = '''
from frontier.experiments import build_task


def build(model="mlp"):
    """The digits task, from a module only the job's working directory has."""
    return build_task("digits", model=model)
'''


def test_a_search_submitted_as_a_ray_job_runs_the_users_task_on_both_nodes(
    write_config, workdir: Path, cluster: dict[str, str]
) -> None:
    """`ray job submit --working-dir DIR -- frontier search ...`: the config and the
    user's task module travel in the working directory; inside the job the search
    joins the cluster it runs on (RAY_ADDRESS) and ships the task to the workers."""
    job = workdir / "job"
    job.mkdir()
    (job / "job_task_mod.py").write_text(REMOTE_TASK)
    out = workdir / "out"  # the job's working directory is a copy: results go here
    write_config(
        "job/search.yaml",
        task={"name": "job_task_mod:build", "options": {"model": "mlp"}},
        objectives=[{"name": "accuracy", "options": {"steps": 300}}, "size_bytes"],
        search={"trials": 8, "population": 4, "anchors": False, "fidelity": {"rungs": ["short"]}},
        backend={"kind": "ray", "cpus_per_trial": 1},
        storage=str(out / "study.journal"),
        tracking={"uri": f"sqlite:///{out / 'mlflow.db'}"},
    )
    cmd = [bin_path("ray"), "job", "submit", "--address", cluster["jobs"],
           "--working-dir", str(job), "--",
           sys.executable, "-m", "frontier.search.cli", "search", "search.yaml", "--no-progress"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[:6000]
    assert "backend ray" in done.stdout and "8 trials (0 failed" in done.stdout
    import optuna

    storage = open_storage(str(out / "study.journal"))
    study = optuna.load_study(study_name="tiny", storage=storage)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 8
    assert {t.user_attrs.get("node") for t in complete} == {HEAD_IP, SECOND_IP}


# after the job test: this one loses the second node for good
def test_trials_spread_over_two_nodes_and_survive_losing_one(
    write_config, workdir: Path, cluster: dict[str, str]
) -> None:
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 300}}, "size_bytes"],
        constraints=["size_bytes <= 60000"],
        search={"trials": 10, "population": 4, "anchors": False, "fidelity": {"rungs": ["short"]}},
        backend={
            "kind": "ray",
            "address": cluster["address"],
            "cpus_per_trial": 1,
            "max_retries": 3,
        },
    )
    stop, lost = threading.Event(), []
    killer = threading.Thread(
        target=_lose_the_node_mid_trial,
        args=(
            SECOND_IP,
            Path(cluster["second_temp"]),
            workdir / "frontier-optuna.journal",
            stop,
            lost,
        ),
        daemon=True,
    )
    killer.start()
    # the driver in a process of its own: Ray keeps the auth token a process first read,
    # and an earlier test module's cluster had another
    cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path), "--no-progress"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        killer.join(timeout=10)
    assert done.returncode == 0, done.stderr[-3000:]
    import optuna

    storage = open_storage(str(workdir / "frontier-optuna.journal"))
    trials = optuna.load_study(study_name="tiny", storage=storage).trials
    assert lost, f"no trial ran on {SECOND_IP}: {[t.user_attrs.get('node') for t in trials]}"
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    # none lost: the budget is complete; none run twice: one trial per plan, one record
    assert len(complete) == 10, [(t.number, t.state.name) for t in trials]
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}  # PRUNED: refused repeats
    plans = [str(t.user_attrs["plan"]) for t in complete]
    assert len(set(plans)) == len(plans)
    nodes = [t.user_attrs.get("node") for t in complete]
    assert set(nodes) <= {HEAD_IP, SECOND_IP}
    assert SECOND_IP in nodes and HEAD_IP in nodes, nodes  # the trials spread over both
    # the trial the lost node was scoring finished on the head, once
    assert nodes.count(SECOND_IP) < 10
    # MLflow: one run per completed trial, each naming the node that scored it
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    runs = [r for r in client.search_runs([exp.experiment_id]) if "frontier.trial" in r.data.tags]
    assert sorted(int(r.data.tags["frontier.trial"]) for r in runs) == [t.number for t in complete]
    assert {r.data.tags.get("frontier.node") for r in runs} == set(nodes)
