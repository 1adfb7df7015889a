"""Real worker processes: SIGKILL loses nothing, SIGTERM drains."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apps import worker_app as tasks
from cronbus import App, AttemptOutcome, RunState
from cronbus.model import RunFilter, WorkerState

from .conftest import Workers, until, wait_exit

LEASE = "2"


@pytest.fixture
async def app(sqlite_url: str) -> AsyncIterator[App]:
    tasks.app.use_store(sqlite_url)
    async with tasks.app:
        yield tasks.app


async def succeeded(app: App) -> int:
    return (await app.store.count_runs()).get(RunState.SUCCEEDED, 0)


async def test_sigkill_of_a_worker_loses_no_run(app: App, workers: Workers, tmp_path: Path) -> None:
    runs, concurrency = 1000, 8
    out = str(tmp_path / "executions")
    await tasks.record.defer_many_async([[n, out, 0.02] for n in range(runs)])
    victim = workers.start(concurrency=concurrency, CRONBUS_LEASE_SECONDS=LEASE)
    survivor = workers.start(concurrency=concurrency, CRONBUS_LEASE_SECONDS=LEASE)

    async def some_done() -> bool:
        return await succeeded(app) >= 200

    await until(some_done)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    async def all_done() -> bool:
        return await succeeded(app) == runs

    await until(all_done, timeout=60)

    (victim_id,) = [
        w.id for w in await app.store.list_workers(app.clock.now()) if w.pid == victim.pid
    ]
    lost = 0
    for run in await app.store.list_runs(RunFilter(limit=runs)):
        assert run.state is RunState.SUCCEEDED
        for attempt in await app.store.list_attempts(run.id):
            if attempt.outcome is AttemptOutcome.LOST:
                assert attempt.worker_id == victim_id
                lost += 1
    executions = Counter(Path(out).read_text().split())
    assert set(executions) == {str(n) for n in range(runs)}
    twice = sum(count - 1 for count in executions.values())
    assert lost <= concurrency  # only what the killed worker held was in flight
    assert twice <= lost

    survivor.send_signal(signal.SIGTERM)
    assert await wait_exit(survivor, 20) == 0


async def test_sigterm_drains_running_attempts(app: App, workers: Workers, tmp_path: Path) -> None:
    out = tmp_path / "drain"
    first = await tasks.started_then_sleep.defer_async(str(out), 1.0)
    second = await tasks.started_then_sleep.defer_async(str(out), 1.0)
    proc = workers.start(concurrency=4)

    async def both_started() -> bool:
        return out.exists() and out.read_text().split() == ["started", "started"]

    await until(both_started)
    proc.send_signal(signal.SIGTERM)

    async def draining() -> bool:
        states = {w.state for w in await app.store.list_workers(app.clock.now())}
        return WorkerState.DRAINING in states or proc.poll() is not None

    await until(draining, timeout=10)
    late = await tasks.noop.defer_async()
    assert await wait_exit(proc, 20) == 0
    assert (await first.fetch_async()).state is RunState.SUCCEEDED
    assert (await second.fetch_async()).state is RunState.SUCCEEDED
    assert (await late.fetch_async()).state is RunState.QUEUED  # nothing claimed while draining
    (worker,) = await app.store.list_workers(app.clock.now())
    assert worker.state is WorkerState.STOPPED


async def test_sigterm_past_grace_requeues(app: App, workers: Workers, tmp_path: Path) -> None:
    out = tmp_path / "slow"
    handle = await tasks.wait_for_cancel.defer_async(str(out), 60.0)
    proc = workers.start(concurrency=2, CRONBUS_GRACE_SECONDS="0.2")
    await until(lambda: _exists(out))
    proc.send_signal(signal.SIGTERM)
    assert await wait_exit(proc, 20) == 0
    run = await handle.fetch_async()
    assert run.state is RunState.QUEUED
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.LOST


async def _exists(path: Path) -> bool:
    return path.exists()
