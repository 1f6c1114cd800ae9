"""The search's messages go to the ``frontier`` logger. Unless an application gives
that logger a handler of its own, they are printed on stderr as ``frontier: ...``
(warnings as ``warning: ...``)."""

from __future__ import annotations

import logging
import sys
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
