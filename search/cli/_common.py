"""What the command groups share: usage errors, loading a config, the device store and
the tracking URI options."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..config._config import Config, TrackingSection, load_config
from ..config._uri import check_tracking_uri

#: the MLflow store a search writes when neither its config nor --tracking-uri says
DEFAULT_TRACKING_URI = str(TrackingSection.model_fields["uri"].default)
CONFIG_HELP = "a config file, or a built-in experiment name"
STORE_HELP = "device store directory (default $FRONTIER_DATA_DIR or ~/.local/share/frontier)"


class UsageError(ValueError):
    """A bad command-line expression (reported like a config error)."""


@contextmanager
def usage_errors() -> Iterator[None]:
    """A ValueError of the library below becomes a usage error: one line, exit 2."""
    try:
        yield
    except ValueError as err:
        raise UsageError(str(err)) from None


def load(target: str) -> Config:
    return load_config(target)


def device_store(args: argparse.Namespace) -> Any:
    from frontier.latency_models import DeviceStore

    return DeviceStore(args.store)


def add_tracking_uri(p: argparse.ArgumentParser, *, env: bool = True) -> None:
    where = "$MLFLOW_TRACKING_URI or " if env else ""
    p.add_argument(
        "--tracking-uri", help=f"MLflow tracking URI (default {where}{DEFAULT_TRACKING_URI})"
    )


def tracking_uri(args: argparse.Namespace) -> str:
    """``--tracking-uri``, else $MLFLOW_TRACKING_URI, else the config schema's default."""
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    return check_tracking_uri(str(uri))
