"""Where trials run: in this process, in N local worker processes, or on a Ray cluster.

Every backend runs the same job (``run_trial``: score one plan at one rung) and hands
back a ``TrialResult`` or the exception that ended it. The Optuna study stays in the
driver, which asks, tells and writes MLflow; backends only move work.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import json
import multiprocessing
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .._interrupt import sigint_blocked
from ..config._config import Config
from ..config._registries import BACKENDS, backend_names, register_backend
from ..study._storage import SearchError
from ._trials import TrialResult, TrialRunner
from ._workers import run_trial, run_trial_on_ray, set_worker_slot

#: Ray must stay on loopback here; a real cluster's address comes from --address
LOOPBACK_RAY_IP = "127.0.0.2"


@dataclass(frozen=True)
class Job:
    """One unit of work: a plan (plain data) scored at one rung, or at a fidelity the
    config need not list (``"proxy"``: the sensitivity pass scores every metric there)."""

    plan: dict[str, Any]
    rung: int | str


@dataclass(frozen=True)
class Pending:
    """A job the backend is running: a new plan (its Optuna ``trial``), or the
    promotion of trial ``number`` to the job's rung."""

    job: Job
    trial: Any = None
    number: int = -1

    @property
    def promotion(self) -> bool:
        return self.trial is None


class Backend(ABC):
    """Runs jobs; ``slots`` of them at once."""

    slots: int = 1
    name: str = "backend"

    @abstractmethod
    def submit(self, job: Job) -> Any:
        """Start ``job``; returns a handle."""

    @abstractmethod
    def wait(self, handles: list[Any]) -> list[tuple[Any, TrialResult | BaseException]]:
        """Block until at least one handle is done; return each done one's outcome."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release workers."""


class InProcess(Backend):
    """Runs each job in the driver when it is submitted (the default, lowest overhead)."""

    name = "local"

    def __init__(self, evaluation: TrialRunner) -> None:
        self.evaluation = evaluation
        self._done: dict[int, TrialResult | BaseException] = {}
        self._next = 0

    def submit(self, job: Job) -> Any:
        handle, self._next = self._next, self._next + 1
        try:
            self._done[handle] = self.evaluation.run_job(job.plan, job.rung)
        except Exception as err:  # a failed trial, recorded by the driver
            self._done[handle] = err
        return handle

    def wait(self, handles: list[Any]) -> list[tuple[Any, TrialResult | BaseException]]:
        return [(h, self._done.pop(h)) for h in handles if h in self._done]


@dataclass(eq=False)  # a handle: hashed by identity
class _Attempt:
    job: Job
    future: cf.Future[TrialResult]
    tries: int = 1


class LocalProcesses(Backend):
    """N worker processes on this machine (``--workers N``). A worker that dies
    mid-trial (killed, out of memory) breaks the pool: it is rebuilt and the trials it
    was running are retried, up to ``max_retries`` times each. Each worker takes a slot
    (0, 1, ...), and with it a GPU round-robin (``backend.accelerator``)."""

    name = "local"

    def __init__(
        self, config_json: str, tables: Mapping[str, Any], workers: int, max_retries: int = 2
    ) -> None:
        self.slots = workers
        self.config_json = config_json
        self.tables = dict(tables)
        self.max_retries = max_retries
        self._futures: list[cf.Future[TrialResult]] = []
        self._pool = self._new_pool()

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")
        return cf.ProcessPoolExecutor(
            max_workers=self.slots,
            mp_context=context,
            initializer=set_worker_slot,
            initargs=(context.Value("i", 0),),
        )

    def _start(self, job: Job) -> cf.Future[TrialResult]:
        args = (self.config_json, self.tables, job.plan, job.rung)
        # the pool spawns its workers inside submit: they start with SIGINT blocked (a
        # process inherits the mask) until their initializer ignores it, so a terminal's
        # Ctrl-C while one still imports torch cannot kill it and break the pool
        with sigint_blocked():
            try:
                future = self._pool.submit(run_trial, *args)
            except cf.process.BrokenProcessPool:
                self._pool = self._new_pool()
                future = self._pool.submit(run_trial, *args)
        self._futures = [f for f in self._futures if not f.done()] + [future]
        return future

    def submit(self, job: Job) -> Any:
        return _Attempt(job, self._start(job))

    def wait(self, handles: list[Any]) -> list[tuple[Any, TrialResult | BaseException]]:
        while True:
            done, _ = cf.wait([h.future for h in handles], return_when=cf.FIRST_COMPLETED)
            out: list[tuple[Any, TrialResult | BaseException]] = []
            broken = [h for h in handles if h.future in done and _is_broken(h.future)]
            if broken:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new_pool()
            for h in handles:
                if h.future not in done and not broken:
                    continue
                if h.future in done and not _is_broken(h.future):
                    err = h.future.exception()
                    out.append((h, err if err is not None else h.future.result()))
                elif h.tries <= self.max_retries:
                    h.tries += 1  # the pool broke under it: run it again
                    h.future = self._start(h.job)
                else:
                    out.append((h, RuntimeError(f"worker died {h.tries} times running it")))
            if out:
                return out

    def close(self) -> None:
        if all(f.done() for f in self._futures):
            self._pool.shutdown(cancel_futures=True)
            return
        # a second Ctrl-C left jobs running, in workers that ignore SIGINT: end them
        processes = list(self._pool._processes.values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()


def _is_broken(future: cf.Future[Any]) -> bool:
    return future.done() and isinstance(future.exception(), cf.process.BrokenProcessPool)


class RayBackend(Backend):
    """Trials as Ray tasks. The sampler stays Optuna's, asked and told in the driver:
    that keeps ``set_constraint`` and the resumable storage working, which Ray Tune's
    OptunaSearch cannot do (no constraints hook). A worker that dies mid-trial makes
    Ray retry that task (``max_retries``); an exception the trial raises is its failure.

    Args:
        config_json, tables: what every worker needs to build its TrialRunner (once).
        address: a cluster's address (``ray://`` or ``HOST:PORT``); None starts a local
            Ray pinned to a loopback address.
        cpus_per_trial, gpus_per_trial, max_retries: per task.
        modules: the user's modules (``shipped_modules``) sent with every task.
    """

    name = "ray"

    def __init__(
        self,
        config_json: str,
        tables: Mapping[str, Any],
        *,
        address: str | None,
        cpus_per_trial: float,
        gpus_per_trial: float,
        max_retries: int,
        modules: Sequence[ModuleType] = (),
    ) -> None:
        import ray

        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            runtime_env = ray_runtime_env(modules)
            if runtime_env:  # the user's code, uploaded with the job: workers need not have it
                kwargs["runtime_env"] = runtime_env
            address = ray_address(address)
            if address:
                check_ray_address(address)
                try:
                    ray.init(address=address, **kwargs)
                except ConnectionError as err:
                    raise SearchError(
                        f"Ray: cannot join the cluster at {address} ({err}). A head with "
                        f"token authentication (Ray's default) needs its token here: "
                        f"{TOKEN_HINT}"
                    ) from None
            else:  # "local": never the cluster a stale ray_current_cluster file names
                ray.init(address="local", _node_ip_address=LOOPBACK_RAY_IP, **kwargs)
        self._remote = ray.remote(
            num_cpus=cpus_per_trial, num_gpus=gpus_per_trial, max_retries=max_retries
        )(run_trial_on_ray)
        self._config = config_json
        self._tables: Any = ray.put(dict(tables))
        total = ray.cluster_resources().get("CPU", 1.0)
        self.slots = max(1, int(total // cpus_per_trial))

    def submit(self, job: Job) -> Any:
        return self._remote.remote(self._config, self._tables, job.plan, job.rung)

    def wait(self, handles: list[Any]) -> list[tuple[Any, TrialResult | BaseException]]:
        done, _ = self._ray.wait(handles, num_returns=1)
        out: list[tuple[Any, TrialResult | BaseException]] = []
        for h in done:
            try:
                out.append((h, self._ray.get(h)))
            except Exception as err:
                out.append((h, err))
        return out

    def close(self) -> None:
        self._ray.shutdown()


#: how a driver gets a token-authenticated cluster's token
TOKEN_HINT = (
    "set RAY_AUTH_TOKEN to the head's token (`ray get-auth-token` there), or copy the "
    "head's ~/.ray/auth_token to this machine (or point RAY_AUTH_TOKEN_PATH at it); "
    "RAY_AUTH_MODE=disabled for a cluster without authentication"
)

#: seconds to wait for a cluster's head to accept a connection
CONNECT_TIMEOUT_S = 10.0


def ray_address(address: str | None) -> str | None:
    """The cluster to join: ``address``, else ``$RAY_ADDRESS``; None (or ``local``)
    starts a Ray of the search's own."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    return None if address in (None, "local") else address


def check_ray_address(address: str) -> None:
    """Fail in seconds, with what to do, where joining the cluster at ``address``
    would retry for minutes: nothing listens there, or the cluster wants a token this
    machine does not have."""
    import socket

    if address == "auto":
        return  # Ray finds the cluster this machine started
    client = address.startswith("ray://")
    hostport = address.removeprefix("ray://").rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        host, port = hostport, "10001" if client else "6379"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise SearchError(
            f"Ray: nothing answers at {address} ({reason}); start the head there (`ray start "
            "--head`) or fix --address"
        ) from None
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    if os.environ["RAY_AUTH_MODE"].lower() != "token":
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    found = (
        os.environ.get("RAY_AUTH_TOKEN")
        or (path and Path(path).expanduser().is_file())
        or (Path.home() / ".ray" / "auth_token").is_file()
    )
    if not found:
        raise SearchError(f"Ray: the cluster at {address} needs an auth token: {TOKEN_HINT}")


def build_backend(config: Config, evaluation: TrialRunner) -> Backend:
    """The backend ``config.backend.kind`` names, for a search scoring with
    ``evaluation``."""
    factory = BACKENDS.get(config.backend.kind)
    if factory is None:
        raise ValueError(
            f"unknown backend {config.backend.kind!r}; known: {', '.join(backend_names())}"
        )
    return factory(config, evaluation)


@register_backend("local")
def _local(config: Config, evaluation: TrialRunner) -> Backend:
    b = config.backend
    if b.workers > 1:
        return LocalProcesses(config.model_dump_json(), evaluation.tables, b.workers, b.max_retries)
    return InProcess(evaluation)


@register_backend("ray")
def _ray(config: Config, evaluation: TrialRunner) -> Backend:
    b = config.backend
    return RayBackend(
        config.model_dump_json(),
        evaluation.tables,
        address=b.address,
        cpus_per_trial=b.cpus_per_trial,
        gpus_per_trial=b.gpus_per_trial,
        max_retries=b.max_retries,
        modules=shipped_modules(config),
    )


def shipped_modules(config: Config) -> list[ModuleType]:
    """The user's own code a Ray worker needs, to upload with each task: the top-level
    module or package of every ``plugins`` entry and of the task's ``module:builder``.
    Installed code (site-packages) is the cluster's environment's to have, and is not
    sent."""
    names = list(config.plugins)
    if ":" in config.task.name:
        names.append(config.task.name.partition(":")[0])
    out: list[ModuleType] = []
    for name in dict.fromkeys(n.split(".")[0] for n in names):
        module = importlib.import_module(name)
        where = str(getattr(module, "__file__", None) or "")
        installed = not where or any(p in Path(where).parts for p in INSTALLED)
        if not installed and name != "frontier":
            out.append(module)
    return out


def ray_runtime_env(modules: Sequence[ModuleType]) -> dict[str, Any] | None:
    """The runtime environment that ships ``modules`` to the workers. Inside a Ray job
    (``ray job submit``) Ray merges it with the job's own: modules inside the job's
    working directory travel with it already, and a job that sets ``py_modules`` itself
    must list the rest there (Ray refuses two ``py_modules``)."""
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    env = job.get("runtime_env") or {}
    cwd = Path.cwd()
    sources = [
        _source(m)
        for m in modules
        if not (env.get("working_dir") and Path(_source(m)).resolve().is_relative_to(cwd))
    ]
    if not sources:
        return None
    if env.get("py_modules"):
        raise SearchError(
            "this Ray job sets its own py_modules; add the search's own code to them "
            f"(ray job submit --py-modules {' --py-modules '.join(sources)} ...) or "
            "install it on the nodes"
        )
    return {"py_modules": sources}


def _source(module: ModuleType) -> str:
    """A module's folder (a package) or file (one module), as Ray uploads it."""
    paths = list(getattr(module, "__path__", []))
    return str(paths[0] if paths else module.__file__)


#: path parts of installed code, which a cluster's own environment provides
INSTALLED = ("site-packages", "dist-packages")
