"""The services on the PostgreSQL store: the runs listing (filters and keyset pages) and
namespaces (create, use, isolation, delete), on a fresh schema per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contract.pg import pg_store_url
from cronbus import App
from cronbus.errors import ConflictError, NotFoundError
from cronbus.services import LOCAL, RunQuery, Services
from cronbus.states import AttemptOutcome, RunState
from integration.test_services_fixtures import OTHER, end_run, open_app


@pytest.fixture
async def opened(request: pytest.FixtureRequest) -> AsyncIterator[App]:
    """The tasks' app on a fresh PostgreSQL schema."""
    url = await pg_store_url(request)
    async with open_app(url) as app:
        yield app


async def test_runs_listing_on_postgres(opened: App) -> None:
    services = Services(opened, LOCAL)
    ids = [(await services.runs.defer("add", [i, 0])).run.id for i in range(5)]
    await end_run(opened, ids[0], AttemptOutcome.FAILED)  # the oldest is claimed first
    first = await services.runs.list(limit=2)
    assert [r.id for r in first.items] == ids[::-1][:2]
    rest = await services.runs.list(limit=10, cursor=first.next)
    assert [r.id for r in rest.items] == ids[::-1][2:]
    assert rest.next is None
    dead = await services.runs.list(RunQuery(states=[RunState.DEAD]))
    assert [r.id for r in dead.items] == [ids[0]]
    created = (await services.runs.get(ids[2])).created_at
    window = await services.runs.list(
        RunQuery(created_after=created, created_before=created + 1e-3)
    )
    assert ids[2] in [r.id for r in window.items]
    other = Services(opened, OTHER, namespace="other")
    assert (await other.runs.list()).items == []
    with pytest.raises(NotFoundError):
        await other.runs.show(ids[0])


async def test_namespaces_on_postgres(opened: App) -> None:
    services = Services(opened, LOCAL)
    await services.namespaces.create("shop")
    assert [n.name for n in await services.namespaces.list()] == ["default", "shop"]
    shop = Services(opened, LOCAL, namespace="shop")
    run = (await shop.runs.defer("add", [1, 2])).run
    assert run.namespace == "shop"
    assert (await services.runs.list()).items == []
    with pytest.raises(ConflictError):
        await services.namespaces.delete("shop")  # a run lives in it
    await shop.runs.cancel(run.id)
    purged = await shop.dead_letters.purge([run.id])
    assert purged.refused == [f"run {run.id} is cancelled, not dead"]
    entries = await services.audit.list()
    assert [e.action for e in entries.items][:2] == ["runs.cancel", "runs.defer"]
