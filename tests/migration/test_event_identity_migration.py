"""Migration 0004 (both stores) on a store an older cronbus left at version 3: events keep their
offsets, the same id from another source becomes a new event, and a cursor that an old replay
left beyond its topic's end comes back to the end, so the next events are matched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url
from cronbus.events.records import NewEvent
from cronbus.store import Store, migrations, open_store
from cronbus.store.postgres import parse_url
from cronbus.store.postgres import sql as pq

T0 = 1_700_000_000.0
# Version 3's rows: a topic with 3 events and a subscription whose cursor a replay moved to 499.
SEED = [
    "INSERT INTO topics (name, last_offset, created_at) VALUES ('orders', 3, 0)",
    *(
        'INSERT INTO events (topic, "offset", event_id, type, source, time, datacontenttype, '
        f"data, published_at) VALUES ('orders', {n}, 'e{n}', 't', '/eu', 0, "
        f"'application/json', '{{}}', 0)"
        for n in (1, 2, 3)
    ),
    "INSERT INTO subscriptions (name, topic, target, filter, policy, origin, start, cursor, "
    'created_at, updated_at) VALUES (\'late\', \'orders\', \'{"kind": "task", "task": "t"}\', '
    "'{}', '{}', 'api', 'latest', 499, 0, 0)",
]


def event(event_id: str, source: str) -> NewEvent:
    return NewEvent(id=event_id, type="t", source=source, time=T0, data_json="{}")


async def check_migrated(store: Store) -> None:
    assert await store.schema_version() >= 4
    assert [e.offset for e in await store.read_events("orders", 0, 10)] == [1, 2, 3]
    assert (await store.get_subscription("late")).cursor == 3
    (same,) = await store.append("orders", [event("e1", "/eu")], T0)
    (other,) = await store.append("orders", [event("e1", "/us")], T0)
    assert (same.offset, same.created) == (1, False)
    assert (other.offset, other.created) == (4, True)


async def test_sqlite_version_3_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE cronbus_migrations (version INTEGER PRIMARY KEY, name TEXT, "
                 "applied_at REAL)")  # fmt: skip
    for migration in migrations.load("sqlite")[:3]:
        conn.executescript(migration.sql)
        conn.execute(
            "INSERT INTO cronbus_migrations VALUES (?, ?, 0)", (migration.version, migration.name)
        )
    for statement in SEED:
        conn.execute(statement)
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.close()


async def test_postgres_version_3_is_migrated(request: pytest.FixtureRequest) -> None:
    url = await pg_store_url(request)
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        await conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        await conn.execute(pq.CREATE_MIGRATIONS)
        for migration in migrations.load("postgres")[:3]:
            await conn.execute(migration.sql.encode())
            await conn.execute(pq.RECORD_MIGRATION, (migration.version, migration.name))
        for statement in SEED:
            await conn.execute(statement.encode())
    store = open_store(url)
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.close()
