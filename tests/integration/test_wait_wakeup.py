"""``handle.wait()`` is woken by the run's end, from another process, on both stores.

The waiting app and the working app open the store separately (two processes' worth of wake-up
sockets or LISTEN connections) and the waits' safety-net poll is set to an hour, so only a
wake-up can explain a wait that returns. Nobody pays while nobody waits: no "ended" nudge is
registered (SQLite) or NOTIFYed (PostgreSQL) once the last wait is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url
from cronbus import App, RunFailedError, RunState, Worker
from cronbus.config import Settings
from cronbus.errors import RunTimeoutError
from cronbus.handle import RunHandle
from cronbus.model import FanOutKind
from cronbus.run_context import RunContext
from cronbus.store import SQLiteStore
from cronbus.store.postgres import PostgresStore
from cronbus.waiters import waiters
from integration.conftest import until

T = TypeVar("T")
DEADLINE = 20.0
app = App()
gate = threading.Event()


@app.task
def gated() -> str:
    """Finish once the test opens the gate."""
    if not gate.wait(30):
        raise TimeoutError("the gate stayed shut")
    return "done"


@app.task
def broken() -> None:
    """Fail once the gate opens (no retries: dead)."""
    gate.wait(30)
    raise ValueError("broken on purpose")


@app.task
def shard(ctx: RunContext) -> int:
    """One shard: waits for the gate."""
    gate.wait(30)
    return ctx.shard_index or 0


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each backend."""
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'wait.db'}"


@pytest.fixture
async def apps(url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[App, App]]:
    """The working app and a watching app, each with its own opening of the store."""
    monkeypatch.setattr("cronbus.waiters.SAFETY_POLL_SECONDS", 3600.0)
    monkeypatch.setattr("cronbus.waiters.LINGER_SECONDS", 0.0)
    gate.clear()
    app.use_store(url)
    app.settings = Settings(lease_seconds=5.0, poll_seconds=1.0, grace_seconds=5.0)
    watcher = App()
    watcher.use_store(url)
    async with app, watcher:
        yield app, watcher
    gate.set()


@asynccontextmanager
async def working(of: App) -> AsyncIterator[Worker]:
    """A worker of ``of`` until the block ends."""
    worker = Worker(of, concurrency=4, queues="*")
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        gate.set()
        worker.request_stop(hurry=True)
        await asyncio.wait_for(task, 15)


async def woken(wait: Awaitable[T]) -> T:
    """A wait without a timeout of its own, under the test's deadline: with the safety-net
    poll at an hour, only a wake-up makes it return in time."""
    return await asyncio.wait_for(wait, DEADLINE)


def waiting_on(watcher: App, run_id: int) -> Callable[[], Awaitable[bool]]:
    """Whether the watcher's process has a wait registered on ``run_id``."""
    return holds(lambda: run_id in waiters(watcher.store)._waits)


def holds(condition: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """A plain condition as ``until`` checks it."""

    async def check() -> bool:
        return condition()

    return check


async def test_a_wait_returns_when_another_process_completes_the_run(
    apps: tuple[App, App],
) -> None:
    worker_app, watcher = apps
    handle = await gated.defer_async()
    watched = RunHandle(watcher, handle.id)
    async with working(worker_app):
        waiting = asyncio.create_task(woken(watched.wait_async()))
        await until(waiting_on(watcher, handle.id))
        gate.set()
        run = await waiting
    assert (run.state, run.result) == (RunState.SUCCEEDED, "done")


async def test_waits_on_several_runs_share_one_listener(apps: tuple[App, App]) -> None:
    worker_app, watcher = apps
    handles = [await gated.defer_async() for _ in range(5)]
    async with working(worker_app):
        waits = [asyncio.create_task(woken(RunHandle(watcher, h.id).wait_async())) for h in handles]
        await until(holds(lambda: all(h.id in waiters(watcher.store)._waits for h in handles)))
        listener = waiters(watcher.store)._listener
        gate.set()
        runs = await asyncio.gather(*waits)
    assert {r.state for r in runs} == {RunState.SUCCEEDED}
    assert waiters(watcher.store)._listener in (listener, None)


async def test_a_dead_run_raises_and_without_raising_is_returned(apps: tuple[App, App]) -> None:
    worker_app, watcher = apps
    handle = await broken.defer_async()
    watched = RunHandle(watcher, handle.id)
    async with working(worker_app):
        raising = asyncio.create_task(woken(watched.wait_async()))
        returning = asyncio.create_task(woken(watched.wait_async(raise_error=False)))
        await until(waiting_on(watcher, handle.id))
        gate.set()
        with pytest.raises(RunFailedError, match="ValueError: broken on purpose"):
            await raising
        run = await returning
    assert run.state is RunState.DEAD


async def test_a_cancel_in_another_process_ends_the_wait(apps: tuple[App, App]) -> None:
    _, watcher = apps
    handle = await gated.defer_async(delay=3600)  # nobody works: it stays scheduled
    waiting = asyncio.create_task(woken(RunHandle(watcher, handle.id).wait_async()))
    await until(waiting_on(watcher, handle.id))
    assert await handle.cancel_async() is RunState.CANCELLED
    with pytest.raises(RunFailedError, match="cancelled"):
        await waiting


async def test_a_fan_out_parent_is_awaited_until_its_children_end(
    apps: tuple[App, App],
) -> None:
    worker_app, watcher = apps
    handle = await shard.defer_async(shards=3)
    async with working(worker_app):
        waiting = asyncio.create_task(woken(RunHandle(watcher, handle.id).wait_async()))
        await until(waiting_on(watcher, handle.id))
        gate.set()
        run = await waiting
    assert run.state is RunState.SUCCEEDED
    assert run.children is not None
    assert (run.children.kind, run.children.succeeded) == (FanOutKind.SHARDS, 3)


async def test_a_timeout_still_raises(apps: tuple[App, App]) -> None:
    _, watcher = apps
    handle = await gated.defer_async(delay=3600)
    with pytest.raises(RunTimeoutError, match=r"still scheduled after 0\.2 seconds"):
        await RunHandle(watcher, handle.id).wait_async(0.2)
    assert handle.id not in waiters(watcher.store)._waits


async def ended_registered(store: SQLiteStore) -> bool:
    """Whether some process registered for the "ended" channel in the SQLite store."""
    rows = await store._rows("SELECT channels FROM wakeups")
    return any("ended" in str(row[0]).split(",") for row in rows)


async def finished(of: App, run_id: int) -> None:
    """Wait (by reading, as a test does, never by ``wait``) until the run ended."""

    async def ended() -> bool:
        return (await of.store.get_run(run_id)).state.terminal

    await until(ended, 20)


def not_(check: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
    """The negation of ``check``."""

    async def negated() -> bool:
        return not await check()

    return negated


async def test_nobody_is_nudged_when_nobody_waits(url: str, apps: tuple[App, App]) -> None:
    worker_app, watcher = apps
    store = watcher.store
    async with contextlib.AsyncExitStack() as stack:
        heard: asyncio.Queue[str] = asyncio.Queue()
        if isinstance(store, PostgresStore):
            # Another process that only LISTENs (it holds no waiters' lock): it hears what
            # completions NOTIFY on the "ended" channel.
            conn = await stack.enter_async_context(
                await psycopg.AsyncConnection.connect(url.split("?")[0], autocommit=True)
            )
            conn.add_notify_handler(lambda note: heard.put_nowait(note.channel))
            channel = store._db.channel_name("ended")
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        else:
            assert isinstance(store, SQLiteStore)
            assert not await ended_registered(store)
        async with working(worker_app):
            gate.set()
            # Nobody waits: the run ends without a word on the "ended" channel.
            quiet = await gated.defer_async()
            await finished(worker_app, quiet.id)
            if isinstance(store, PostgresStore):
                await conn.execute("SELECT 1")  # notifications arrive with any result
                await asyncio.sleep(0.2)
                await conn.execute("SELECT 1")
                assert heard.empty()
            gate.clear()
            # A wait is on: its run's end is announced.
            loud = await gated.defer_async()
            waiting = asyncio.create_task(woken(RunHandle(watcher, loud.id).wait_async()))
            await until(waiting_on(watcher, loud.id))
            if isinstance(store, SQLiteStore):
                assert await ended_registered(store)
            gate.set()
            await waiting
            if isinstance(store, PostgresStore):
                async with asyncio.timeout(10):
                    while heard.empty():
                        await conn.execute("SELECT 1")
                        await asyncio.sleep(0.01)
            # The last wait is over (its linger is zero here): nobody listens any more.
            await until(holds(lambda: waiters(watcher.store)._listener is None))
            if isinstance(store, SQLiteStore):
                await until(not_(lambda: ended_registered(store)))
            else:
                # The waiters' lock is released with the UNLISTEN: ends are quiet again.
                await until(not_(lambda: _ended_lock_held(url)))
                while not heard.empty():
                    heard.get_nowait()
                gate.clear()
                again = await gated.defer_async()
                gate.set()
                await finished(worker_app, again.id)
                await conn.execute("SELECT 1")
                await asyncio.sleep(0.2)
                await conn.execute("SELECT 1")
                assert heard.empty()


async def _ended_lock_held(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url.split("?")[0], autocommit=True) as c:
        cur = await c.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1701733988"
        )
        row = await cur.fetchone()
        return bool(row and row[0])
