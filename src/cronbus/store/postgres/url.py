"""A ``postgresql://`` store URL: libpq's connection string and cronbus's own options.

cronbus's options are taken out of the query string: ``schema`` (1-63 lower-case letters,
digits or ``_``), ``statement_timeout`` (seconds from 0 to 86,400, 0 for none; default 30),
``pool_min`` and ``pool_max`` (1 to 1,000 connections; defaults 1 and 10) and ``migrate``
(true or false). Everything else is libpq's and passes through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ...validation import shorten
from .. import migrations
from ..presence import shown_url
from ..url_options import url_error, url_seconds, url_whole

DEFAULT_SCHEMA = "cronbus"
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_URL_OPTIONS = ("schema", "statement_timeout", "pool_min", "pool_max", "migrate")
_CONNECT_TIMEOUT = 10
STATEMENT_TIMEOUT_MAX = 86_400.0
"""A day (PostgreSQL takes at most about 24 days, in milliseconds)."""
POOL_MAX = 1_000
"""Connections per process: far above any server's max_connections default."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresOptions:
    """A ``postgresql://`` store URL, split into libpq's connection string and cronbus's options.

    ``statement_timeout`` (seconds, 0 for none) also bounds how long a transaction may sit idle,
    so a stalled process cannot hold claimed rows locked. ``migrate`` false leaves migrations
    to ``cronbus migrate``: opening then refuses a schema that is behind.
    """

    conninfo: str
    schema: str = DEFAULT_SCHEMA
    statement_timeout: float = 30.0
    pool_min: int = 1
    pool_max: int = 10
    migrate: bool = True

    @property
    def where(self) -> str:
        """Host, database and schema, for messages (never the password)."""
        params = conninfo_to_dict(self.conninfo)
        host = params.get("host") or "localhost"
        port = params.get("port") or 5432
        return f"{host}:{port}/{params.get('dbname') or '?'} (schema {self.schema})"


def parse_url(url: str) -> PostgresOptions:
    """Read a ``postgresql://`` (or ``postgres://``) store URL; libpq's options pass through."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("postgresql", "postgres"):
        raise url_error(url, "not a postgresql://user@host/db URL")
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _URL_OPTIONS:
            ours[key] = value
        else:
            theirs.append((key, value))
    conninfo = urlunsplit(parts._replace(query=urlencode(theirs)))
    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        # libpq's message quotes no password; the URL is shown without it.
        raise url_error(url, str(exc).strip()) from None
    return _options(url, conninfo, ours)


def _options(url: str, conninfo: str, ours: Mapping[str, str]) -> PostgresOptions:
    """cronbus's options of the URL, each checked; errors name the option."""
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA.fullmatch(schema):
        raise url_error(
            url,
            "schema must be 1-63 lower-case letters, digits or _, not starting with a digit, "
            f"got {shorten(schema)}",
        )
    pool_min = url_whole(url, ours, "pool_min", 1, 1, POOL_MAX)
    pool_max = url_whole(url, ours, "pool_max", max(10, pool_min), 1, POOL_MAX)
    if pool_max < pool_min:
        raise url_error(url, f"pool_max ({pool_max}) must be at least pool_min ({pool_min})")
    timeout = url_seconds(url, ours, "statement_timeout", 30.0, STATEMENT_TIMEOUT_MAX)
    return PostgresOptions(
        conninfo=conninfo,
        schema=schema,
        statement_timeout=timeout,
        pool_min=pool_min,
        pool_max=pool_max,
        migrate=migrations.auto_migrate(shown_url(url), dict(ours)),
    )


def session_conninfo(options: PostgresOptions) -> str:
    """The connection string with the store's schema and timeouts as session settings."""
    params = conninfo_to_dict(options.conninfo)
    # No JIT compilation: the store's statements are short, and a batch statement whose
    # estimated cost passes jit_above_cost (an insert of 1,000 keyed runs) would spend seconds
    # compiling. First, so that the URL's own options may turn it back on.
    settings = ["-c jit=off", str(params.get("options") or ""), f"-c search_path={options.schema}"]
    if options.statement_timeout > 0:
        ms = max(1, round(options.statement_timeout * 1000))
        settings += [f"-c statement_timeout={ms}", f"-c idle_in_transaction_session_timeout={ms}"]
    extra: dict[str, Any] = {"options": " ".join(s for s in settings if s)}
    if not params.get("application_name"):
        extra["application_name"] = "cronbus"
    if not params.get("connect_timeout"):
        # libpq waits for ever on a host that drops packets.
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    return make_conninfo(options.conninfo, **extra)
