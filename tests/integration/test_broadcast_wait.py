"""A broadcast when no live worker serves its task (issue 30, item 13), through the doors users
take, on both stores: the Python API's defer, the HTTP API, and a job's fire with broadcast
routing, with real scheduler and worker roles. It waits ``broadcast_wait_seconds`` for a worker
to register (workers still starting, as under load); a worker that registers within the wait
gets its child, which runs; when none comes the parent ends dead saying why, never succeeded
with no children."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from cronbus import App, Worker
from cronbus.config import Settings
from cronbus.errors import JobNotFoundError
from cronbus.handle import RunEndedError
from cronbus.model import Run, RunFilter
from cronbus.scheduler import Scheduler
from cronbus.states import RunState
from integration.test_api_support import Api, served, until

WAIT = 1.0
"""The broadcast wait of these tests' apps (seconds)."""
MESSAGE = "no live worker serves task ident on queue default (waited"


def make_app(url: str, wait: float = WAIT) -> App:
    """An app with one task to broadcast; short leases, so the roles' passes come often."""
    app = App(store=url, settings=Settings(lease_seconds=1.0, broadcast_wait_seconds=wait))

    @app.task(name="ident")
    def ident(value: int = 0) -> int:
        return value

    return app


@asynccontextmanager
async def role(runner: Worker | Scheduler) -> AsyncIterator[None]:
    """``runner`` running until the block ends."""
    task = asyncio.create_task(runner.run())
    try:
        yield
    finally:
        if isinstance(runner, Worker):
            runner.request_stop(hurry=True)
        else:
            runner.request_stop()
        await asyncio.wait_for(task, 15)


@pytest.fixture
async def app(each_store_url: str) -> AsyncIterator[App]:
    """The test app, open, on each store in turn."""
    made = make_app(each_store_url)
    async with made:
        yield made


def assert_no_worker(run: Run) -> None:
    """``run`` is a broadcast parent that ended dead for want of a live worker, saying so."""
    assert run.state is RunState.DEAD, run
    assert run.error is not None, run
    assert run.error.type == "NoLiveWorker"
    assert run.error.message.startswith(MESSAGE), run.error
    assert run.children is not None
    assert run.children.total == 0


async def test_defer_with_no_worker_ends_dead_saying_why(app: App) -> None:
    handle = await app.tasks["ident"].defer_async(1, broadcast=True)
    assert (await handle.fetch_async()).state is RunState.WAITING  # waits for a worker
    async with role(Scheduler(app)):  # no worker at all: the scheduler ends it
        with pytest.raises(RunEndedError) as ended:
            await handle.wait_async(20)
    assert ended.value.error_type == "NoLiveWorker"
    assert ended.value.error_message.startswith(MESSAGE)
    assert MESSAGE in str(ended.value)
    assert_no_worker(await handle.fetch_async())


async def test_a_worker_registering_within_the_wait_gets_its_child(each_store_url: str) -> None:
    # A longer wait, so the worker registers well within it on a busy machine.
    async with make_app(each_store_url, wait=30.0) as app:
        handle = await app.tasks["ident"].defer_async(5, broadcast=True)
        assert (await handle.fetch_async()).state is RunState.WAITING
        worker = Worker(app, concurrency=2, queues="*")
        async with role(worker):
            run = await handle.wait_async(20)
        assert run.state is RunState.SUCCEEDED
        assert run.children is not None
        assert (run.children.total, run.children.succeeded) == (1, 1)
        (child,) = await app.store.list_children(handle.id, None, 10)
        assert (child.target_worker, child.result) == (worker.id, 5)


async def test_http_defer_with_no_worker_ends_dead_saying_why(each_store_url: str) -> None:
    async with served(make_app(each_store_url)) as api:
        made = await api.call("POST", "/v1/runs", json={"task": "ident", "broadcast": True})
        assert made.status_code == 201, made.text
        run_id = made.json()["run"]["id"]
        shown: dict[str, Any] = {}

        async def ended(api: Api = api) -> bool:
            shown.update((await api.call("GET", f"/v1/runs/{run_id}")).json()["run"])
            return bool(shown["state"] == "dead")

        async with role(Scheduler(api.app)):
            await until(ended, timeout=20.0)
        assert shown["error"]["type"] == "NoLiveWorker", shown
        assert shown["error"]["message"].startswith(MESSAGE), shown


async def test_a_job_fired_with_no_worker_ends_dead_saying_why(each_store_url: str) -> None:
    app = make_app(each_store_url)

    # Every 2 s (a job ``at`` one time does not fire on PostgreSQL: a matter of its own).
    app.job(name="sweep", every=2, broadcast=True)(app.tasks["ident"])
    async with app:
        scheduler = Scheduler(app)
        fired: list[Run] = []

        async def ended() -> bool:
            try:
                job = await app.store.get_job("sweep")
            except JobNotFoundError:
                return False  # the scheduler has not synced the code's jobs yet
            fired[:] = await app.store.list_runs(RunFilter(job_id=job.id))
            return any(r.state.terminal for r in fired)

        async with role(scheduler):
            await until(ended, timeout=20.0)
        run = min(fired, key=lambda r: r.id)  # the first fire ended first
        assert run.state is RunState.DEAD, run
        assert not any(r.state is RunState.SUCCEEDED for r in fired), fired
        assert run.error is not None
        assert run.error.type == "NoLiveWorker"
        assert run.error.message.startswith(MESSAGE)
