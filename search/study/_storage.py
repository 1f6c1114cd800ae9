"""Where a search's study lives: the Optuna storage (a journal file or a database), the
driver's lock on it, its buffered writes, and rebuilding the records on resume.

Over 500 lines: where a study is kept (a buffered journal or a database), the locks that
make the driver its one writer, what a full disk may leave, and the trial records
written and read back must agree on one durability rule.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._log import logger
from ..config._config import Config
from ..front._front import TrialRecord

#: the study's own attributes (Optuna user attrs, not MLflow tags)
CONFIG_ATTR = "frontier.config_name"
BASELINE_ATTR = "frontier.baseline"
INTERRUPTED_ATTR = "frontier.interrupted"
BUDGET_ATTR = "frontier.trials"  # the trial budget a study was started or resumed with
FINISHED_ATTR = "frontier.finished"  # set when a run reached its budget
GENERATION_ATTR = "frontier.generation"
PROMOTION_ATTR = "frontier.promotion"  # what the promotion strategy learnt
RUNG_ATTR = "frontier.rungs."  # + trial number: {rung: values}
RUN_ATTR = "frontier.mlflow_run_id"  # the MLflow parent run, reopened on resume


class SearchError(RuntimeError):
    """A search cannot start or resume; the message says why and what to do."""


class DiskFull(SearchError):
    """A write of the search found no space left: the search stops as an interruption
    (what was written before stays whole) and ``--resume`` continues once there is
    space."""

    def __init__(self, path: Path | str, what: str) -> None:
        super().__init__(
            f"no space left on the device holding {path} ({what}): the search stopped, "
            "and every trial it finished before is saved; free some space, then run the "
            "same command with --resume to continue"
        )
        self.path = Path(path)


def disk_full(err: BaseException) -> bool:
    """``err`` says the file system is full (or the user's quota is): an OSError, or
    SQLite's own words for it (MLflow's store raises it wrapped twice)."""
    import errno

    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return "database or disk is full" in str(err)


def repair_journal(path: Path) -> int:
    """Drop a partly written last entry of the journal at ``path`` (a write cut short
    by a full disk or a kill): Optuna skips it when reading, but the next append would
    join it to a whole entry and make the journal unreadable. Returns the bytes
    dropped. Only its one writer, holding it, may call this."""
    import os

    if not path.is_file():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb") as f:
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return 0
        # the last newline: read backwards in blocks
        end, block = size, 1 << 16
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            chunk = f.read(end - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
    os.truncate(path, keep)
    return size - keep


def writable(folder: Path, what: str) -> Path:
    """``folder``, created if missing, once a file could be written in it; else a
    ``SearchError`` naming the folder and what needs it (checked before long work, so a
    read-only place fails in seconds, not after the work)."""
    import tempfile

    folder = Path(folder).expanduser()
    files = (p for p in (folder, *folder.parents) if p.exists() and not p.is_dir())
    not_a_folder = next(files, None)
    if not_a_folder is not None:
        raise SearchError(
            f"cannot write {what} in {folder}: {not_a_folder} is a file, not a folder; "
            "give a folder's path"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise SearchError(
            f"cannot write {what} in {folder} ({reason}); run from a folder you can write "
            "to, or point it elsewhere"
        ) from None
    return folder


def writable_file(path: Path, what: str) -> Path:
    """``path``, once a file could be written there: not a folder, and in a folder
    ``writable`` accepts; else a ``SearchError`` naming the path and what needs it."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise SearchError(f"cannot write {what} to {path}: it is a folder; give a file's path")
    writable(path.parent, what)
    return path


def search_folders(config: Config) -> dict[str, Path]:
    """The folders a search writes to, by what it writes there: the study journal, the
    MLflow database and the baseline cache."""
    from frontier.experiments import cache_dir

    folders: dict[str, Path] = {}
    storage = config.storage or default_storage(config)
    if not is_database(storage):
        folders["the study journal (--storage; default: beside the MLflow database)"] = Path(
            storage.removeprefix("journal:")
        ).parent
    uri = config.tracking.uri
    if uri.startswith("sqlite:///"):
        folders["the MLflow database (--tracking-uri)"] = Path(
            uri.removeprefix("sqlite:///")
        ).parent
    folders["cached baselines ($FRONTIER_CACHE_DIR)"] = cache_dir()
    return folders


def default_storage(config: Config) -> str:
    """A journal file beside the MLflow database (or in the working directory when
    tracking goes to a server)."""
    uri = config.tracking.uri
    if uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).expanduser().resolve().parent
    else:
        folder = Path.cwd()
    return str(folder / "frontier-optuna.journal")


def is_database(url: str) -> bool:
    return "://" in url and not url.startswith("journal:")


def open_storage(url: str, *, single_writer: bool = False) -> Any:
    """An Optuna storage: a journal file (a path, or ``journal:PATH``; safe for several
    processes on one machine), or an RDB URL (``postgresql://``, ``mysql://``,
    ``sqlite:///``) for several machines.

    Args:
        url: the storage.
        single_writer: this process is the journal's only writer (the search driver):
            writes are buffered and made durable together (``storage.flush()``), one
            fsync per finished trial instead of one per parameter.
    """
    import optuna

    if is_database(url):
        return _database(url)
    path = journal_path(Path(url.removeprefix("journal:")).expanduser())
    path.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages.journal import JournalFileBackend

    if single_writer:
        dropped = repair_journal(path)
        if dropped:
            logger.warning(
                "%s ended in a partly written entry (a write cut short by a full disk or "
                "a kill): its %d bytes were dropped; every entry before it is kept",
                path, dropped,
            )  # fmt: skip
    backend: Any = JournalFileBackend(str(path))
    if single_writer:
        backend = BufferedJournal(backend, path)
    storage = optuna.storages.JournalStorage(backend)
    if single_writer:
        storage.flush = backend.flush  # type: ignore[attr-defined]
    return storage


def journal_path(path: Path) -> Path:
    """``path``, once it is nothing or an Optuna journal: a folder, or a file whose first
    line is not a journal entry, is a ``SearchError`` naming it (before Optuna reads it)."""
    import json

    if path.is_dir():
        raise SearchError(f"the study journal (--storage) {path}: is a folder; give a file's path")
    if not path.is_file() or path.stat().st_size == 0:
        return path
    with path.open("rb") as f:
        first = f.readline(1 << 20)
    try:
        entry = json.loads(first.decode("utf-8"))
        ok = isinstance(entry, dict) and "op_code" in entry
    except (UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        raise SearchError(
            f"the study journal (--storage) {path}: not an Optuna journal (its first line "
            "is not a journal entry); give a new file's path, or a journal a search wrote"
        )
    return path


def journal_completions(path: str | Path) -> int:
    """How many trials the study journal at ``path`` has seen complete (0 before it
    exists), read straight off the file, without opening the study through Optuna: a
    millisecond, for a watcher of a running search (a test's, a benchmark's); a line
    the driver is writing now is left for the next read."""
    from optuna.storages.journal._storage import JournalOperation
    from optuna.trial import TrialState

    path = Path(path)
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text().splitlines():
        try:
            op = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            op.get("op_code") == JournalOperation.SET_TRIAL_STATE_VALUES
            and op.get("state") == TrialState.COMPLETE.value
        ):
            count += 1
    return count


def check_storage(url: str) -> None:
    """Refuse, before any work, a study storage that cannot be written: a journal path
    that is a folder or another file, or an SQLite file in a folder that cannot hold it
    (SQLite says only "unable to open database file")."""
    if not is_database(url):
        journal_path(Path(url.removeprefix("journal:")).expanduser())
    elif url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        writable(Path(url.removeprefix("sqlite:///")).parent, f"the study storage {url}")


def _database(url: str, attempts: int = 5) -> Any:
    """Optuna's storage in the database at ``url``. Drivers started at once against a
    fresh database race to create its tables (the loser sees "already exists"): the
    loser tries again once the winner's tables are there."""
    import optuna
    import sqlalchemy.exc

    check_storage(url)
    for attempt in range(1, attempts + 1):
        try:
            return optuna.storages.RDBStorage(url)
        except ModuleNotFoundError as err:
            raise SearchError(
                f"the study storage {_redacted(url)} needs the database's Python driver "
                f"({err.name}); for PostgreSQL: pip install 'psycopg[binary]'"
            ) from None
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == attempts:
                raise
            time.sleep(0.5 * attempt)
        except sqlalchemy.exc.OperationalError as err:
            raise SearchError(
                f"cannot reach the study storage {_redacted(url)}: "
                f"{str(err.orig).strip().splitlines()[0] if err.orig else err}"
            ) from None
    raise AssertionError("unreachable")


def _redacted(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    import sqlalchemy

    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


class BufferedJournal:
    """A journal file backend for its only writer: appended logs stay in memory (and
    are read back from there) until ``flush`` writes them with one fsync. A write that
    fails (a full disk) is cut back to what the file held before it, and its logs stay
    in memory: the journal on disk stays whole."""

    def __init__(self, backend: Any, path: Path) -> None:
        self._file = backend
        self._path = path
        self._on_disk = sum(1 for _ in backend.read_logs(0))
        self._buffer: list[dict[str, Any]] = []

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        if log_number_from < self._on_disk:
            yield from self._file.read_logs(log_number_from)
        yield from self._buffer[max(0, log_number_from - self._on_disk) :]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self._buffer.extend(logs)

    def flush(self) -> None:
        if not self._buffer:
            return
        import os

        size = self._path.stat().st_size
        try:
            self._file.append_logs(self._buffer)
        except OSError as err:
            with contextlib.suppress(OSError):  # no half-written entry left behind
                os.truncate(self._path, size)
            if disk_full(err):
                raise DiskFull(self._path, "the study journal") from None
            raise
        self._on_disk += len(self._buffer)
        self._buffer = []


def driver_lock(url: str) -> Any:
    """Hold the journal's driver lock for the whole search (filelock: portable, and the
    OS drops it when the process dies, so a killed search can always be resumed). The
    driver buffers its journal writes, so two drivers on one journal would corrupt it.
    Returns the held lock (``.release()``), or None for a database storage."""
    import filelock

    if is_database(url):
        return None  # a database storage: Optuna arbitrates
    path = Path(url.removeprefix("journal:")).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(path.with_name(path.name + ".driver-lock")), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise SearchError(
            f"another frontier search is running on {path}; wait for it to finish, or "
            "give this one its own storage (--storage PATH)"
        ) from None
    return lock


class StudyStore:
    """The study of one search in its storage, held by this driver until ``close()``.

    Args:
        url: the storage (see ``open_storage``).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = driver_lock(url)
        try:
            self.storage = open_storage(url, single_writer=True)
        except BaseException:
            self.close()
            raise

    def open(
        self,
        config_name: str,
        directions: list[Any],
        sampler: Any,
        *,
        resume: bool,
        new: bool = False,
        trials: int | None = None,
    ) -> Any:
        """The latest study of ``config_name`` (``resume``) or a new one, named after
        the config (``NAME``, ``NAME-2``, ...). A new one is refused while the config's
        latest study stopped short of its budget, unless ``new``. In a database the study
        is then held by this driver (``_dbstudy``): read from memory, written at each
        flush. ``trials``: the budget, kept with the study."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        while True:
            name = self._name(config_name, resume, new)
            try:
                study = optuna.create_study(
                    study_name=name,
                    storage=self.storage,
                    sampler=sampler,
                    directions=directions,
                    load_if_exists=resume,
                )
                break
            except optuna.exceptions.DuplicatedStudyError:
                continue  # another driver of this config took the name first
        if is_database(self.url):
            study = self._hold(study, sampler)
        if not resume:
            study.set_user_attr(CONFIG_ATTR, config_name)
        if trials is not None:
            study.set_user_attr(BUDGET_ATTR, trials)
        if not resume or trials is not None:
            self.flush()
        return study

    def _name(self, config_name: str, resume: bool, new: bool = False) -> str:
        import optuna

        summaries = optuna.get_all_study_summaries(self.storage, include_best_trial=False)
        mine = sorted(
            (s for s in summaries if s.user_attrs.get(CONFIG_ATTR) == config_name),
            key=lambda s: s._study_id,
        )
        if not resume and not new and mine:
            last = mine[-1]
            budget = last.user_attrs.get(BUDGET_ATTR)
            if budget is not None and not last.user_attrs.get(FINISHED_ATTR):
                raise SearchError(
                    f"study {last.study_name!r} of config {config_name!r} in "
                    f"{_redacted(self.url)} stopped after {last.n_trials} of {budget} "
                    "trials: --resume continues it, --new starts another beside it"
                )
        if resume:
            if not mine:
                raise SearchError(
                    f"nothing to resume: no study of config {config_name!r} in "
                    f"{_redacted(self.url)}"
                )
            return mine[-1].study_name
        taken = {s.study_name for s in summaries}
        name, k = config_name, 1
        while name in taken:
            k += 1
            name = f"{config_name}-{k}"
        return name

    def _hold(self, study: Any, sampler: Any) -> Any:
        """``study`` locked for this driver and mirrored in memory."""
        import optuna

        from ._dbstudy import WriteBehindStudy, study_lock

        self._lock = study_lock(self.url, study.study_name)
        if self._lock is None:
            raise SearchError(
                f"another frontier search is running study {study.study_name!r} in "
                f"{_redacted(self.url)}; wait for it to finish"
            )
        remote = self.storage
        self.storage = WriteBehindStudy(remote, study._study_id)
        return optuna.load_study(study_name=study.study_name, storage=self.storage, sampler=sampler)

    def tell(
        self, study: Any, trial: Any, plan: dict[str, Any], outcome: Any, front: Any
    ) -> TrialRecord:
        """Tell ``study`` how ``trial`` ended (a ``TrialResult``, or the exception that
        ended it) with its constraint values and metrics, make it durable, and return
        its record."""
        from optuna.trial import TrialState

        params = dict(trial.params)
        if isinstance(outcome, BaseException):
            error = f"{type(outcome).__name__}: {outcome}"[:2000]
            trial.set_user_attr("error", error)
            study.tell(trial, state=TrialState.FAIL)
            rec = TrialRecord(trial.number, params, plan, "failed", error=error)
        else:
            for c in front.constraints:
                trial.set_constraint(str(c), c.violation(outcome.values[c.objective]))
            trial.set_user_attr("values", outcome.values)
            trial.set_user_attr("fidelity", outcome.fidelity)
            trial.set_user_attr("eval_s", outcome.wall_s)
            if outcome.node:
                trial.set_user_attr("node", outcome.node)
            if outcome.train_device:
                trial.set_user_attr("train_device", outcome.train_device)
            study.tell(trial, [outcome.values[o.name] for o in front.objectives])
            rec = TrialRecord(
                trial.number,
                params,
                plan,
                "complete",
                rungs={0: dict(outcome.values)},
                node=outcome.node,
                train_device=outcome.train_device,
            )
        self.flush()  # the trial is on disk before anyone hears of it
        return rec

    def save_rungs(self, study: Any, record: TrialRecord) -> None:
        """Remember (durably) what ``record`` measured above rung 0."""
        rungs = {str(r): v for r, v in record.rungs.items() if r > 0}
        study.set_user_attr(RUNG_ATTR + str(record.number), rungs)
        self.flush()

    def flush(self) -> None:
        """Make what the study holds durable (a buffered journal writes it now)."""
        flush = getattr(self.storage, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()  # a file lock, or a database's (``study_lock``)
            self._lock = None


def restore(study: Any) -> dict[int, TrialRecord]:
    """The records of a study a run left behind. Trials a killed run left RUNNING are
    failed, marked interrupted and queued again with the same parameters; trials the
    driver refused as repeats are skipped."""
    from optuna.trial import TrialState

    attrs = study.user_attrs
    interrupted = list(attrs.get(INTERRUPTED_ATTR, []))
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, skip_if_exists=False)
        interrupted.append(t.number)
    study.set_user_attr(INTERRUPTED_ATTR, interrupted)
    records: dict[int, TrialRecord] = {}
    for t in study.get_trials(deepcopy=False):
        if t.number in interrupted:
            continue
        if t.state == TrialState.COMPLETE:
            rec = TrialRecord(
                t.number,
                t.params,
                t.user_attrs["plan"],
                "complete",
                node=t.user_attrs.get("node", ""),
                train_device=t.user_attrs.get("train_device", ""),
            )
            rec.rungs[0] = dict(t.user_attrs["values"])
            for r, vals in attrs.get(RUNG_ATTR + str(t.number), {}).items():
                rec.rungs[int(r)] = dict(vals)
            records[t.number] = rec
        elif t.state == TrialState.FAIL:
            records[t.number] = TrialRecord(
                t.number,
                t.params,
                t.user_attrs.get("plan", {}),
                "failed",
                error=t.user_attrs.get("error", ""),
            )
    return records
