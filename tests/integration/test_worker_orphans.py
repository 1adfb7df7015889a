"""A worker gives up what it holds without knowing it (issue 9, item 10), on an SQLite file and
on a PostgreSQL schema.

- An orphaned claim: a "record and claim" transaction that committed but reported failure
  leaves a run ``running`` under the worker's id, unknown to the worker. The test makes one by
  claiming through the store under the worker's id before the worker starts; the worker's
  heartbeats must requeue it (a lost attempt that uses no retry), and the worker then runs it.
- A fence mismatch: the run the worker executes is held under the worker's id but another
  claim's fence; the worker abandons its attempt, and an outcome under its old fence is refused.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from psycopg import sql

from apps import worker_app as tasks
from contract.pg import pg_store_url, server_url
from cronbus import App, RunState, Worker
from cronbus.config import Settings
from cronbus.model import ClaimRequest, Outcome, QueueShare
from cronbus.states import AttemptOutcome

from .conftest import until

DEADLINE = 20.0
LEASE = 1.5  # heartbeats every 0.5 s: an orphan is found after two of them
OTHER_FENCE = 0x5EED_0F_0DD_F3A5E


@pytest.fixture(params=["sqlite", "postgres"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The test tasks' app on a fresh store of each kind, with short leases."""
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 'orphans.db'}"
    tasks.app.use_store(url)
    tasks.app.settings = Settings(lease_seconds=LEASE, poll_seconds=1.0, grace_seconds=2.0)
    async with tasks.app:
        yield tasks.app


def store_url(app: App) -> str:
    url = app.store_url
    assert url is not None
    return url


async def set_fence(app: App, run_id: int, fence: int) -> None:
    """Give the running run another claim's fence, behind the worker's back."""
    url = store_url(app)
    if url.startswith("sqlite"):
        conn = sqlite3.connect(urlsplit(url).path)
        try:
            with conn:
                conn.execute("UPDATE runs SET fence = ? WHERE id = ?", (fence, run_id))
        finally:
            conn.close()
        return
    schema = dict(parse_qsl(urlsplit(url).query))["schema"]
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as pg:
        await pg.execute(
            sql.SQL("UPDATE {}.runs SET fence = %s WHERE id = %s").format(sql.Identifier(schema)),
            (fence, run_id),
        )


async def start(worker: Worker) -> asyncio.Task[None]:
    return asyncio.create_task(worker.run())


async def stop(worker: Worker, running: asyncio.Task[None]) -> None:
    worker.request_stop(hurry=True)
    await asyncio.wait_for(running, DEADLINE)


async def test_a_claim_the_worker_never_learnt_of_is_requeued_and_then_run(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cronbus.worker")
    out = tmp_path / "out"
    handle = await tasks.record.defer_async(7, str(out))
    # The worker's claim committed, but its answer was lost: the run is the worker's, unknown.
    request = ClaimRequest(
        worker_id="W", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=LEASE
    )
    (orphan,) = await app.store.claim(request, app.clock.now())
    assert orphan.run_id == handle.id
    worker = Worker(app, concurrency=2, queues="default", name="W")
    running = await start(worker)
    try:

        async def succeeded() -> bool:
            return (await app.store.get_run(handle.id)).state is RunState.SUCCEEDED

        await until(succeeded, DEADLINE)
    finally:
        await stop(worker, running)
    run = await app.store.get_run(handle.id)
    assert run.result == 7
    first, second = await app.store.list_attempts(handle.id)
    assert first.id == orphan.attempt_id
    assert first.outcome is AttemptOutcome.LOST
    assert first.error is not None
    assert first.error.type == "OrphanedClaim"
    assert (second.outcome, second.worker_id) == (AttemptOutcome.SUCCEEDED, "W")
    assert out.read_text().splitlines() == ["7"]  # executed once, by the worker itself
    # Given up without using a retry: the run has no retries, and its one try is the second
    # attempt, which succeeded.
    assert run.max_attempts == 1
    assert f"run {handle.id} apps.worker_app.record attempt 2 (try 1 of 1) succeeded" in caplog.text
    assert "transaction whose commit was not confirmed; requeued" in caplog.text


async def test_a_worker_with_a_known_claim_does_not_take_it_for_an_orphan(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cronbus.worker")
    marks = tmp_path / "marks"
    # Runs longer than several heartbeats, each of which lists it: it must stay the worker's.
    handle = await tasks.started_then_sleep.defer_async(str(marks), 6 * LEASE / 3)
    worker = Worker(app, concurrency=1, queues="default", name="W")
    running = await start(worker)
    try:

        async def succeeded() -> bool:
            return (await app.store.get_run(handle.id)).state is RunState.SUCCEEDED

        await until(succeeded, DEADLINE)
    finally:
        await stop(worker, running)
    (only,) = await app.store.list_attempts(handle.id)
    assert only.outcome is AttemptOutcome.SUCCEEDED
    assert "OrphanedClaim" not in caplog.text
    assert "not confirmed" not in caplog.text


async def test_a_worker_abandons_an_attempt_held_under_another_fence(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cronbus.worker")
    marks = tmp_path / "marks"
    handle = await tasks.wait_for_cancel.defer_async(str(marks), 60.0)
    worker = Worker(app, concurrency=1, queues="default", name="W")
    running = await start(worker)
    try:

        async def started() -> bool:
            return marks.exists() and "started" in marks.read_text()

        await until(started, DEADLINE)
        (attempt,) = await app.store.list_attempts(handle.id)
        (claim,) = await app.store.heartbeat("W", app.clock.now(), LEASE)
        assert claim.fence != OTHER_FENCE
        await set_fence(app, handle.id, OTHER_FENCE)

        async def interrupted() -> bool:
            return "cancelled" in marks.read_text()

        # Long before the task's 60 s: the worker stopped it on a heartbeat.
        await until(interrupted, DEADLINE)
        assert f"run {handle.id}: lease lost; abandoning attempt {attempt.id}" in caplog.text

        # The abandoned attempt's outcome (here, as if late) is refused under its old fence.
        late = Outcome(
            run_id=handle.id,
            attempt_id=attempt.id,
            outcome=AttemptOutcome.SUCCEEDED,
            result_json='"late"',
            fence=claim.fence,
        )
        assert await app.store.complete([late], app.clock.now()) == [False]

        # Nobody knows the other fence: the worker gives that claim up as an orphan, and the
        # run is claimed again (by this worker) under a new attempt.
        async def requeued() -> bool:
            attempts = await app.store.list_attempts(handle.id)
            return len(attempts) >= 2

        await until(requeued, DEADLINE)
    finally:
        await stop(worker, running)
    first, *_ = await app.store.list_attempts(handle.id)
    assert first.outcome is AttemptOutcome.LOST
    assert first.error is not None
    assert first.error.type == "OrphanedClaim"
    run = await app.store.get_run(handle.id)
    assert run.result != "late"
    assert run.result != "cancelled"
    # Abandoned on the first heartbeat that showed the other fence, not only once the orphan
    # was given up (after which the run is no longer held at all).
    messages = [r.getMessage() for r in caplog.records]
    abandoned = messages.index(f"run {handle.id}: lease lost; abandoning attempt {attempt.id}")
    orphaned = next(i for i, m in enumerate(messages) if "was claimed for worker W" in m)
    assert abandoned < orphaned
    # The interrupted attempt's own return value ("cancelled") was never recorded.
    assert "outcome succeeded dropped" not in caplog.text
