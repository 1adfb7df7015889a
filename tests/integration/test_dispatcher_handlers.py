"""Sync handlers run on the dispatcher's own threads, and a stuck one is interrupted at its
timeout while other subscriptions keep flowing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.events import Event, make_event
from cronbus.events.dispatcher import Dispatcher
from cronbus.events.handlers import THREAD_PREFIX
from cronbus.events.states import DeliveryState
from cronbus.worker.interrupt import Interrupted, current_token
from integration.conftest import until

D = DeliveryState


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[App]:
    """An app open on a fresh SQLite file."""
    app = App(f"sqlite:///{tmp_path / 'bus.db'}")
    async with app:
        yield app


async def test_a_stuck_sync_handler_is_interrupted_and_others_keep_flowing(bus: App) -> None:
    interrupted: list[str] = []
    cancelled: list[str | None] = []
    threads: set[str] = set()
    fine: list[int] = []

    @bus.subscribe(topic="t", name="stuck", types=["stuck"], timeout=0.3, max_attempts=1)
    def stuck(event: Event) -> None:
        threads.add(threading.current_thread().name)
        try:
            while True:  # ignores its cancel token: only a forced interrupt stops it
                time.sleep(0.01)
        except Interrupted as exc:
            interrupted.append(exc.reason)
            cancelled.append(current_token().reason)
            raise

    @bus.subscribe(topic="t", name="fine", types=["fine"])
    def ok(event: Event) -> None:
        threads.add(threading.current_thread().name)
        fine.append(event.data["n"])

    stopping = asyncio.Event()
    dispatcher = Dispatcher(bus, lease_seconds=3.0, poll_seconds=0.5, handler_threads=2)
    running = asyncio.create_task(dispatcher.run(stopping))
    try:
        await until(lambda: _now({"stuck", "fine"} <= set(dispatcher.pushers)), timeout=10)
        await bus.publish_many_async("t", [make_event("stuck", {"n": i}) for i in range(4)])
        await bus.publish_many_async("t", [make_event("fine", {"n": i}) for i in range(30)])
        # Four stuck pushes on two threads: without interrupts, "fine" would never get one.
        await until(lambda: _now(len(fine) == 30), timeout=30)

        async def all_dead() -> bool:
            return (await bus.subscriptions.counts("stuck")).get(D.DEAD, 0) == 4

        await until(all_dead, timeout=30)
        await until(lambda: _now(len(interrupted) == 4), timeout=10)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
    dead = await bus.subscriptions.deliveries("stuck", states=["dead"])
    assert {d.last_error for d in dead} == {"timed out after 0.3s"}
    assert cancelled == ["timeout"] * 4  # the token was set before the thread was interrupted
    assert threads
    assert all(name.startswith(THREAD_PREFIX) for name in threads), threads
    assert dispatcher.handler_pool.abandoned == 0  # every interrupted thread came back


async def _now(value: bool) -> bool:
    return value
