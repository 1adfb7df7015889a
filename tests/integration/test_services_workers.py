"""The workers and tasks services on a real SQLite file: registered workers of the namespace
with the runs they hold, drain requests, pruning, waiting hints, and the tasks list."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.errors import ConflictError, ForbiddenError, InvalidArgumentError, NotFoundError
from cronbus.model import ClaimRequest, QueueShare, WorkerInfo, WorkerState
from cronbus.services import LOCAL, Access, Scope, Services
from integration.test_services_fixtures import OTHER, READER, STORES, WRITER, open_on


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


@pytest.fixture
def services(opened: App) -> Services:
    """Local services in ``default``."""
    return Services(opened, LOCAL)


async def register(
    opened: App,
    worker_id: str,
    *,
    namespace: str = "default",
    queues: tuple[str, ...] = ("*",),
    tasks: tuple[str, ...] = ("add",),
    age: float = 0.0,
) -> None:
    """Register a worker that last beat ``age`` seconds ago."""
    now = opened.clock.now()
    await opened.store.register_worker(
        WorkerInfo(
            id=worker_id,
            host="h",
            pid=1,
            queues=queues,
            concurrency=2,
            version="t",
            started_at=now - age,
            heartbeat_at=now - age,
            namespace=namespace,
            tasks=tasks,
        )
    )


async def test_list_get_with_held_runs(services: Services, opened: App) -> None:
    await register(opened, "w1")
    await register(opened, "w2", namespace="other")
    run = (await services.runs.defer("add", [1, 2])).run
    request = ClaimRequest(
        worker_id="w1", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=30
    )
    (claimed,) = await opened.store.claim(request, opened.clock.now())
    assert claimed.run_id == run.id
    seen = await services.workers.list()
    assert [v.worker.id for v in seen] == ["w1"]
    assert [w.id for w in await services.workers.live()] == ["w1"]
    assert [r.id for r in seen[0].runs] == [run.id]
    one = await services.workers.get("w1")
    assert list(one.worker.tasks) == ["add"]
    with pytest.raises(NotFoundError, match="no worker has id 'w2'"):
        await services.workers.get("w2")  # another namespace's
    with pytest.raises(InvalidArgumentError) as caught:
        await services.workers.list(states=["asleep"])
    assert caught.value.field == "states"


async def test_drain_asks_the_worker(services: Services, opened: App) -> None:
    await register(opened, "w1")
    view = await services.workers.drain("w1")
    assert view.worker.drain_requested
    beat = await opened.store.beat("w1", opened.clock.now(), 30.0)
    assert beat.drain_requested
    with pytest.raises(ForbiddenError):
        await Services(opened, READER).workers.drain("w1")
    with pytest.raises(NotFoundError):
        await Services(opened, OTHER, namespace="other").workers.drain("w1")


async def test_drain_of_a_lost_worker_is_a_conflict(services: Services, opened: App) -> None:
    await register(opened, "old", age=3600)
    assert (await services.workers.get("old")).worker.state is WorkerState.LOST
    with pytest.raises(ConflictError, match="lost"):
        await services.workers.drain("old")


async def test_prune_needs_every_namespace(services: Services, opened: App) -> None:
    await register(opened, "old", age=3 * 86_400)
    await register(opened, "new")
    with pytest.raises(ForbiddenError):
        await Services(opened, WRITER).workers.prune()
    everyone = Access(actor="ops", scope=Scope.WRITE, namespaces=None)
    assert await Services(opened, everyone).workers.prune() == ["old"]
    assert [v.worker.id for v in await services.workers.list()] == ["new"]
    with pytest.raises(InvalidArgumentError) as caught:
        await services.workers.prune(-1)
    assert caught.value.field == "older_than"


async def test_waiting_hint_names_an_unknown_task(services: Services, opened: App) -> None:
    await register(opened, "w1", tasks=("send",))
    run = (await services.runs.defer("add", [1, 2])).run
    (hint,) = (await services.runs.show(run.id)).waiting
    assert "knows task 'add'" in hint
    await register(opened, "w2", tasks=("add",))
    assert (await services.runs.show(run.id)).waiting == []


async def test_tasks_list_and_unserved(services: Services, opened: App) -> None:
    await register(opened, "w1", tasks=("add", "remote.only"))
    found = {t.name: t for t in await services.tasks.list()}
    assert found["add"].registered
    assert found["add"].workers == 1
    assert found["send"].queue == "mail"
    assert found["send"].max_attempts == 3
    assert found["send"].workers == 0
    assert not found["remote.only"].registered
    assert found["remote.only"].workers == 1
    hints = await services.tasks.unserved()
    assert hints == ["no live worker knows task 'send': its runs wait until one does"]
    other = Services(opened, OTHER, namespace="other")
    assert await other.tasks.unserved() == ["no live worker in this namespace: runs wait for one"]
