"""Where a search's runs may go: the tracking URIs MLflow can store runs at, checked where
a config or an option names one."""

from __future__ import annotations


class TrackingError(ValueError):
    """A search, run or artifact is not where the user said; the message says what is."""


#: the tracking URI schemes MLflow stores runs in (a driver suffix such as
#: ``postgresql+psycopg2`` is allowed)
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def check_tracking_uri(uri: str) -> str:
    """``uri`` if MLflow can track to it; else a ``TrackingError`` that lists the
    schemes it can."""
    scheme, sep, rest = uri.partition("://")
    if not uri.strip() or (sep and (scheme.split("+")[0] not in TRACKING_SCHEMES or not rest)):
        raise TrackingError(
            f"tracking URI {uri!r}: MLflow cannot store runs there; use "
            "sqlite:///PATH.db, http(s)://HOST:PORT of a tracking server, or a database "
            f"URL ({', '.join(TRACKING_SCHEMES)})"
        )
    return uri
