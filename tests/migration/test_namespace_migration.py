"""Migrations 0006 and 0008 (both stores) on a store an older cronbus left at version 5: every run,
job, topic, subscription and worker lands in the `default` namespace, where listings, claims and
counts find them; workers know no tasks and are not asked to drain; runs' payloads learn their
creation time (a run without a payload row gets an empty one), so time windows find them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url
from cronbus.model import ClaimRequest, QueueShare, RunFilter
from cronbus.states import RunState
from cronbus.store import Store, migrations, open_store
from cronbus.store.postgres import parse_url
from cronbus.store.postgres import sql as pq

T0 = 1_700_000_000.0
# Version 5's rows, valid in both dialects: two runs (one queued, one succeeded), a job, a topic,
# a subscription and a worker.
_RUN = (
    "INSERT INTO runs (task, queue, state, eta, created_at, updated_at, finished_at) "
    "VALUES ('t', 'q', '{state}', 0, {at}, {at}, {finished})"
)
SEED = [
    _RUN.format(state="queued", at=T0, finished="NULL"),
    _RUN.format(state="succeeded", at=T0 + 1, finished=T0 + 2),
    "INSERT INTO run_payloads (run_id, args, kwargs) VALUES (1, '[7]', '{}')",
    "INSERT INTO jobs (name, task, trigger, args, kwargs, queue, priority, max_attempts, "
    "misfire, misfire_grace, misfire_max, overlap, children, calendars, source, spec_hash, "
    "created_at, updated_at) VALUES ('nightly', 't', '{\"kind\": \"every\", \"seconds\": 60}', "
    "'[]', '{}', 'q', 0, 1, 'once', 1, 100, 'allow', '[]', '[]', 'api', 'h', 0, 0)",
    "INSERT INTO topics (name, last_offset, created_at) VALUES ('orders', 0, 0)",
    "INSERT INTO subscriptions (name, topic, target, filter, policy, origin, start, cursor, "
    'created_at, updated_at) VALUES (\'hook\', \'orders\', \'{"kind": "task", "task": "t"}\', '
    "'{}', '{}', 'api', 'latest', 0, 0, 0)",
]
SQLITE_WORKER = (
    "INSERT INTO workers (id, host, pid, queues, labels, concurrency, version, started_at, "
    "heartbeat_at, state) VALUES ('w1', 'h', 1, '[\"q\"]', '[]', 4, '1', 0, 0, 'alive')"
)
PG_WORKER = (
    "INSERT INTO workers (id, host, pid, queues, labels, concurrency, version, started_at, "
    "heartbeat_at, state) VALUES ('w1', 'h', 1, '{q}', '{}', 4, '1', 0, 0, 'alive')"
)


async def check_migrated(store: Store) -> None:
    assert await store.schema_version() >= 8
    runs = await store.list_runs(RunFilter(namespace="default"))
    assert [(r.id, r.namespace) for r in runs] == [(2, "default"), (1, "default")]
    assert await store.list_runs(RunFilter(namespace="other")) == []
    done = await store.list_runs(RunFilter(namespace="default", states=[RunState.SUCCEEDED]))
    assert [r.id for r in done] == [2]
    assert await store.count_runs("default") == {RunState.QUEUED: 1, RunState.SUCCEEDED: 1}
    # Creation times reach the payloads (run 2 had no payload row: it gets one, empty).
    since = await store.list_runs(RunFilter(namespace="default", created_after=T0 + 1))
    assert [(r.id, r.args) for r in since] == [(2, [])]
    assert await store.list_runs(RunFilter(namespace="default", created_after=T0 + 5)) == []
    assert await store.runs_per_minute("default", T0, T0 + 60) == [
        (float(60 * (int(T0 + 2) // 60)), "succeeded", 1)
    ]
    assert [j.spec.namespace for j in await store.list_jobs("default")] == ["default"]
    assert (await store.get_topic("orders")).namespace == "default"
    assert [s.spec.namespace for s in await store.list_subscriptions(namespace="default")] == [
        "default"
    ]
    (worker,) = await store.list_workers(0.0, "default")
    assert (worker.namespace, tuple(worker.tasks), worker.drain_requested) == ("default", (), False)
    request = ClaimRequest(
        worker_id="w1", queues=[QueueShare(name="q", limit=5)], limit=5, lease_seconds=30.0
    )
    (claimed,) = await store.claim(request, T0 + 10)
    assert (claimed.run_id, claimed.args) == (1, [7])


async def test_sqlite_version_5_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE cronbus_migrations (version INTEGER PRIMARY KEY, name TEXT, "
                 "applied_at REAL)")  # fmt: skip
    for migration in migrations.load("sqlite")[:5]:
        conn.executescript(migration.sql)
        conn.execute(
            "INSERT INTO cronbus_migrations VALUES (?, ?, 0)", (migration.version, migration.name)
        )
    for statement in [*SEED, SQLITE_WORKER]:
        conn.execute(statement)
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.close()


async def test_postgres_version_5_is_migrated(request: pytest.FixtureRequest) -> None:
    url = await pg_store_url(request)
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        await conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        await conn.execute(pq.CREATE_MIGRATIONS)
        for migration in migrations.load("postgres")[:5]:
            await conn.execute(migration.sql.encode())
            await conn.execute(pq.RECORD_MIGRATION, (migration.version, migration.name))
        for statement in [*SEED, PG_WORKER]:
            await conn.execute(statement.encode())
    store = open_store(url)
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.close()
