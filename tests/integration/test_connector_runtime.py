"""The connector runtime in-process, on an SQLite file and on a PostgreSQL schema: sources append
each record once with their positions, sinks commit only after their flush, bad records fail
the task or go to dead letters by the tolerance, retriable failures are retried, a restarted
task fences its old runner, and a dead worker's tasks move to another after the lease.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from apps import connector_app
from contract.pg import pg_store_url
from cronbus import App
from cronbus.connectors.runtime import ConnectorRuntime
from cronbus.connectors.states import TaskState
from cronbus.services import ConnectorView, Services

from .conftest import until

DEADLINE = 30.0
LEASE = 2.0


@pytest.fixture(params=["sqlite", "postgres"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The test connectors' app on a fresh store of each kind."""
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 'connectors.db'}"
    connector_app.app.use_store(url)
    async with connector_app.app:
        yield connector_app.app


def runtime(app: App, holder: str = "worker-a") -> ConnectorRuntime:
    """A runtime with a short lease and quick polls."""
    return ConnectorRuntime(
        app.store,
        app.connector_kinds,
        app.clock,
        holder=holder,
        lease_seconds=LEASE,
        poll_seconds=0.05,
        batch=100,
    )


class Running:
    """A runtime running in the background until :meth:`stop`."""

    def __init__(self, app: App, holder: str = "worker-a") -> None:
        self.runtime = runtime(app, holder)
        self.stopping = asyncio.Event()
        self.task = asyncio.create_task(self.runtime.run(self.stopping))

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.wait_for(self.task, DEADLINE)

    async def die(self) -> None:
        """Stop without giving the tasks back, as a killed worker would."""
        self.task.cancel()
        runners = list(self.runtime.runners.values())
        self.runtime.runners.clear()
        for runner in runners:
            runner.stopping.set()
        await asyncio.gather(self.task, return_exceptions=True)
        await asyncio.gather(*(r.stop() for r in runners), return_exceptions=True)


async def view(app: App, name: str) -> ConnectorView:
    return await Services(app).connectors.get(name)


async def topic_events(app: App, topic: str) -> list[Any]:
    return await app.store.read_events(topic, 0, 100_000)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def test_a_source_appends_each_record_once_with_its_position(
    app: App, tmp_path: Path
) -> None:
    commits = tmp_path / "commits.jsonl"
    services = Services(app)
    await services.connectors.create(
        "counter", "test-counter", {"topic": "ticks", "count": 250, "commits": str(commits)}
    )
    running = Running(app)
    try:

        async def all_in() -> bool:
            return (await view(app, "counter")).tasks[0].task.positions.get("counter") == 250

        await until(all_in, DEADLINE)
    finally:
        await running.stop()
    events = await topic_events(app, "ticks")
    assert [e.data["n"] for e in events] == list(range(1, 251))
    assert len({e.id for e in events}) == 250
    task = (await view(app, "counter")).tasks[0].task
    assert task.counts.delivered == 250
    assert task.state is TaskState.UNASSIGNED  # given back when the runtime stopped
    told = [json.loads(line) for line in commits.read_text().splitlines()]
    assert [t["n"] for t in told] == list(range(1, 251))
    assert [t["offset"] for t in told] == [e.offset for e in events]


async def test_a_resumed_source_continues_after_its_committed_position(app: App) -> None:
    services = Services(app)
    await services.connectors.create("counter", "test-counter", {"topic": "ticks", "count": 30})
    first = Running(app)

    async def some_in() -> bool:
        return len(await topic_events(app, "ticks")) >= 10

    await until(some_in, DEADLINE)
    await first.stop()
    # Another worker takes the task from its committed position: nothing twice, nothing lost.
    second = Running(app, "worker-b")
    try:

        async def all_in() -> bool:
            return len(await topic_events(app, "ticks")) == 30

        await until(all_in, DEADLINE)
    finally:
        await second.stop()
    events = await topic_events(app, "ticks")
    assert [e.data["n"] for e in events] == list(range(1, 31))


async def test_a_bad_record_fails_the_task_with_tolerance_none_and_says_why(app: App) -> None:
    services = Services(app)
    await services.connectors.create(
        "counter", "test-counter", {"topic": "ticks", "count": 50, "bad_every": 15, "per_poll": 5}
    )
    running = Running(app)
    try:

        async def failed() -> bool:
            return (await view(app, "counter")).tasks[0].task.state is TaskState.FAILED

        await until(failed, DEADLINE)
    finally:
        await running.stop()
    task = (await view(app, "counter")).tasks[0].task
    assert task.error is not None
    assert "counter 15" in task.error, task.error
    assert "SerializationError" in task.error
    # Nothing of the failing poll was appended, and the position stays before it.
    assert [e.data["n"] for e in await topic_events(app, "ticks")] == list(range(1, 11))
    assert task.positions == {"counter": 10}


async def test_bad_records_go_to_dead_letters_with_tolerance_all(app: App, tmp_path: Path) -> None:
    commits = tmp_path / "commits.jsonl"
    services = Services(app)
    config = {"topic": "ticks", "count": 40, "bad_every": 10, "commits": str(commits)}
    await services.connectors.create("counter", "test-counter", config, tolerance="all")
    running = Running(app)
    try:

        async def done() -> bool:
            return (await view(app, "counter")).tasks[0].task.positions.get("counter") == 40

        await until(done, DEADLINE)
    finally:
        await running.stop()
    numbers = [e.data["n"] for e in await topic_events(app, "ticks")]
    assert numbers == [n for n in range(1, 41) if n % 10]
    dead = await services.connectors.dead_records("counter")
    assert sorted(d.record["position"] for d in dead) == [10, 20, 30, 40]
    assert all("SerializationError" in d.error for d in dead)
    task = (await view(app, "counter")).tasks[0].task
    assert (task.counts.delivered, task.counts.dead) == (36, 4)
    told = [json.loads(line) for line in commits.read_text().splitlines()]
    assert [t["n"] for t in told if t["error"]] == [10, 20, 30, 40]


async def test_a_retriable_poll_is_retried_then_succeeds(app: App) -> None:
    services = Services(app)
    config = {"topic": "ticks", "count": 5, "retriable_polls": 2}
    await services.connectors.create("counter", "test-counter", config)
    running = Running(app)
    try:

        async def done() -> bool:
            return (await view(app, "counter")).tasks[0].task.positions.get("counter") == 5

        await until(done, DEADLINE)
    finally:
        await running.stop()
    task = (await view(app, "counter")).tasks[0].task
    assert task.counts.retried == 2
    assert task.state is not TaskState.FAILED


async def test_a_sink_writes_after_flush_and_dead_letters_exactly_its_failed_records(
    app: App, tmp_path: Path
) -> None:
    await app.publish_many_async(
        "orders",
        [app_event(n) for n in range(1, 21)],
    )
    services = Services(app)
    out = tmp_path / "out"
    config = {"topic": "orders", "path": str(out), "refuse": ["3"], "lose": ["7", "11"]}
    await services.connectors.create("lines", "test-lines", config, tolerance="all")
    running = Running(app)
    try:

        async def done() -> bool:
            return (await view(app, "lines")).tasks[0].lag == 0

        await until(done, DEADLINE)
    finally:
        await running.stop()
    written = lines(Path(f"{out}.0"))
    assert written == [str(n) for n in range(1, 21) if n not in (3, 7, 11)]
    dead = await services.connectors.dead_records("lines")
    assert sorted(d.record["subject"] for d in dead) == ["11", "3", "7"]
    by_subject = {d.record["subject"]: d.error for d in dead}
    assert by_subject["3"].startswith("ValueError")
    assert by_subject["7"].startswith("OSError")
    task = (await view(app, "lines")).tasks[0].task
    assert (task.counts.delivered, task.counts.dead) == (17, 3)
    assert task.positions == {"orders": 20}


async def test_a_sink_with_tolerance_none_fails_on_a_lost_final_write(
    app: App, tmp_path: Path
) -> None:
    await app.publish_many_async("orders", [app_event(n) for n in range(1, 6)])
    services = Services(app)
    config = {"topic": "orders", "path": str(tmp_path / "out"), "lose": ["4"]}
    await services.connectors.create("lines", "test-lines", config)
    running = Running(app)
    try:

        async def failed() -> bool:
            return (await view(app, "lines")).tasks[0].task.state is TaskState.FAILED

        await until(failed, DEADLINE)
    finally:
        await running.stop()
    task = (await view(app, "lines")).tasks[0].task
    assert task.error is not None
    assert "OSError: lost 4" in task.error
    assert task.positions == {}  # the batch is not committed: it is written again on restart


async def test_retriable_puts_are_retried_and_counted(app: App, tmp_path: Path) -> None:
    await app.publish_many_async("orders", [app_event(n) for n in range(1, 4)])
    services = Services(app)
    config = {"topic": "orders", "path": str(tmp_path / "out"), "retriable_puts": 1}
    await services.connectors.create("lines", "test-lines", config)
    running = Running(app)
    try:

        async def done() -> bool:
            return (await view(app, "lines")).tasks[0].lag == 0

        await until(done, DEADLINE)
    finally:
        await running.stop()
    assert lines(tmp_path / "out.0") == ["1", "2", "3"]
    assert (await view(app, "lines")).tasks[0].task.counts.retried == 3


async def test_a_paused_connector_stops_and_resumes_where_it_was(app: App, tmp_path: Path) -> None:
    services = Services(app)
    await services.connectors.create(
        "lines", "test-lines", {"topic": "orders", "path": str(tmp_path / "out")}
    )
    running = Running(app)
    try:

        async def is_running() -> bool:
            return (await view(app, "lines")).tasks[0].task.state is TaskState.RUNNING

        await until(is_running, DEADLINE)
        await services.connectors.pause("lines")

        async def let_go() -> bool:
            return not running.runtime.runners

        await until(let_go, DEADLINE)
        await app.publish_many_async("orders", [app_event(n) for n in range(1, 4)])
        await asyncio.sleep(0.3)  # a paused sink must not write meanwhile
        assert lines(tmp_path / "out.0") == []
        await services.connectors.resume("lines")

        async def done() -> bool:
            return lines(tmp_path / "out.0") == ["1", "2", "3"]

        await until(done, DEADLINE)
    finally:
        await running.stop()


async def test_a_dead_workers_task_moves_to_another_after_the_lease(app: App) -> None:
    services = Services(app)
    await services.connectors.create(
        "counter", "test-counter", {"topic": "ticks", "count": 10_000, "per_poll": 5}
    )
    first = Running(app, "worker-a")

    async def held_by_a() -> bool:
        task = (await view(app, "counter")).tasks[0].task
        return task.holder == "worker-a" and bool(task.positions)

    await until(held_by_a, DEADLINE)
    await first.die()
    died = asyncio.get_running_loop().time()
    second = Running(app, "worker-b")
    try:

        async def held_by_b() -> bool:
            return (await view(app, "counter")).tasks[0].task.holder == "worker-b"

        await until(held_by_b, DEADLINE)
        moved = asyncio.get_running_loop().time() - died
        assert moved < LEASE * 3, moved

        async def all_in() -> bool:
            return (await view(app, "counter")).tasks[0].task.positions.get("counter") == 10_000

        await until(all_in, 60.0)
    finally:
        await second.stop()
    events = await topic_events(app, "ticks")
    assert [e.data["n"] for e in events] == list(range(1, 10_001))


async def test_a_restarted_task_fences_its_old_runner(app: App) -> None:
    services = Services(app)
    await services.connectors.create(
        "counter", "test-counter", {"topic": "ticks", "count": 3000, "per_poll": 2}
    )
    running = Running(app)
    try:

        async def started() -> bool:
            return bool((await view(app, "counter")).tasks[0].task.positions)

        await until(started, DEADLINE)
        before = (await view(app, "counter")).tasks[0].task.epoch
        await services.connectors.restart("counter")

        async def done() -> bool:
            return (await view(app, "counter")).tasks[0].task.positions.get("counter") == 3000

        await until(done, 60.0)
        assert (await view(app, "counter")).tasks[0].task.epoch > before
    finally:
        await running.stop()
    events = await topic_events(app, "ticks")
    assert [e.data["n"] for e in events] == list(range(1, 3001))


def app_event(n: int) -> Any:
    """An order event whose subject is its number."""
    from cronbus.events.event import make_event

    return make_event("order.created", {"n": n}, subject=str(n), id=f"order-{n}")


async def test_secrets_headers_and_url_credentials_are_masked_in_what_is_shown(app: App) -> None:
    services = Services(app)
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    config = {
        "topic": "orders",
        "url": "http://user:hunter2@127.0.0.1:9/hook?key=abc",
        "headers": {"Authorization": "Bearer xyz"},
        "secret": secret,
    }
    created = await services.connectors.create("hook", "http-sink", config)
    for shown in (created, await view(app, "hook"), (await services.connectors.list())[0]):
        text = json.dumps(
            [dict(shown.connector.spec.config)] + [dict(t.task.config) for t in shown.tasks]
        )
        for hidden in ("hunter2", "abc", "Bearer xyz", secret):
            assert hidden not in text, text
        assert shown.connector.spec.config["url"] == "http://***@127.0.0.1:9/hook?key=***"
    # What is stored, and run, keeps them; creating the same definition again is a no-op.
    stored = await app.store.get_connector("hook")
    assert stored.spec.config["secret"] == [secret]
    again = await services.connectors.create("hook", "http-sink", config)
    assert again.created is False


async def test_a_caller_without_the_payloads_permission_sees_dead_records_redacted(
    app: App,
) -> None:
    from cronbus.connectors.records import Commit, NewDeadRecord
    from cronbus.services import Access, Scope

    await Services(app).connectors.create(
        "lines", "test-lines", {"topic": "orders", "path": "/tmp/unused"}
    )
    (lease,) = await app.store.acquire_connector_tasks("w", app.clock.now(), 60.0, 1)
    dead = NewDeadRecord(record={"id": "e1", "data": {"card": "4242"}}, error="bad", offset=1)
    assert await app.store.commit_task(lease, Commit(dead=(dead,)), app.clock.now())
    reader = Access(actor="t", scope=Scope.READ, token_id="t1", payloads=False)
    (hidden,) = await Services(app, reader).connectors.dead_records("lines")
    assert hidden.record == {"id": "e1", "data": "[redacted]"}
    assert hidden.error == "bad"
    (whole,) = await Services(app).connectors.dead_records("lines")
    assert whole.record["data"] == {"card": "4242"}
