"""Throwaway services on loopback for the tests and benchmarks: a PostgreSQL server and
an MLflow tracking server, each started in a folder of its own and stopped (and its
folder removed) when the ``with`` block ends. Nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: set by .ci/run, which installs PostgreSQL: a missing server fails instead of skipping
REQUIRE_POSTGRES = "FRONTIER_REQUIRE_POSTGRES"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def bin_path(name: str) -> str:
    """A console script of this environment, else one on PATH."""
    found = Path(sys.executable).parent / name
    return str(found) if found.exists() else (shutil.which(name) or name)


def postgres_bindir() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``): on PATH, else
    Debian's ``/usr/lib/postgresql/VERSION/bin`` (newest version); None when absent."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def _as_server_user() -> tuple[list[str], int | None]:
    """PostgreSQL refuses to run as root: as root, run its programs as the ``postgres``
    user (Debian's package creates it), else as ``nobody``."""
    if os.geteuid() != 0:
        return [], None
    import pwd

    for user in ("postgres", "nobody"):
        try:
            return ["runuser", "-u", user, "--"], pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
    raise RuntimeError("running as root with neither a postgres nor a nobody user")


@contextmanager
def postgres(*, fsync: bool = False) -> Iterator[str]:
    """A fresh PostgreSQL server on 127.0.0.1 (trust authentication, user ``frontier``);
    yields its URL without a database (``postgresql://frontier@127.0.0.1:PORT``).
    ``fsync=False`` trades crash safety of the server itself for speed (the tests kill
    drivers, never the database)."""
    bindir = postgres_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL's initdb was not found (apt-get install postgresql)")
    prefix, uid = _as_server_user()
    # a short folder under /tmp: the server's user must reach it (pytest's tmp_path is
    # private to root), and its socket path must fit in 107 bytes
    folder = Path(tempfile.mkdtemp(prefix="fr-pg-"))
    if uid is not None:
        os.chown(folder, uid, -1)
    data, port = folder / "data", free_port("127.0.0.1")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        subprocess.run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "frontier",
             "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, env=env, timeout=120,
        )  # fmt: skip
        options = f"-h 127.0.0.1 -p {port} -k {folder} -c max_connections=200"
        if not fsync:
            options += " -c fsync=off -c synchronous_commit=off"
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
             "-l", str(folder / "server.log"), "-w", "-t", "60", "start"],
            check=True, capture_output=True, env=env, timeout=120,
        )  # fmt: skip
        try:
            yield f"postgresql://frontier@127.0.0.1:{port}"
        finally:
            subprocess.run(
                [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True, env=env, timeout=60,
            )  # fmt: skip
    except subprocess.CalledProcessError as err:
        log = folder / "server.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(
            f"PostgreSQL did not start: {err.stderr.decode()[-2000:]}{tail}"
        ) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def create_database(server: str, name: str) -> str:
    """A new database ``name`` on ``server`` (a URL from ``postgres``); its URL."""
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


@contextmanager
def mlflow_server(folder: Path, backend_store_uri: str | None = None) -> Iterator[str]:
    """An MLflow tracking server on 127.0.0.1 with its artifacts under ``folder`` and its
    runs in ``backend_store_uri`` (default: an SQLite file in ``folder``); yields its URL."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port("127.0.0.1")
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    proc = subprocess.Popen(
        [
            bin_path("mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
            "--backend-store-uri", backend_store_uri or f"sqlite:///{folder / 'server.db'}",
            "--artifacts-destination", str(folder / "server-artifacts"),
            "--workers", "1",
        ],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"mlflow server exited: {err[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("mlflow server did not start in 120 s")
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def ray_node_processes(temp_dir: Path, address: str | None = None) -> list:
    """Every process of the Ray node this test started with ``ray start
    --temp-dir=temp_dir``: its daemons name that folder (a test's own) in their command
    lines, the head's client server names its ``address``, and its workers are their
    children. Nothing of another Ray on this machine matches."""
    import psutil

    marks = [str(temp_dir)] + ([f"--address={address}"] if address else [])
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if p.pid != os.getpid() and any(m in cmdline for m in marks):
            found[p.pid] = p
            try:
                found.update({c.pid: c for c in p.children(recursive=True)})
            except psutil.Error:
                continue
    return list(found.values())


def stop_ray_node(temp_dir: Path, address: str | None = None, *, timeout_s: float = 5) -> int:
    """Stop the node ``ray_node_processes`` finds, by process id (SIGTERM, then SIGKILL
    what is left after ``timeout_s``), never with Ray's own stop command, which stops every Ray
    node of the machine, a user's own too. Returns how many processes it signalled."""
    import psutil

    procs = ray_node_processes(temp_dir, address)
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=timeout_s)
    return len(procs)
