"""Ctrl-C in a search's loop: the first asks it to stop, a second stops it at once."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from frontier.search._interrupt import StopRequest


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.1)  # the handler runs here, in the main thread


@pytest.mark.usefixtures("sigint_as_at_a_terminal")
def test_first_ctrl_c_asks_a_second_stops_at_once(capfd) -> None:
    stop = StopRequest()
    with pytest.raises(KeyboardInterrupt), stop:
        _ctrl_c()
        assert stop.requested
        assert "Ctrl-C again stops at once" in capfd.readouterr().err
        _ctrl_c()
        pytest.fail("the second Ctrl-C did not stop")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_someone_else_s_handler_stays_in_charge() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with StopRequest() as stop:
            _ctrl_c()
        assert seen == [signal.SIGINT] and not stop.requested
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("sigint_as_at_a_terminal")
def test_outside_the_main_thread_it_changes_nothing() -> None:
    entered: list[bool] = []

    def search() -> None:
        with StopRequest() as stop:
            entered.append(stop.requested)

    thread = threading.Thread(target=search)
    thread.start()
    thread.join()
    assert entered == [False]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
