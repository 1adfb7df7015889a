"""The dead letters service on a real SQLite file: dead runs and dead deliveries listed in
keyset pages, requeued and purged, with the refusals of ids that are unknown, of another
namespace, or not dead."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.errors import ForbiddenError, InvalidArgumentError, SubscriptionNotFoundError
from cronbus.events.records import DeliveryOutcome, DeliveryResult
from cronbus.events.states import DeliveryState
from cronbus.services import LOCAL, DeadLetterKind, EventInput, Services, SubscriptionInput
from cronbus.states import AttemptOutcome, RunState
from integration.test_services_fixtures import OTHER, READER, STORES, end_run, open_on


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


@pytest.fixture
def services(opened: App) -> Services:
    """Local services in ``default``."""
    return Services(opened, LOCAL)


async def dead_runs(services: Services, opened: App, count: int) -> list[int]:
    """``count`` dead runs of ``add``, oldest first."""
    ids = []
    for i in range(count):
        run = (await services.runs.defer("add", [i, 0])).run
        await end_run(opened, run.id, AttemptOutcome.FAILED)
        ids.append(run.id)
    return ids


async def dead_delivery(services: Services, opened: App, name: str = "hook") -> int:
    """A dead delivery of a webhook subscription, made through the store's own leases."""
    await services.subscriptions.create(
        SubscriptionInput(name=name, topic="orders", webhook="http://127.0.0.1:9/x", max_attempts=1)
    )
    await services.topics.publish("orders", [EventInput(type="order.created", data={"id": 1})])
    store, now = opened.store, opened.clock.now()
    (lease,) = [
        lease
        for lease in await store.acquire_subscriptions("d-test", now, 30.0, 100)
        if lease.subscription == name
    ]
    sub = await store.get_subscription(name)
    from cronbus.events.records import NewDelivery

    events = await store.read_events("orders", sub.cursor, 10)
    news = [NewDelivery(offset=e.offset, event_id=e.id, key=e.key) for e in events]
    assert await store.advance(lease, events[-1].offset, news, now)
    (taken,) = await store.take_deliveries(lease, now, 10, 10)
    result = DeliveryResult(
        delivery_id=taken.id,
        outcome=DeliveryOutcome.FAILED,
        started_at=now,
        finished_at=now,
        error="connection refused",
    )
    assert await store.finish_deliveries(lease, [result], now) == [True]
    assert (await store.get_delivery(taken.id)).state is DeliveryState.DEAD
    return taken.id


async def test_list_both_kinds_in_pages(services: Services, opened: App) -> None:
    runs = await dead_runs(services, opened, 3)
    delivery = await dead_delivery(services, opened)
    seen = []
    page = await services.dead_letters.list(limit=2)
    seen += page.items
    while page.next is not None:
        page = await services.dead_letters.list(limit=2, cursor=page.next)
        seen += page.items
    assert sorted(d.id for d in seen if d.kind is DeadLetterKind.RUN) == runs
    assert [d.id for d in seen if d.kind is DeadLetterKind.DELIVERY] == [delivery]
    only_runs = await services.dead_letters.list(task="add")
    assert {d.kind for d in only_runs.items} == {DeadLetterKind.RUN}
    only_hook = await services.dead_letters.list(subscription="hook")
    assert [d.id for d in only_hook.items] == [delivery]
    with pytest.raises(SubscriptionNotFoundError):
        await services.dead_letters.list(subscription="nope")
    for kwargs, field in (
        ({"kind": "both"}, "kind"),
        ({"task": "add", "subscription": "hook"}, "subscription"),
        ({"kind": "deliveries", "queue": "default"}, "kind"),
        ({"limit": 0}, "limit"),
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            await services.dead_letters.list(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field


async def test_requeue_named_with_refusals(services: Services, opened: App) -> None:
    (dead,) = await dead_runs(services, opened, 1)
    waiting = (await services.runs.defer("add", [1, 2])).run.id
    delivery = await dead_delivery(services, opened)
    result = await services.dead_letters.requeue([dead, waiting, 999], [delivery, 998])
    assert result.runs == [dead]
    assert result.deliveries == [delivery]
    assert result.refused == [
        f"run {waiting} is queued, not dead",
        "no run has id 999",
        "no delivery has id 998",
    ]
    assert (await services.runs.get(dead)).state is RunState.QUEUED
    assert (await opened.store.get_delivery(delivery)).state is DeliveryState.PENDING


async def test_requeue_all_of_the_namespace_only(services: Services, opened: App) -> None:
    mine = await dead_runs(services, opened, 2)
    other = Services(opened, OTHER, namespace="other")
    theirs = (await other.runs.defer("add", [5, 5])).run.id
    await end_run(opened, theirs, AttemptOutcome.FAILED)
    result = await services.dead_letters.requeue(all_runs=True)
    assert sorted(result.runs) == mine
    assert (await other.runs.get(theirs)).state is RunState.DEAD
    refused = await other.dead_letters.requeue([mine[0]])
    assert refused.runs == []
    assert refused.refused == [f"no run has id {mine[0]}"]


async def test_purge_deletes_dead_letters(services: Services, opened: App) -> None:
    runs = await dead_runs(services, opened, 2)
    waiting = (await services.runs.defer("add", [1, 2])).run.id
    delivery = await dead_delivery(services, opened)
    result = await services.dead_letters.purge([runs[0], waiting], [delivery])
    assert result.runs == [runs[0]]
    assert result.deliveries == [delivery]
    assert result.refused == [f"run {waiting} is queued, not dead"]
    left = await services.dead_letters.list()
    assert [d.id for d in left.items] == [runs[1]]
    everything = await services.dead_letters.purge(all_runs=True)
    assert everything.runs == [runs[1]]
    assert (await services.dead_letters.list()).items == []


async def test_bad_requests_and_access(services: Services, opened: App) -> None:
    for kwargs, field in (
        ({}, "run_ids"),
        ({"run_ids": [0]}, "run_ids"),
        ({"run_ids": [1], "all_runs": True}, "run_ids"),
        ({"delivery_ids": ["x"]}, "delivery_ids"),
        ({"run_ids": [1], "subscription": "hook"}, "subscription"),
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            await services.dead_letters.requeue(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field
    reader = Services(opened, READER)
    assert (await reader.dead_letters.list()).items == []
    with pytest.raises(ForbiddenError):
        await reader.dead_letters.requeue(all_runs=True)
    with pytest.raises(ForbiddenError):
        await reader.dead_letters.purge(all_runs=True)
