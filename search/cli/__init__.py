"""The ``frontier`` command line, one module per command group: ``search`` (run a
search), ``results`` (``pareto``, ``pick``), ``lut`` (device latency tables) and
``explore`` (``space``, ``sensitivity``, ``plan``, ``experiments``), ``pipeline``. Each module's
``add_commands`` adds its commands, each command's arguments beside its handler."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from frontier.experiments import TaskError
from frontier.latency_models import DeviceUnavailable, FrameError, TableError
from frontier.spaces import PlanError, SpaceError

from .._log import quiet_third_party, show_messages
from ..config._config import ConfigError
from ..config._uri import TrackingError
from ..study._storage import SearchError, disk_full
from ..tracking._results import QueryError
from ..tracking._tracking import no_telemetry
from . import explore, lut, pipeline, results, search
from ._common import UsageError

#: what a command reports as one line and exit status 2 (bad input, not a crash)
USER_ERRORS = (
    ConfigError,
    UsageError,
    QueryError,
    TrackingError,
    TaskError,
    PlanError,
    SpaceError,
    TableError,
    DeviceUnavailable,
    SearchError,
    FrameError,
)


def _version() -> str:
    try:
        return version("frontier")
    except PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line and exit 2, pointing at --help
    (argparse's own prints the whole usage block first). Subcommands' parsers are of
    the same class (argparse makes them with the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="frontier",
        description="Hardware-aware compression search for PyTorch models.",
    )
    parser.add_argument("--version", action="version", version=f"frontier {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (explore, lut, search, results, pipeline):
        group.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    no_telemetry()
    show_messages()
    quiet_third_party()
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except USER_ERRORS as err:
        print(f"frontier: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130  # the search said how to continue; no traceback
    except BrokenPipeError:  # `frontier ... | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:
        if not disk_full(err):
            raise
        where = f" writing {err.filename}" if err.filename else ""
        print(
            f"frontier: error: no space left on the device{where}: free some space and run "
            "the same command again (a search: with --resume; its finished trials are saved)",
            file=sys.stderr,
        )
        return 2
    return code


__all__ = ["build_parser", "main"]
