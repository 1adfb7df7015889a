"""Stores: where cronbus keeps its only shared state.

``open_store(url)`` picks the backend from the URL scheme:

- ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``;
  options as a query string: ``?synchronous=normal`` (default ``full``), ``busy_timeout=30``.
- ``postgresql://user:password@host:port/db`` (or ``postgres://``); libpq's options pass
  through, and cronbus's own: ``?schema=cronbus`` (the schema that holds the tables),
  ``statement_timeout=30`` (seconds, 0 for none), ``pool_min=1``, ``pool_max=10``.

Both take ``migrate=false`` (default ``true``): opening the store then applies no migration,
and refuses with :class:`~cronbus.errors.SchemaError` a schema that is behind, which
``cronbus migrate`` brings up to date; for deployments where schema changes are a step of their
own, not a side effect of whichever process starts first. A schema newer than this cronbus is
refused either way.

A store is created (and migrated) when it opens, except by ``open(create=False)``, which
commands that only read use: it opens only a store that exists and is up to date, and raises
:class:`StoreNotFoundError` ("no such store: ...") for a missing SQLite file, or a PostgreSQL
schema that is missing or holds no cronbus tables, leaving nothing behind. Long-running roles
call ``check()`` every few seconds: :class:`StoreFaultError` says that the SQLite file was
deleted, replaced or overwritten under them.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..errors import StoreURLError
from .ports import CONTROL_CHANNEL, JOBS_CHANNEL, RUNS_CHANNEL, HeldAttempt, Listener, Store
from .presence import StoreFaultError, StoreNotFoundError
from .sqlite import SQLiteStore
from .sqlite import parse_url as parse_sqlite_url

DEFAULT_URL = "sqlite:///./cronbus.db"

__all__ = [
    "CONTROL_CHANNEL",
    "DEFAULT_URL",
    "JOBS_CHANNEL",
    "RUNS_CHANNEL",
    "HeldAttempt",
    "Listener",
    "SQLiteStore",
    "Store",
    "StoreFaultError",
    "StoreNotFoundError",
    "default_url",
    "open_store",
]


def default_url() -> str:
    """``CRONBUS_STORE`` when set, else an SQLite file in the current folder."""
    return os.environ.get("CRONBUS_STORE") or DEFAULT_URL


def open_store(url: str) -> Store:
    """Build (not yet open) the store that ``url`` names."""
    if not isinstance(url, str) or not url.strip():
        raise StoreURLError("the store URL is empty; use sqlite:///path.db or postgresql://...")
    parts = urlsplit(url.strip())
    if parts.scheme == "sqlite":
        return _sqlite(url)
    if parts.scheme in ("postgres", "postgresql"):
        return _postgres(url.strip())
    raise StoreURLError(
        f"store URL {url!r} has an unknown scheme {parts.scheme!r}: "
        "use sqlite:///path.db or postgresql://user@host/db"
    )


def _postgres(url: str) -> Store:
    # Imported here, so that SQLite users do not pay for importing psycopg.
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise StoreURLError(
            f"store URL {url!r} needs psycopg 3 and psycopg-pool, which failed to import: {exc}"
        ) from None
    return PostgresStore(url)


def _sqlite(url: str) -> SQLiteStore:
    options = parse_sqlite_url(url)
    return SQLiteStore(
        options.path,
        synchronous=options.synchronous,
        busy_timeout=options.busy_timeout,
        url=url,
        migrate=options.migrate,
    )
