"""Point 9 of the core issue: a deep queue cannot delay another queue by more than a batch."""

from __future__ import annotations

import asyncio
from pathlib import Path

from apps import worker_app as tasks
from cronbus import App, RunState, Worker


async def test_a_deep_queue_does_not_delay_another(app: App, tmp_path: Path) -> None:
    concurrency = 8
    for _ in range(100):
        await tasks.noop.defer_many_async([[] for _ in range(1000)], queue="bulk")
    assert (await app.store.count_runs())[RunState.QUEUED] == 100_000
    urgent = await tasks.record.defer_async(1, str(tmp_path / "urgent"), queue="urgent")

    worker = Worker(app, concurrency=concurrency, queues="bulk,urgent")
    running = asyncio.create_task(worker.run())
    try:
        run = await urgent.wait_async(30)
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 30)
    assert run.state is RunState.SUCCEEDED
    # Attempt ids grow in claim order: the urgent run was in the worker's first claim batch.
    (attempt,) = await app.store.list_attempts(urgent.id)
    assert attempt.id <= concurrency


async def test_priorities_order_runs_within_a_queue(app: App, tmp_path: Path) -> None:
    path = tmp_path / "order"
    for n, priority in enumerate([0, 5, -3, 9, 5]):
        await tasks.record.defer_async(n, str(path), priority=priority)
    worker = Worker(app, concurrency=1)
    running = asyncio.create_task(worker.run())
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while (await app.store.count_runs()).get(RunState.SUCCEEDED, 0) < 5:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 10)
    assert path.read_text().split() == ["3", "1", "4", "0", "2"]
