"""The search's messages go to the ``frontier`` logger. Unless an application gives
that logger a handler of its own, they are printed on stderr as ``frontier: ...``
(warnings as ``warning: ...``)."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger("frontier")


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a message comes (tests swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class _Prefix(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = "warning" if record.levelno >= logging.WARNING else "frontier"
        return f"{prefix}: {record.getMessage()}"


def show_messages() -> None:
    """Print the ``frontier`` logger's messages on stderr, once, unless the application
    configured that logger itself."""
    if logger.handlers:
        return
    handler = _Stderr()
    handler.setFormatter(_Prefix())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


#: libraries whose log lines say nothing to a Frontier user on the terminal (CodeCarbon's
#: "unknown CPU", MLflow's "Creating initial MLflow database tables..."): under the
#: ``frontier`` command they go to ``third_party_log()``
THIRD_PARTY = ("codecarbon", "mlflow", "alembic", "sqlalchemy", "huey")
_routed: list[logging.Handler] = []


def third_party_log() -> Path:
    """The file third-party log lines go to: ``third-party.log`` in Frontier's data dir."""
    from frontier.latency_models import data_dir

    return data_dir() / "third-party.log"


def quiet_third_party() -> None:
    """Send ``THIRD_PARTY`` libraries' log lines to ``third_party_log()`` from now on in
    this process (the ``frontier`` command calls it; an application that imports Frontier
    keeps its own logging). ``requiet`` again after importing one: MLflow and CodeCarbon
    put their own terminal handlers back on import and on each tracker."""
    if not _routed:
        # CodeCarbon adds its terminal handler when first imported: import it first
        with contextlib.suppress(ImportError):
            import codecarbon.external.logger  # noqa: F401
        path = third_party_log()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler: logging.Handler = logging.FileHandler(path, delay=True, encoding="utf-8")
        except OSError:  # nowhere to write: those lines are dropped, never printed
            handler = logging.NullHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        _routed.append(handler)
    requiet()


def requiet() -> None:
    """Route ``THIRD_PARTY`` loggers to the file again, where ``quiet_third_party`` was
    called (a no-op otherwise)."""
    for name in THIRD_PARTY if _routed else ():
        third = logging.getLogger(name)
        third.handlers = list(_routed)
        third.propagate = False
