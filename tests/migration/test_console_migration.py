"""Migration 0010 (both stores) on a store an older cronbus left at version 9: its tokens keep
seeing payloads (``payloads`` true), and its job runs, created before the ``runs_fired`` index,
are found by the scheduler's lag."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url
from cronbus.store import Store, migrations, open_store
from cronbus.store.postgres import parse_url
from cronbus.store.postgres import sql as pq

T0 = 1_700_000_000.0
_JOB_RUN = (
    "INSERT INTO runs (task, queue, state, eta, created_at, updated_at, job_id, fire_at) "
    "VALUES ('t', 'q', 'queued', {fire}, {at}, {at}, 1, {fire})"
)
# Version 9's rows, valid in both dialects: a token, two runs of job 1 (3 s and 1 s late) and a
# run of no job.
SEED = [
    "INSERT INTO tokens (id, name, hash, scope, namespaces, created_at, created_by) "
    "VALUES ('old', 'old token', 'h', 'read', {spaces}, 0, 'local')",
    _JOB_RUN.format(fire=T0, at=T0 + 3),
    _JOB_RUN.format(fire=T0 + 10, at=T0 + 11),
    "INSERT INTO runs (task, queue, state, eta, created_at, updated_at) "
    f"VALUES ('t', 'q', 'queued', 0, {T0 + 20}, {T0 + 20})",
]


async def check_migrated(store: Store) -> None:
    assert await store.schema_version() >= 10
    token = await store.get_token("old")
    assert (token.name, token.payloads) == ("old token", True)
    assert await store.fire_lags("default", T0) == [1.0, 3.0]


async def test_sqlite_version_9_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v9.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE cronbus_migrations (version INTEGER PRIMARY KEY, name TEXT, "
                 "applied_at REAL)")  # fmt: skip
    for migration in migrations.load("sqlite")[:9]:
        conn.executescript(migration.sql)
        conn.execute(
            "INSERT INTO cronbus_migrations VALUES (?, ?, 0)", (migration.version, migration.name)
        )
    for statement in SEED:
        conn.execute(statement.format(spaces="'[\"default\"]'"))
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.close()


async def test_postgres_version_9_is_migrated(request: pytest.FixtureRequest) -> None:
    url = await pg_store_url(request)
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        await conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        await conn.execute(pq.CREATE_MIGRATIONS)
        for migration in migrations.load("postgres")[:9]:
            await conn.execute(migration.sql.encode())
            await conn.execute(pq.RECORD_MIGRATION, (migration.version, migration.name))
        for statement in SEED:
            await conn.execute(statement.format(spaces="'{default}'").encode())
    store = open_store(url)
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.close()
