"""Fences and clocks of run leases (see :mod:`cronbus.store.fencing`), on both stores.

- A repeated attempt id does not pass the fence: the old owner's claim is undone by hand and the
  attempt sequence set back, as a server crash can do to an asynchronous commit, so the new
  owner gets the very attempt id the old one holds; only the claim's random fence tells them
  apart.
- A completion tried again after an ambiguous commit (it was recorded, the caller could not
  know) is reported as recorded, once; a different outcome or fence is still refused.
- On PostgreSQL leases are timed by the server's clock: a caller whose clock is 30 s ahead or
  behind neither reaps a fresh lease nor moves a lease's expiry.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url
from cronbus.model import ClaimedRun, ClaimRequest, NewRun, Outcome, QueueShare
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store, open_store
from cronbus.store.postgres import PostgresStore
from cronbus.store.sqlite import SQLiteStore

T0 = 1_700_000_000.0
LEASE = 30.0
SKEW = 30.0
SLACK = 5.0  # a busy machine's delay between reading the time and the statement


def request(worker: str, lease: float = LEASE) -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker, queues=[QueueShare(name="q", limit=1)], limit=1, lease_seconds=lease
    )


def succeeded(c: ClaimedRun, result: str, *, fence: int | None = None) -> Outcome:
    return Outcome(
        run_id=c.run_id,
        attempt_id=c.attempt_id,
        outcome=AttemptOutcome.SUCCEEDED,
        result_json=result,
        fence=c.fence if fence is None else fence,
    )


async def raw(store: Store, statements: list[tuple[str, tuple[object, ...]]]) -> None:
    """Run statements on the store's tables behind its back, in one transaction."""
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.url.removeprefix("sqlite:///"))
        try:
            with conn:
                for text, params in statements:
                    conn.execute(text.replace("%s", "?"), params)
        finally:
            conn.close()
        return
    assert isinstance(store, PostgresStore)
    async with await psycopg.AsyncConnection.connect(server_url()) as pg:
        await pg.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(store.schema)))
        for text, params in statements:
            await pg.execute(text.encode(), params)
        await pg.commit()


def set_back_attempts(store: Store, attempt_id: int) -> tuple[str, tuple[object, ...]]:
    """The statement that makes the next attempt id ``attempt_id`` again."""
    if isinstance(store, SQLiteStore):
        return "UPDATE sqlite_sequence SET seq = %s WHERE name = 'attempts'", (attempt_id - 1,)
    return "SELECT setval('attempts_id_seq', %s, false)", (attempt_id,)


async def test_a_repeated_attempt_id_does_not_pass_the_fence(store: Store) -> None:
    (d,) = await store.defer([NewRun(task="t", queue="q", eta=T0)], T0)
    (a,) = await store.claim(request("A"), T0)
    # What a crash can do to an asynchronous commit: A's claim and its attempt are gone, and
    # the sequence hands A's attempt id out again.
    await raw(
        store,
        [
            (
                "UPDATE runs SET state = 'queued', attempts = 0, lease_owner = NULL, "
                "lease_expires = NULL, attempt_id = NULL, fence = NULL WHERE id = %s",
                (d.id,),
            ),
            ("DELETE FROM attempts WHERE id = %s", (a.attempt_id,)),
            set_back_attempts(store, a.attempt_id),
        ],
    )
    (b,) = await store.claim(request("B"), T0 + 1)
    assert (b.run_id, b.attempt_id, b.number) == (a.run_id, a.attempt_id, a.number)
    assert b.fence != a.fence

    assert await store.complete([succeeded(a, '"A"')], T0 + 2) == [False]
    run = await store.get_run(d.id)
    assert (run.state, run.lease_owner) == (RunState.RUNNING, "B")
    assert await store.complete([succeeded(b, '"B"')], T0 + 3) == [True]
    run = await store.get_run(d.id)
    assert (run.state, run.result) == (RunState.SUCCEEDED, "B")
    # A late retry of A's completion is not mistaken for a repeat of B's.
    assert await store.complete([succeeded(a, '"A"')], T0 + 4) == [False]
    (attempt,) = await store.list_attempts(d.id)
    assert (attempt.worker_id, attempt.result) == ("B", "B")


async def test_the_heartbeat_reports_each_attempt_with_its_fence(store: Store) -> None:
    await store.defer([NewRun(task="t", queue="q", eta=T0)], T0)
    (c,) = await store.claim(request("w"), T0)
    (held,) = await store.heartbeat("w", T0 + 1, LEASE)
    assert (held.run_id, held.attempt_id, held.fence) == (c.run_id, c.attempt_id, c.fence)


async def test_a_completion_retried_after_an_ambiguous_commit_counts_as_recorded(
    store: Store,
) -> None:
    first, second = await store.defer([NewRun(task="t", queue="q", eta=T0)] * 2, T0)
    (c,) = await store.claim(request("w"), T0)
    done = succeeded(c, "1")
    assert await store.complete([done], T0 + 1) == [True]
    # The caller saw the commit fail and tries again: recorded, and nothing changes.
    retried, claimed = await store.complete_and_claim([done], request("w"), T0 + 2)
    assert retried == [True]
    assert [r.run_id for r in claimed] == [second.id]
    run = await store.get_run(first.id)
    assert (run.state, run.result, run.finished_at) == (RunState.SUCCEEDED, 1, T0 + 1)
    (attempt,) = await store.list_attempts(first.id)
    assert (attempt.outcome, attempt.finished_at) == (AttemptOutcome.SUCCEEDED, T0 + 1)
    # Another outcome, or another fence, for that attempt is a late worker's: refused.
    failed = Outcome(
        run_id=c.run_id, attempt_id=c.attempt_id, outcome=AttemptOutcome.FAILED, fence=c.fence
    )
    assert await store.complete([failed], T0 + 3) == [False]
    assert await store.complete([succeeded(c, "1", fence=c.fence ^ 1)], T0 + 3) == [False]


async def test_a_late_worker_is_refused_even_with_the_outcome_the_run_ended_with(
    store: Store,
) -> None:
    (d,) = await store.defer([NewRun(task="t", queue="q", eta=T0)], T0)
    (late,) = await store.claim(request("late", lease=1), T0)
    assert await store.reap(T0 + 2, max_lost=10) == [d.id]
    (now,) = await store.claim(request("w"), T0 + 3)
    assert await store.complete([succeeded(now, "1")], T0 + 4) == [True]
    assert await store.complete([succeeded(late, "1")], T0 + 5) == [False]


# -- PostgreSQL: the server's clock ---------------------------------------------------------------
@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store with its default lease clock: the server's."""
    store = open_store(await pg_store_url(request))
    assert isinstance(store, PostgresStore)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def claimed_now(store: Store, worker: str, now: float, lease: float = LEASE) -> ClaimedRun:
    await store.defer([NewRun(task="t", queue="q", eta=now - 60)], now - 60)
    (c,) = await store.claim(request(worker, lease), now)
    return c


async def lease_left(store: PostgresStore, run_id: int) -> float:
    """Seconds of the run's lease left, by the server's clock (the test machine's may differ)."""
    query = "SELECT lease_expires - extract(epoch FROM clock_timestamp()) FROM runs WHERE id = %s"
    async with await psycopg.AsyncConnection.connect(server_url()) as pg:
        await pg.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(store.schema)))
        row = await (await pg.execute(query.encode(), (run_id,))).fetchone()
    assert row is not None
    return float(row[0])


async def test_a_reaper_whose_clock_is_ahead_does_not_reap_a_fresh_lease(
    pg: PostgresStore,
) -> None:
    c = await claimed_now(pg, "honest", time.time())
    assert await pg.reap(time.time() + LEASE + SKEW, max_lost=10) == []
    assert (await pg.get_run(c.run_id)).state is RunState.RUNNING


async def test_a_claimer_whose_clock_is_off_gets_the_servers_lease(pg: PostgresStore) -> None:
    behind = await claimed_now(pg, "behind", time.time() - SKEW)
    assert LEASE - SLACK < await lease_left(pg, behind.run_id) <= LEASE
    ahead = await claimed_now(pg, "ahead", time.time() + SKEW)
    assert LEASE - SLACK < await lease_left(pg, ahead.run_id) <= LEASE
    assert await pg.reap(time.time(), max_lost=10) == []


async def test_a_heartbeat_sets_the_servers_lease_whatever_the_workers_clock(
    pg: PostgresStore,
) -> None:
    c = await claimed_now(pg, "w", time.time(), lease=5.0)
    for skew in (-SKEW, +SKEW):
        (held,) = await pg.heartbeat("w", time.time() + skew, LEASE)
        assert held.fence == c.fence
        assert LEASE - SLACK < await lease_left(pg, c.run_id) <= LEASE
    # A worker behind by more than its lease does not lose the lease to an honest reaper.
    assert await pg.reap(time.time(), max_lost=10) == []


async def test_a_lease_expires_by_the_servers_clock(pg: PostgresStore) -> None:
    c = await claimed_now(pg, "w", time.time(), lease=0.2)
    deadline = time.monotonic() + 20
    reaped: list[int] = []
    while not reaped and time.monotonic() < deadline:
        reaped = await pg.reap(T0, max_lost=10)  # a clock years behind does not matter
        await asyncio.sleep(0.05)  # polling: the lease runs out on the server's clock
    assert reaped == [c.run_id]
