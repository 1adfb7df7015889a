"""PostgreSQL migrations: applied once however many processes open at once, left to
``migrate()`` when the URL says ``migrate=false``, and a schema behind or ahead refused clearly.

Each test gets a fresh schema on ``CRONBUS_TEST_PG`` (skipped locally when unreachable, failed
when ``CI=true``).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url, with_options
from cronbus.errors import SchemaError, StoreURLError
from cronbus.model import NewRun
from cronbus.store import migrations, open_store
from cronbus.store.postgres import PostgresStore, parse_url
from cronbus.store.postgres import sql as q

KNOWN = migrations.load("postgres")
LATEST = KNOWN[-1].version
ALL = tuple(f"{m.version:04d}_{m.name}" for m in KNOWN)


@pytest.fixture
async def url(request: pytest.FixtureRequest) -> str:
    """A store URL on a fresh, empty schema."""
    return await pg_store_url(request)


def pg(url: str) -> PostgresStore:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    return store


async def applied(url: str) -> list[int]:
    """The versions recorded in the schema's migrations table (empty when it has none)."""
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        table = f"{schema}.cronbus_migrations"
        found = await (await conn.execute("SELECT to_regclass(%s)", (table,))).fetchone()
        if found is None or found[0] is None:
            return []
        query = sql.SQL("SELECT version FROM {}.cronbus_migrations ORDER BY version").format(
            sql.Identifier(schema)
        )
        return [row[0] for row in await (await conn.execute(query)).fetchall()]


async def apply_first(url: str) -> None:
    """Bring the schema to version 1 by hand, as an older cronbus would have left it."""
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        await conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        await conn.execute(q.CREATE_MIGRATIONS)
        await conn.execute(KNOWN[0].sql)
        await conn.execute(q.RECORD_MIGRATION, (KNOWN[0].version, KNOWN[0].name))


def with_password(url: str) -> tuple[str, str]:
    """The URL's password and the URL, with one added when it has none (the local server
    trusts its clients, so any password connects)."""
    parts = urlsplit(url)
    secret = "s3cret-password"
    if parts.password or not parts.username:
        return parts.password or secret, url
    netloc = f"{parts.username}:{secret}@{parts.netloc.rpartition('@')[2]}"
    return secret, urlunsplit(parts._replace(netloc=netloc))


def run() -> NewRun:
    return NewRun(task="t", queue="default", eta=0.0)


def test_migrate_is_a_url_option_not_a_libpq_one() -> None:
    base = "postgresql://u@h/db"
    assert parse_url(base).migrate is True
    for value in ("false", "0", "no", "off", "FALSE"):
        options = parse_url(f"{base}?migrate={value}&sslmode=disable")
        assert options.migrate is False
        assert "migrate" not in options.conninfo
        assert "sslmode=disable" in options.conninfo
    with pytest.raises(StoreURLError, match="migrate='later' must be true or false"):
        parse_url(f"{base}?migrate=later")


async def test_migrate_false_refuses_a_fresh_schema_and_creates_nothing(url: str) -> None:
    secret, url_with_secret = with_password(url)
    store = pg(with_options(url_with_secret, migrate="false"))
    with pytest.raises(SchemaError) as caught:
        await store.open()
    message = str(caught.value)
    assert f"version 0, this cronbus needs version {LATEST}" in message
    assert "run `cronbus migrate`" in message
    assert "migrate=false" in message
    assert parse_url(url).schema in message
    assert secret not in message
    assert await applied(url) == []
    await store.close()


async def test_migrate_applies_what_is_pending_and_then_nothing(url: str) -> None:
    store = pg(with_options(url, migrate="false"))
    before = await store.schema_versions()
    assert (before.current, before.latest, before.pending) == (0, LATEST, LATEST)
    first = await store.migrate()
    assert (first.before, first.after, first.applied) == (0, LATEST, ALL)
    again = await store.migrate()
    assert (again.before, again.after, again.applied) == (LATEST, LATEST, ())
    assert (await store.schema_versions()).pending == 0
    await store.open()  # migrate=false now finds the schema up to date
    try:
        assert await store.schema_version() == LATEST
        (deferred,) = await store.defer([run()], 0.0)
        assert deferred.created
    finally:
        await store.close()


async def test_a_schema_behind_is_refused_then_brought_up_to_date(url: str) -> None:
    await apply_first(url)
    store = pg(with_options(url, migrate="false"))
    with pytest.raises(SchemaError, match=f"version 1, this cronbus needs version {LATEST}"):
        await store.open()
    migrated = await store.migrate()
    assert (migrated.before, migrated.after, migrated.applied) == (1, LATEST, ALL[1:])
    assert await applied(url) == [m.version for m in KNOWN]


async def test_concurrent_opens_of_a_fresh_schema_migrate_once(url: str) -> None:
    stores = [pg(url) for _ in range(4)]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        assert await applied(url) == [m.version for m in KNOWN]
        for store in stores:
            assert await store.schema_version() == LATEST
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_concurrent_migrations_apply_each_migration_once(url: str) -> None:
    results = await asyncio.gather(*(pg(url).migrate() for _ in range(4)))
    assert sorted(r.applied for r in results) == [(), (), (), ALL]
    assert all(r.after == LATEST for r in results)
    assert await applied(url) == [m.version for m in KNOWN]


async def test_a_newer_schema_is_refused_whatever_the_option(url: str) -> None:
    await pg(url).migrate()
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        insert = sql.SQL("INSERT INTO {}.cronbus_migrations VALUES (999, 'future', 0)")
        await conn.execute(insert.format(sql.Identifier(schema)))
    for option in ("true", "false"):
        store = pg(with_options(url, migrate=option))
        with pytest.raises(SchemaError, match=rf"version 999, newer .*\({LATEST}\); upgrade"):
            await store.open()
        await store.close()
    store = pg(url)
    assert (await store.schema_versions()).current == 999
    with pytest.raises(SchemaError, match="newer than this cronbus"):
        await store.migrate()
