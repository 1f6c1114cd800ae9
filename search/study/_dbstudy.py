"""A study in a database (PostgreSQL, MySQL, SQLite), held by its driver: read from
memory, written behind.

Optuna's database storage reads the whole study back and writes each parameter in a
transaction of its own: about 80 statements a trial, 8-11 trials a second against a
local PostgreSQL. A search's driver is its study's only writer (the lock below sees to
that), so it keeps the study in memory, where the sampler reads it, and writes what
changed to the database when the search makes it durable (``flush``, once a trial
ends): a trial that began and ended since the last flush is one ``create_new_trial``
with everything in it. The database holds Optuna's own schema, so
``optuna.load_study`` (or a dashboard) reads it as any study.
"""

from __future__ import annotations

import zlib
from collections.abc import Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.study._frozen import FrozenStudy
from optuna.study._study_direction import StudyDirection
from optuna.trial import FrozenTrial, TrialState


class WriteBehindStudy(BaseStorage):
    """One study of ``remote`` (its id there: ``remote_id``), mirrored in memory; every
    write lands in memory at once and in ``remote`` at ``flush``."""

    def __init__(self, remote: BaseStorage, remote_id: int) -> None:
        self.remote = remote
        self.memory = InMemoryStorage()
        name = remote.get_study_name_from_id(remote_id)
        self.study_id = self.memory.create_new_study(remote.get_study_directions(remote_id), name)
        for key, value in remote.get_study_user_attrs(remote_id).items():
            self.memory.set_study_user_attr(self.study_id, key, value)
        for key, value in remote.get_study_system_attrs(remote_id).items():
            self.memory.set_study_system_attr(self.study_id, key, value)
        self._remote_study = remote_id
        self._trials: dict[int, int] = {}  # memory trial id -> remote trial id
        for t in remote.get_all_trials(remote_id, deepcopy=False):
            self._trials[self.memory.create_new_trial(self.study_id, template_trial=t)] = (
                t._trial_id
            )
        self._pending: list[tuple[str, tuple[Any, ...]]] = []

    # --- writes: memory now, the database at flush -------------------------------
    def create_new_study(
        self, directions: Sequence[StudyDirection], study_name: str | None = None
    ) -> int:
        raise NotImplementedError("a driver's study storage holds one study")

    def delete_study(self, study_id: int) -> None:
        raise NotImplementedError("a driver's study storage holds one study")

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self.memory.set_study_user_attr(study_id, key, value)
        self._pending.append(("study_user", (key,)))

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self.memory.set_study_system_attr(study_id, key, value)
        self._pending.append(("study_system", (key,)))

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = self.memory.create_new_trial(study_id, template_trial)
        self._pending.append(("new", (trial_id,)))
        return trial_id

    def set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: BaseDistribution,
    ) -> None:
        self.memory.set_trial_param(trial_id, param_name, param_value_internal, distribution)
        self._pending.append(("param", (trial_id, param_name, param_value_internal, distribution)))

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        done = self.memory.set_trial_state_values(trial_id, state, values)
        if done:
            self._pending.append(("state", (trial_id, state)))
        return done

    def set_trial_intermediate_value(
        self, trial_id: int, step: int, intermediate_value: float
    ) -> None:
        self.memory.set_trial_intermediate_value(trial_id, step, intermediate_value)
        self._pending.append(("intermediate", (trial_id, step, intermediate_value)))

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self.memory.set_trial_user_attr(trial_id, key, value)
        self._pending.append(("trial_user", (trial_id, key)))

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self.memory.set_trial_system_attr(trial_id, key, value)
        self._pending.append(("trial_system", (trial_id, key)))

    def flush(self) -> None:
        """Write every change since the last flush to the database. A trial created
        since then is written whole, as it is now, in the order of creation (so its
        number is the same there). A trial the database already holds gets its new
        parameters, attributes and intermediate values, then its state: a trial that
        started and finished since the last flush is set running first, as Optuna
        would have. Values are read from memory at flush time, so an attribute set
        twice is written once."""
        pending, self._pending = self._pending, []
        new: set[int] = set()
        touched: dict[int, _Changes] = {}
        study_attrs: dict[tuple[str, str], None] = {}
        for op, args in pending:
            if op == "new":
                new.add(args[0])
                trial = self.memory.get_trial(args[0])
                self._trials[args[0]] = self.remote.create_new_trial(
                    self._remote_study, template_trial=trial
                )
            elif op in ("study_user", "study_system"):
                study_attrs[(op, args[0])] = None
            elif args[0] not in new:
                touched.setdefault(args[0], _Changes()).add(op, args[1:])
        for trial_id, changes in touched.items():
            self._update(trial_id, changes)
        user = self.memory.get_study_user_attrs(self.study_id)
        system = self.memory.get_study_system_attrs(self.study_id)
        for op, key in study_attrs:
            if op == "study_user":
                self.remote.set_study_user_attr(self._remote_study, key, user[key])
            else:
                self.remote.set_study_system_attr(self._remote_study, key, system[key])

    def _update(self, trial_id: int, changes: _Changes) -> None:
        remote, trial = self._trials[trial_id], self.memory.get_trial(trial_id)
        if TrialState.RUNNING in changes.states:
            self.remote.set_trial_state_values(remote, TrialState.RUNNING)
        for args in changes.params:
            self.remote.set_trial_param(remote, *args)
        for key in changes.system:
            self.remote.set_trial_system_attr(remote, key, trial.system_attrs[key])
        for key in changes.user:
            self.remote.set_trial_user_attr(remote, key, trial.user_attrs[key])
        for step, value in changes.intermediate:
            self.remote.set_trial_intermediate_value(remote, step, value)
        if trial.state.is_finished() and any(s.is_finished() for s in changes.states):
            self.remote.set_trial_state_values(remote, trial.state, trial.values)

    # --- reads: memory ------------------------------------------------------------
    def get_study_id_from_name(self, study_name: str) -> int:
        return self.memory.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self.memory.get_study_name_from_id(study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self.memory.get_study_directions(study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self.memory.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self.memory.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[FrozenStudy]:
        return self.memory.get_all_studies()

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self.memory.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self.memory.get_trial(trial_id)

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        return self.memory.get_all_trials(study_id, deepcopy, states)


class _Changes:
    """What changed in one trial since the last flush."""

    def __init__(self) -> None:
        self.states: list[TrialState] = []
        self.params: list[tuple[Any, ...]] = []
        self.user: dict[str, None] = {}
        self.system: dict[str, None] = {}
        self.intermediate: list[tuple[int, float]] = []

    def add(self, op: str, args: tuple[Any, ...]) -> None:
        if op == "state":
            self.states.append(args[0])
        elif op == "param":
            self.params.append(args)
        elif op == "trial_user":
            self.user[args[0]] = None
        elif op == "trial_system":
            self.system[args[0]] = None
        elif op == "intermediate":
            self.intermediate.append((args[0], args[1]))


def study_lock(url: str, study_name: str) -> Any:
    """Hold ``study_name``'s driver lock in the PostgreSQL database at ``url`` (a
    session advisory lock: the server drops it when the driver's connection dies, so a
    killed search can always be resumed). Returns a held lock to ``release()`` (for
    other databases one that holds nothing: nothing stops a second driver there), or
    None if another driver holds it."""
    if not url.startswith("postgresql"):
        return _NoLock()
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    conn = engine.connect()
    key = zlib.crc32(f"frontier.study:{study_name}".encode()) - 2**31
    held = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
    if not held:
        conn.close()
        engine.dispose()
        return None
    conn.commit()  # end the implicit transaction; the session lock stays
    return _Lock(conn, engine)


class _Lock:
    def __init__(self, conn: Any, engine: Any) -> None:
        self._conn, self._engine = conn, engine

    def release(self) -> None:
        self._conn.close()  # closing the session releases its advisory locks
        self._engine.dispose()


class _NoLock:
    def release(self) -> None:
        pass
