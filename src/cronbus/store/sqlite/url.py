"""The SQLite store's URL: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or
``sqlite:///:memory:``, with options ``synchronous``, ``busy_timeout`` and ``migrate``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from ...errors import StoreURLError
from .. import migrations

_SYNCHRONOUS = {"off", "normal", "full", "extra"}


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
    synchronous = options.pop("synchronous", "full").lower()
    if synchronous not in _SYNCHRONOUS:
        raise StoreURLError(
            f"store URL {url!r}: synchronous={synchronous!r} is not one of "
            f"{', '.join(sorted(_SYNCHRONOUS))}"
        )
    try:
        busy_timeout = float(options.pop("busy_timeout", "30"))
    except ValueError:
        raise StoreURLError(f"store URL {url!r}: busy_timeout must be seconds") from None
    migrate = migrations.auto_migrate(url, options)
    if options:
        raise StoreURLError(f"store URL {url!r}: unknown option(s) {', '.join(sorted(options))}")
    return SqliteOptions(path, synchronous, busy_timeout, migrate)
