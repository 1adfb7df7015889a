"""PostgreSQL for the contract suite: a fresh schema per test on the server at ``CRONBUS_TEST_PG``
(default: the local trust DSN below), dropped when the test ends.

Locally an unreachable server skips the PostgreSQL half of the suite; in CI (``CI=true``) it
fails it, so the suite cannot pass there without having run against PostgreSQL.
"""

from __future__ import annotations

import os
import uuid
from typing import NoReturn
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
_CONNECT_TIMEOUT = 5


def server_url() -> str:
    """The test server: ``CRONBUS_TEST_PG``, or the local trust DSN."""
    return os.environ.get("CRONBUS_TEST_PG") or DEFAULT_URL


async def pg_store_url(request: pytest.FixtureRequest) -> str:
    """A store URL on a new schema of the test server; the schema is dropped after the test."""
    server = server_url()
    schema = f"cronbus_test_{uuid.uuid4().hex}"
    try:
        async with await psycopg.AsyncConnection.connect(
            server, autocommit=True, connect_timeout=_CONNECT_TIMEOUT
        ) as conn:
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.OperationalError as exc:
        _unavailable(server, exc)
    request.addfinalizer(lambda: drop_schema(server, schema))
    return with_options(server, schema=schema)


def pg_database(request: pytest.FixtureRequest) -> str:
    """The URL of a new database on the test server, dropped after the test: a database that
    is not the store's (connectors refuse the store's own database)."""
    server = server_url()
    name = f"cronbus_db_{uuid.uuid4().hex}"
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=_CONNECT_TIMEOUT) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError as exc:
        _unavailable(server, exc)

    def drop() -> None:
        with psycopg.connect(server, autocommit=True, connect_timeout=_CONNECT_TIMEOUT) as conn:
            drop = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
            conn.execute(sql.SQL(drop).format(sql.Identifier(name)))

    request.addfinalizer(drop)
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def drop_schema(server: str, schema: str) -> None:
    """Drop a test schema and everything in it."""
    with psycopg.connect(server, autocommit=True, connect_timeout=_CONNECT_TIMEOUT) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def with_options(url: str, **options: str) -> str:
    """``url`` with query options added (or replaced)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(query=urlencode({**query, **options})))


def _unavailable(server: str, exc: psycopg.Error) -> NoReturn:
    params = conninfo_to_dict(server)
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    message = f"PostgreSQL at {where} (CRONBUS_TEST_PG) is unreachable: {exc}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
