"""A worker's slot plan: a queue full of slow runs never takes the slot another queue's next
run needs, for a worker of named queues and for one serving every queue."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App, RunState, Worker
from cronbus.config import Settings

from .conftest import until

app = App()
gate = threading.Event()
"""Holds the slow runs until the test opens it."""


class Running:
    """How many slow bodies run at once, and the most there ever were."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        """One more runs."""
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        """One fewer runs."""
        with self.lock:
            self.now -= 1


running = Running()


@app.task(queue="slow", timeout=60)
def slow() -> None:
    """Hold a slot until the gate opens."""
    running.enter()
    try:
        gate.wait(30)
    finally:
        running.leave()


@app.task(queue="fast")
def fast() -> str:
    """Done at once."""
    return "quick"


@pytest.fixture
async def shop(tmp_path: Path) -> AsyncIterator[App]:
    """The module's app on a fresh SQLite file; the gate closed, the counts zero."""
    app.use_store(f"sqlite:///{tmp_path / 'slots.db'}")
    app.settings = Settings(lease_seconds=10.0, poll_seconds=0.5, grace_seconds=5.0)
    gate.clear()
    running.now = running.most = 0
    async with app:
        yield app
    gate.set()


async def serve(queues: str) -> tuple[Worker, asyncio.Task[None]]:
    """A running worker of four slots serving ``queues``."""
    worker = Worker(app, concurrency=4, queues=queues)
    return worker, asyncio.create_task(worker.run())


async def stop(worker: Worker, task: asyncio.Task[None]) -> None:
    """Open the gate and stop the worker."""
    gate.set()
    worker.request_stop()
    await asyncio.wait_for(task, 15)


async def _running(count: int) -> bool:
    return running.now == count


@pytest.mark.parametrize("queues", ["slow,fast", "*"])
async def test_a_slow_queue_leaves_a_slot_for_a_fast_one(shop: App, queues: str) -> None:
    worker, task = await serve(queues)
    try:
        # The * worker learns of the fast queue by serving it once.
        assert (await (await fast.defer_async()).wait_async(30)).result == "quick"
        slows = [await slow.defer_async() for _ in range(6)]
        try:
            await until(lambda: _running(3), 30)
        except AssertionError:
            # Say what was seen: too few started (claims stalled) or too many (a slot lost).
            states = [(await h.fetch_async()).state.value for h in slows]
            raise AssertionError(
                f"slow bodies running {running.now} (most {running.most}), runs {states}"
            ) from None
        quick = await fast.defer_async()
        assert (await quick.wait_async(30)).result == "quick"
        # The fast run went through the kept slot while the slow ones still held theirs.
        assert running.now == 3
        assert running.most == 3
        states = [(await h.fetch_async()).state for h in slows]
        assert states.count(RunState.RUNNING) == 3
        assert states.count(RunState.QUEUED) == 3
    finally:
        await stop(worker, task)
    assert running.most == 3
