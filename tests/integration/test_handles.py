"""``RunHandle.wait``: a run that ends dead or cancelled raises RunFailedError with its error;
``raise_error=False`` returns it. Real workers on real SQLite files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App, RunFailedError, RunState, Worker
from cronbus.config import Settings
from cronbus.handle import RunEndedError
from cronbus.testing import run_until_idle_async

app = App()


@app.task
def explode(message: str) -> None:
    """Fail at once: no retries, so the run is dead after one attempt."""
    raise ConnectionError(message)


@app.task
def fine() -> str:
    """Succeed."""
    return "ok"


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[App]:
    """The module's app on a fresh SQLite file."""
    app.use_store(f"sqlite:///{tmp_path / 'handles.db'}")
    app.settings = Settings(lease_seconds=3.0, poll_seconds=1.0, grace_seconds=5.0)
    async with app:
        yield app


@pytest.fixture
async def worker(opened: App) -> AsyncIterator[Worker]:
    """A running worker of the app."""
    w = Worker(opened, concurrency=2, queues="default")
    task = asyncio.create_task(w.run())
    yield w
    w.request_stop(hurry=True)
    await asyncio.wait_for(task, 10)


async def test_wait_on_a_dead_run_raises_with_the_error(opened: App, worker: Worker) -> None:
    handle = await explode.defer_async("db down\nsecond line")
    with pytest.raises(RunFailedError) as caught:
        await handle.wait_async(10)
    error = caught.value
    assert isinstance(error, RunEndedError)
    assert error.run_id == handle.id
    assert error.state is RunState.DEAD
    assert error.error_type == "ConnectionError"
    assert error.error_message == "db down\nsecond line"
    assert "raise ConnectionError(message)" in error.traceback
    # str() is one line; the traceback travels in a note, printed with the exception.
    assert str(error) == f"run {handle.id} of {explode.name} is dead: ConnectionError: db down"
    assert "raise ConnectionError(message)" in "".join(error.__notes__)


async def test_wait_without_raising_returns_the_dead_run(opened: App, worker: Worker) -> None:
    handle = await explode.defer_async("down")
    run = await handle.wait_async(10, raise_error=False)
    assert run.state is RunState.DEAD
    assert run.error is not None
    assert run.error.type == "ConnectionError"


async def test_wait_on_a_succeeded_run_returns_it(opened: App, worker: Worker) -> None:
    handle = await fine.defer_async()
    assert (await handle.wait_async(10)).result == "ok"


async def test_wait_on_a_cancelled_run_raises_without_an_error(opened: App) -> None:
    handle = await fine.defer_async(delay=60)
    assert await handle.cancel_async() is RunState.CANCELLED
    with pytest.raises(RunFailedError, match=r"is cancelled$") as caught:
        await handle.wait_async(1)
    assert isinstance(caught.value, RunEndedError)
    assert caught.value.error_type is None
    assert caught.value.traceback == ""
    assert (await handle.wait_async(1, raise_error=False)).state is RunState.CANCELLED


def test_blocking_wait_raises_too(tmp_path: Path) -> None:
    app.use_store(f"sqlite:///{tmp_path / 'sync.db'}")
    with app:
        handle = fine.defer(delay=60)
        handle.cancel()
        with pytest.raises(RunFailedError, match="is cancelled"):
            handle.wait(1)
        assert handle.wait(1, raise_error=False).state is RunState.CANCELLED


async def test_run_until_idle_raises_the_same_error(opened: App) -> None:
    handle = await explode.defer_async("gone")
    with pytest.raises(RunFailedError) as caught:
        await run_until_idle_async(opened)
    assert isinstance(caught.value, RunEndedError)
    assert caught.value.run_id == handle.id
    assert caught.value.error_type == "ConnectionError"
    assert caught.value.error_message == "gone"
    assert "raise ConnectionError(message)" in caught.value.traceback


async def test_run_until_idle_runs_the_apps_own_namespace(tmp_path: Path) -> None:
    billing = App(store=f"sqlite:///{tmp_path / 'billing.db'}", namespace="billing")

    @billing.task
    def add(a: int, b: int) -> int:
        return a + b

    async with billing:
        handle = await add.defer_async(2, 3)
        ran = await run_until_idle_async(billing)
        assert [run.id for run in ran] == [handle.id]
        assert (await handle.fetch_async()).result == 5
