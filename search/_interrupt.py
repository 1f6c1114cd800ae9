"""Ctrl-C during a search's loop. The first asks the loop to stop at its next safe
point: the trials already running finish and are saved, then the search ends as an
interrupted one (``--resume`` continues it). A second stops at once, as Python would.

Why not Python's own KeyboardInterrupt at once: it lands wherever the main thread is.
Landed inside ``logging`` (which takes its module lock before entering its ``try``), it
left that lock held, and MLflow's writer thread waited on it for ever; landed in a
finalizer, it was swallowed and the search ran on to its budget. A flag set by the
handler and read by the loop can do neither.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType

#: what the first Ctrl-C prints (straight to the terminal: a signal handler takes no lock)
STOPPING = (
    b"\nfrontier: stopping once the running trials finish (they are saved); "
    b"Ctrl-C again stops at once (they are lost, and --resume runs them again)\n"
)
#: whether this platform has per-thread signal masks (POSIX)
_MASKS = hasattr(signal, "pthread_sigmask")


class StopRequest:
    """While entered (``with``), SIGINT sets ``requested`` instead of raising; a second
    SIGINT raises KeyboardInterrupt. Enters as a no-op outside the main thread, or when
    SIGINT is not Python's default handler (someone else's handler stays in charge)."""

    def __init__(self) -> None:
        self.requested = False
        self._installed = False

    def __enter__(self) -> StopRequest:
        self.requested = False
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        with contextlib.suppress(OSError):  # no stderr: the loop still stops
            os.write(2, STOPPING)


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """While entered, SIGINT waits (blocked in this thread) instead of arriving; a
    process started meanwhile inherits the block until it calls ``ignore_sigint``. A
    Ctrl-C held back is delivered on exit. A no-op where the platform has no masks."""
    if not _MASKS:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_sigint() -> None:
    """Ignore SIGINT from now on, in a process started inside ``sigint_blocked``: the
    block lifts after, dropping a Ctrl-C pending since the process started."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _MASKS:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
