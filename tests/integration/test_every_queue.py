"""A worker started without queues serves every queue (issue 9, item 11), fairly, including
queues first used after it started; on an SQLite file and on a PostgreSQL schema.

Idle polls are set to 30 s, far beyond the deadlines, so what is proved is that wake-ups and the
next due time bring the worker to the new queues, not the safety-net poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apps import worker_app as tasks
from contract.pg import pg_store_url
from cronbus import App, RunState, Worker
from cronbus.config import Settings
from cronbus.model import RunFilter

from .conftest import until

DEADLINE = 20.0
LONG_POLL = 30.0


@pytest.fixture(params=["sqlite", "postgres"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The test tasks' app on a fresh store of each kind, with idle polls longer than any test."""
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 'every.db'}"
    tasks.app.use_store(url)
    tasks.app.settings = Settings(lease_seconds=5.0, poll_seconds=LONG_POLL, grace_seconds=5.0)
    async with tasks.app:
        yield tasks.app


async def started(worker: Worker) -> asyncio.Task[None]:
    """Run ``worker`` in the background; return once it is in the registry."""
    running = asyncio.create_task(worker.run())
    app = worker.app

    async def registered() -> bool:
        found = await app.store.list_workers(app.clock.now())
        return any(w.id == worker.id for w in found)

    await until(registered, DEADLINE)
    return running


async def stopped(worker: Worker, running: asyncio.Task[None]) -> None:
    worker.request_stop(hurry=True)
    await asyncio.wait_for(running, DEADLINE)


async def queued_in(app: App, queue: str) -> int:
    return len(
        await app.store.list_runs(RunFilter(states=[RunState.QUEUED], queue=queue, limit=10_000))
    )


async def test_a_worker_without_queues_serves_three_queues_one_new(
    app: App, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    worker = Worker(app, concurrency=4)
    running = await started(worker)
    try:
        (info,) = await app.store.list_workers(app.clock.now())
        assert list(info.queues) == ["*"]
        first = await tasks.record.defer_async(1, out, queue="default")
        assert (await first.wait_async(DEADLINE)).state is RunState.SUCCEEDED
        # Queues no run had used when the worker started, nor when it last read the list.
        later = [
            await tasks.record.defer_async(2, out, queue="emails"),
            await tasks.record.defer_async(3, out, queue="bulk-emails"),
        ]
        for handle in later:
            assert (await handle.wait_async(DEADLINE)).state is RunState.SUCCEEDED
    finally:
        await stopped(worker, running)
    assert sorted(Path(out).read_text().split()) == ["1", "2", "3"]


async def test_a_lone_run_is_not_starved_by_a_deep_queue(app: App, tmp_path: Path) -> None:
    big = 1000
    for _ in range(big // 250):
        await tasks.record.defer_many_async(
            [[n, str(tmp_path / "big"), 0.004] for n in range(250)], queue="big"
        )
    worker = Worker(app, concurrency=2)
    running = await started(worker)
    try:
        # Deferred while the worker is busy with the big queue: the wake-up makes it read the
        # queues again, and the lone queue gets a share of the next claims.
        await until(lambda: _succeeded_at_least(app, 10), DEADLINE)
        lone = await tasks.record.defer_async(0, str(tmp_path / "lone"), queue="lone")
        assert (await lone.wait_async(DEADLINE)).state is RunState.SUCCEEDED
        left = await queued_in(app, "big")
    finally:
        await stopped(worker, running)
    assert left > big // 2, f"only {left} big runs were left when the lone one ended"


async def test_a_lone_run_deferred_before_the_worker_starts_goes_first(
    app: App, tmp_path: Path
) -> None:
    await tasks.record.defer_many_async(
        [[n, str(tmp_path / "big"), 0.002] for n in range(1000)], queue="big"
    )
    lone = await tasks.record.defer_async(0, str(tmp_path / "lone"), queue="lone")
    worker = Worker(app, concurrency=1)
    running = await started(worker)
    try:
        assert (await lone.wait_async(DEADLINE)).state is RunState.SUCCEEDED
        left = await queued_in(app, "big")
    finally:
        await stopped(worker, running)
    assert left >= 990  # one claim of one slot at a time: the lone queue's turn came second


async def test_a_scheduled_run_of_a_new_queue_runs_when_due(app: App, tmp_path: Path) -> None:
    worker = Worker(app, concurrency=2)
    running = await started(worker)
    try:
        handle = await tasks.record.defer_async(1, str(tmp_path / "out"), queue="later", delay=1.0)
        assert (await handle.wait_async(DEADLINE)).state is RunState.SUCCEEDED
    finally:
        await stopped(worker, running)
    (attempt,) = await app.store.list_attempts(handle.id)
    run = await app.store.get_run(handle.id)
    assert attempt.started_at >= run.eta


async def test_fewer_slots_than_queues_still_reach_the_last_queue(app: App, tmp_path: Path) -> None:
    """Named queues, one slot: each claim asks one queue; empty ones are passed over at once,
    not after an idle poll each."""
    worker = Worker(app, concurrency=1, queues="a,b,c,d,e")
    running = await started(worker)
    try:
        handles = [
            await tasks.record.defer_async(n, str(tmp_path / "out"), queue="e") for n in range(3)
        ]
        for handle in handles:
            assert (await handle.wait_async(DEADLINE)).state is RunState.SUCCEEDED
    finally:
        await stopped(worker, running)


async def test_a_worker_with_named_queues_leaves_other_queues_alone(
    app: App, tmp_path: Path
) -> None:
    worker = Worker(app, concurrency=2, queues="default")
    running = await started(worker)
    try:
        other = await tasks.record.defer_async(1, str(tmp_path / "o"), queue="other")
        mine = await tasks.record.defer_async(2, str(tmp_path / "m"))
        assert (await mine.wait_async(DEADLINE)).state is RunState.SUCCEEDED
        assert (await other.fetch_async()).state is RunState.QUEUED
        (info,) = await app.store.list_workers(app.clock.now())
        assert list(info.queues) == ["default"]
    finally:
        await stopped(worker, running)


async def _succeeded_at_least(app: App, n: int) -> bool:
    return (await app.store.count_runs()).get(RunState.SUCCEEDED, 0) >= n
