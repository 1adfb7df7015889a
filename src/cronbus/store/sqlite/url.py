"""The SQLite store's URL: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or
``sqlite:///:memory:``, with options ``synchronous`` (off, normal, full, extra),
``busy_timeout`` (seconds from 0 to 86,400; default 30) and ``migrate`` (true or false)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from ...errors import StoreURLError
from ...validation import shorten
from .. import migrations
from ..url_options import url_error, url_seconds

_SYNCHRONOUS = {"off", "normal", "full", "extra"}
BUSY_TIMEOUT_MAX = 86_400.0
"""A day: SQLite takes the timeout in milliseconds as a C int (at most about 24 days)."""


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """What an SQLite store URL says."""

    path: str
    synchronous: str
    busy_timeout: float
    migrate: bool


def parse_url(url: str) -> SqliteOptions:
    """Read an ``sqlite://`` URL; :class:`~cronbus.errors.StoreURLError` names what is wrong."""
    parts = urlsplit(url.strip())
    if parts.netloc:
        raise StoreURLError(
            f"store URL {url!r}: an SQLite URL has three slashes before a relative path "
            "(sqlite:///cronbus.db) and four before an absolute one (sqlite:////var/cronbus.db)"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise StoreURLError(f"store URL {url!r} names no file: use sqlite:///cronbus.db")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    synchronous = options.pop("synchronous", "full")
    if synchronous.lower() not in _SYNCHRONOUS:
        raise url_error(
            url,
            f"synchronous must be one of {', '.join(sorted(_SYNCHRONOUS))}, "
            f"got {shorten(synchronous)}",
        )
    busy_timeout = url_seconds(url, options, "busy_timeout", 30.0, BUSY_TIMEOUT_MAX)
    options.pop("busy_timeout", None)
    migrate = migrations.auto_migrate(url, options)
    if options:
        raise url_error(url, f"unknown option(s) {shorten(', '.join(sorted(options)))}")
    return SqliteOptions(path, synchronous.lower(), busy_timeout, migrate)
