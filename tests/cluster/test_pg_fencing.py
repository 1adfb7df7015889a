"""Invariant 3 with real processes on PostgreSQL: a worker frozen (SIGSTOP) past its lease comes
back and finishes its attempt, but the run was reclaimed and executed again meanwhile; its late
completion is refused, and neither the run's result nor the attempts change.

The late worker would also learn of its lost lease from its next heartbeat, and then abandon
the attempt without reporting it; to test the store's fence, not that race, the test holds the
late worker's registry row locked while it resumes, so its heartbeat waits until its
completion has been refused.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
from psycopg import sql

from apps.cluster_app import slow
from contract.pg import server_url
from cronbus import App, AttemptOutcome, RunState

from .conftest import wait_exit
from .pg_conftest import Cluster, Db, Proc, cluster, db, pg_app, pg_url, poll, worker_id

__all__ = ["cluster", "db", "pg_app", "pg_url"]  # fixtures
pytestmark = pytest.mark.slow

LEASE = 2.0
SECONDS = 3.0  # each execution of the task; longer than the lease
KEY = "fenced"
REFUSED = "lease no longer held; outcome succeeded dropped"


@pytest.mark.parametrize("resume", ["while-second-attempt-runs", "after-run-succeeded"])
async def test_late_completion_of_a_reclaimed_attempt_is_refused(
    pg_app: App, cluster: Cluster, db: Db, resume: str
) -> None:
    app = pg_app
    env = {"CRONBUS_LEASE_SECONDS": str(LEASE)}
    late = cluster.worker("late", concurrency=1, **env)
    late_id = await worker_id(app, late)
    handle = await slow.defer_async(KEY, SECONDS)
    await started_by(db, late)
    late.signal(signal.SIGSTOP)
    stopped = time.time()

    other = cluster.worker("other", concurrency=1, **env)
    other_id = await worker_id(app, other)
    await started_by(db, other, timeout=LEASE * 5)
    if resume == "after-run-succeeded":

        async def succeeded() -> bool:
            return (await handle.fetch_async()).state is RunState.SUCCEEDED

        await poll(succeeded, SECONDS * 3, what="the second attempt succeeded")
    else:
        assert (await handle.fetch_async()).state is RunState.RUNNING

    async with heartbeat_held(db.schema, late_id):
        late.signal(signal.SIGCONT)
        resumed = time.time()
        await poll(lambda: refused(late), 10, what="the late completion refused")
    # The lease ran out a lease after the last heartbeat, which came at most a heartbeat
    # interval (a third of a lease) before the stop: the late worker slept past its lease.
    assert resumed - stopped > LEASE * (1 - 1 / 3)

    async def heartbeat_after() -> bool:
        beats = {w.id: w.heartbeat_at for w in await app.store.list_workers(time.time())}
        return beats[late_id] > resumed

    await poll(heartbeat_after, 10, what="the late worker's next heartbeat")
    run = await handle.wait_async(timeout=SECONDS * 3)
    assert run.state is RunState.SUCCEEDED
    assert run.result == other.pid, "the late attempt's result overwrote the run's"
    first, second = await app.store.list_attempts(handle.id)
    assert (first.worker_id, first.outcome) == (late_id, AttemptOutcome.LOST)
    assert first.error is not None
    assert first.error.type == "LeaseExpired"
    assert first.result is None
    assert (second.worker_id, second.outcome) == (other_id, AttemptOutcome.SUCCEEDED)
    assert second.result == other.pid

    ends = dict(await db.rows("SELECT pid, at FROM executions WHERE phase = 'end'"))
    assert set(ends) == {late.pid, other.pid}  # both executions finished
    if resume == "while-second-attempt-runs":
        assert ends[late.pid] < ends[other.pid]  # the late one came while the other ran
    assert late.alive, late.output()
    for proc in (late, other):
        proc.signal(signal.SIGTERM)
        assert await wait_exit(proc.popen, 20) == 0, proc.output()


async def started_by(db: Db, proc: Proc, timeout: float = 20) -> None:
    """Wait until ``proc`` has started executing the task."""
    query = "SELECT count(*) FROM executions WHERE key = %s AND phase = 'start' AND pid = %s"

    async def started() -> bool:
        return int(await db.value(query, (KEY, proc.pid))) > 0

    await poll(started, timeout, every=0.05, what=f"{proc.name} started the task")


async def refused(proc: Proc) -> bool:
    """Whether ``proc`` logged that the store refused its completion (the fence)."""
    return REFUSED in proc.log.read_text(errors="replace")


@asynccontextmanager
async def heartbeat_held(schema: str, worker: str) -> AsyncIterator[None]:
    """Hold a worker's registry row locked, so that its heartbeats wait."""
    lock = sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(
        sql.Identifier(schema, "workers")
    )
    connect = psycopg.AsyncConnection.connect(server_url(), autocommit=True)
    async with await connect as conn, conn.transaction():
        assert await (await conn.execute(lock, (worker,))).fetchall()
        yield
