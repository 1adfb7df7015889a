"""An in-process worker over a real SQLite file, for engine tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from apps.worker_app import app as worker_app
from cronbus import App, Worker
from cronbus.config import Settings
from integration.http_targets import Targets


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll ``check`` until it holds, failing the test after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.005)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    """The test tasks' app, open on a fresh SQLite file with short leases."""
    worker_app.use_store(f"sqlite:///{tmp_path / 'worker.db'}")
    worker_app.settings = Settings(lease_seconds=3.0, poll_seconds=1.0, grace_seconds=5.0)
    async with worker_app:
        yield worker_app


@pytest.fixture
async def worker(app: App) -> AsyncIterator[Worker]:
    """A running worker of ``app`` with four slots."""
    w = Worker(app, concurrency=4, queues="default")
    task = asyncio.create_task(w.run())
    yield w
    w.request_stop(hurry=True)
    await asyncio.wait_for(task, 10)


@pytest.fixture
async def targets() -> AsyncIterator[Targets]:
    """A loopback HTTP server that records what webhooks receive."""
    server = Targets()
    await server.start()
    yield server
    await server.stop()
