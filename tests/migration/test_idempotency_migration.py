"""Migration 0017 (both stores) on a store an older cronbus left at version 16, where idempotency
keys were unique per store: a key held there still returns its run in its namespace, and another
namespace may now use it for a run of its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url
from cronbus.model import NewRun
from cronbus.store import Store, migrations, open_store
from cronbus.store.postgres import parse_url
from cronbus.store.postgres import sql as pq

T0 = 1_700_000_000.0
BEFORE = 16
"""The last version whose keys were unique per store."""
SEED = [
    "INSERT INTO runs (task, queue, state, eta, idempotency_key, namespace, created_at, "
    f"updated_at) VALUES ('t', 'q', 'queued', 0, 'k', 'a', {T0}, {T0})",
    f"INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at) "
    f"VALUES (1, '[]', '{{}}', 'a', {T0})",
]


def keyed(namespace: str) -> NewRun:
    return NewRun(task="t", queue="q", eta=T0, idempotency_key="k", namespace=namespace)


async def check_migrated(store: Store) -> None:
    assert await store.schema_version() > BEFORE
    (again,) = await store.defer([keyed("a")], T0)
    assert (again.id, again.created) == (1, False)
    (other,) = await store.defer([keyed("b")], T0)
    assert other.created
    assert other.id != 1
    assert (await store.get_run(other.id)).namespace == "b"


async def test_sqlite_keys_become_per_namespace(tmp_path: Path) -> None:
    path = tmp_path / "v16.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE cronbus_migrations (version INTEGER PRIMARY KEY, name TEXT, "
                 "applied_at REAL)")  # fmt: skip
    for migration in migrations.load("sqlite")[:BEFORE]:
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


async def test_postgres_keys_become_per_namespace(request: pytest.FixtureRequest) -> None:
    url = await pg_store_url(request)
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        await conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        await conn.execute(pq.CREATE_MIGRATIONS)
        for migration in migrations.load("postgres")[:BEFORE]:
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
