"""The topics and subscriptions services on a real SQLite file: publish and read by offset,
retention, subscriptions defined, changed, paused, replayed and deleted, deliveries with their
attempts, masking of webhook secrets, field names of refusals, access and namespaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.errors import (
    ConflictError,
    DeliveryNotFoundError,
    ForbiddenError,
    InvalidArgumentError,
    NotFoundError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
)
from cronbus.services import LOCAL, EventInput, Services, SubscriptionInput
from integration.test_services_dead_letters import dead_delivery
from integration.test_services_fixtures import OTHER, READER, STORES, open_on

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


@pytest.fixture
def services(opened: App) -> Services:
    """Local services in ``default``."""
    return Services(opened, LOCAL)


def events(count: int) -> list[EventInput]:
    return [EventInput(type="order.created", data={"n": i}) for i in range(count)]


async def test_publish_then_read_in_pages(services: Services) -> None:
    published = await services.topics.publish("orders", events(5))
    assert [p.event.offset for p in published] == [1, 2, 3, 4, 5]
    assert all(p.created for p in published)
    first = await services.topics.read("orders", limit=2)
    assert [e.offset for e in first.items] == [1, 2]
    second = await services.topics.read("orders", limit=2, cursor=first.next)
    assert [e.offset for e in second.items] == [3, 4]
    tail = await services.topics.read("orders", after=4)
    assert [e.data for e in tail.items] == [{"n": 4}]
    assert tail.next is None
    again = await services.topics.publish(
        "orders", [EventInput(type="x", id=published[0].event.id)]
    )
    assert not again[0].created
    info = await services.topics.get("orders")
    assert info.last_offset == 5
    assert [t.name for t in await services.topics.list()] == ["orders"]


async def test_publish_refusals_name_the_field(services: Services) -> None:
    cases = [
        (("cronbus.runs", events(1)), "topic"),
        (("bad topic", events(1)), "topic"),
        (("orders", []), "events"),
        (("orders", [EventInput(type="")]), "events[0].type"),
        (
            ("orders", [EventInput(type="t"), EventInput(type="t", source="\x00")]),
            "events[1].source",
        ),
        (("orders", [EventInput(type="t", data={1, 2})]), "events[0].data"),
        (("orders", [EventInput(type="t", id="a b")]), "events[0].id"),
        (("orders", [EventInput(type="t", time=float("inf"))]), "events[0].time"),
    ]
    for args, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.topics.publish(*args)  # type: ignore[arg-type]
        assert caught.value.field == field, (args, str(caught.value))
    assert await services.topics.list() == []


async def test_topics_of_another_namespace(opened: App, services: Services) -> None:
    await services.topics.publish("orders", events(1))
    other = Services(opened, OTHER, namespace="other")
    assert await other.topics.list() == []
    with pytest.raises(NotFoundError):
        await other.topics.get("orders")
    with pytest.raises(NotFoundError):
        await other.topics.read("orders")
    with pytest.raises(ConflictError, match="another namespace"):
        await other.topics.publish("orders", events(1))
    with pytest.raises(ForbiddenError):
        await Services(opened, READER).topics.publish("orders", events(1))


async def test_retention(services: Services) -> None:
    await services.topics.publish("orders", events(1))
    info = await services.topics.set_retention("orders", max_age=3600, max_events=10)
    assert info.max_age == 3600
    assert info.max_events == 10
    for kwargs, field in (({"max_age": 0}, "max_age"), ({"max_events": 0}, "max_events")):
        with pytest.raises(InvalidArgumentError) as caught:
            await services.topics.set_retention("orders", **kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field


async def test_subscription_life(services: Services) -> None:
    await services.topics.publish("orders", events(3))
    created = await services.subscriptions.create(
        SubscriptionInput(
            name="hook",
            topic="orders",
            webhook="http://user:pw@127.0.0.1:9/x?token=t",
            secrets=[SECRET],
            headers={"Authorization": "Bearer abc"},
            types=["order.*"],
            max_attempts=3,
        )
    )
    target = created.subscription.spec.target
    assert "pw" not in str(target)
    assert "abc" not in str(target)
    assert SECRET not in str(target)
    assert target["secret_count"] == 1
    assert created.state == "active"
    assert created.lag == 0
    # The same definition again is a no-op; another one is a conflict.
    same = SubscriptionInput(
        name="hook",
        topic="orders",
        webhook="http://user:pw@127.0.0.1:9/x?token=t",
        secrets=[SECRET],
        headers={"Authorization": "Bearer abc"},
        types=["order.*"],
        max_attempts=3,
    )
    await services.subscriptions.create(same)
    with pytest.raises(SubscriptionExistsError):
        await services.subscriptions.create(
            SubscriptionInput(name="hook", topic="orders", task="add")
        )
    changed = await services.subscriptions.update("hook", {"max_attempts": 5, "types": ["x.*"]})
    assert changed.subscription.spec.policy.max_attempts == 5
    assert changed.subscription.spec.filter["types"] == ["x.*"]
    assert (await services.subscriptions.pause("hook")).state == "paused"
    assert (await services.subscriptions.resume("hook")).state == "active"
    replayed = await services.subscriptions.replay("hook", offset=2)
    assert replayed.previous_cursor == 3
    assert replayed.subscription.subscription.cursor == 1
    assert (
        replayed.message
        == "subscription hook: cursor moved from 3 to 1; 2 event offsets to match again"
    )
    clamped = await services.subscriptions.replay("hook", offset=100)
    assert clamped.clamped
    assert "the topic ends at offset 3" in clamped.message
    shown = await services.subscriptions.get("hook")
    assert shown.deliveries is not None
    assert shown.deliveries["pending"] == 0
    page = await services.subscriptions.list()
    assert [v.subscription.name for v in page.items] == ["hook"]
    gone = await services.subscriptions.delete("hook")
    assert gone.subscription.name == "hook"
    with pytest.raises(SubscriptionNotFoundError):
        await services.subscriptions.get("hook")


async def test_subscription_refusals_name_the_field(services: Services) -> None:
    cases = [
        (SubscriptionInput(name="a b", topic="t", task="add"), "name"),
        (SubscriptionInput(name="s", topic="t t", task="add"), "topic"),
        (SubscriptionInput(name="s", topic="t"), "webhook"),
        (SubscriptionInput(name="s", topic="t", task="add", webhook="http://x"), "task"),
        (SubscriptionInput(name="s", topic="t", webhook="ftp://x"), "webhook"),
        (SubscriptionInput(name="s", topic="t", webhook="http://x", secrets=["nope"]), "secrets"),
        (SubscriptionInput(name="s", topic="t", task="add", queue="a b"), "queue"),
        (SubscriptionInput(name="s", topic="t", task="add", headers={"a": "b"}), "headers"),
        (SubscriptionInput(name="s", topic="t", task="add", max_attempts=0), "max_attempts"),
        (SubscriptionInput(name="s", topic="t", task="add", timeout=-1), "timeout"),
        (SubscriptionInput(name="s", topic="t", task="add", types=[""]), "types[0]"),
        (SubscriptionInput(name="s", topic="t", task="add", start="middle"), "start"),
    ]
    for given, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.subscriptions.create(given)
        assert caught.value.field == field, (given.name, str(caught.value))
    assert (await services.subscriptions.list()).items == []
    await services.subscriptions.create(SubscriptionInput(name="s", topic="t", task="add"))
    for changes, field in (({}, "changes"), ({"nope": 1}, "nope"), ({"backoff": -1}, "backoff")):
        with pytest.raises(InvalidArgumentError) as caught:
            await services.subscriptions.update("s", changes)
        assert caught.value.field == field
    for kwargs, field in (({}, "offset"), ({"offset": 0}, "offset"), ({"since": "x"}, "since")):
        with pytest.raises(InvalidArgumentError) as caught:
            await services.subscriptions.replay("s", **kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field


async def test_deliveries_and_attempts(services: Services, opened: App) -> None:
    delivery_id = await dead_delivery(services, opened)
    page = await services.subscriptions.deliveries("hook", state="dead")
    assert [d.id for d in page.items] == [delivery_id]
    assert (await services.subscriptions.deliveries("hook", state="acked")).items == []
    detail = await services.subscriptions.delivery(delivery_id)
    assert [a.error for a in detail.attempts] == ["connection refused"]
    with pytest.raises(InvalidArgumentError) as caught:
        await services.subscriptions.deliveries("hook", state="gone")
    assert caught.value.field == "state"
    other = Services(opened, OTHER, namespace="other")
    with pytest.raises(DeliveryNotFoundError):
        await other.subscriptions.delivery(delivery_id)
    with pytest.raises(SubscriptionNotFoundError):
        await other.subscriptions.deliveries("hook")


async def test_subscriptions_of_another_namespace(opened: App, services: Services) -> None:
    await services.subscriptions.create(SubscriptionInput(name="s", topic="t", task="add"))
    await services.topics.publish("t", events(1))
    other = Services(opened, OTHER, namespace="other")
    assert (await other.subscriptions.list()).items == []
    for call in (other.subscriptions.get, other.subscriptions.pause, other.subscriptions.delete):
        with pytest.raises(SubscriptionNotFoundError):
            await call("s")
    with pytest.raises(ConflictError):
        await other.subscriptions.create(SubscriptionInput(name="s2", topic="t", task="add"))
    with pytest.raises(ConflictError):
        await other.subscriptions.create(SubscriptionInput(name="s", topic="u", task="add"))
    reader = Services(opened, READER)
    assert (await reader.subscriptions.get("s")).subscription.name == "s"
    with pytest.raises(ForbiddenError):
        await reader.subscriptions.pause("s")


async def test_a_subscription_claims_a_new_topic(opened: App) -> None:
    shop = Services(opened, LOCAL, namespace="shop")
    await shop.subscriptions.create(SubscriptionInput(name="s", topic="fresh", task="add"))
    other = Services(opened, OTHER, namespace="other")
    with pytest.raises(ConflictError):
        await other.topics.publish("fresh", events(1))
    with pytest.raises(ConflictError):
        await other.subscriptions.create(SubscriptionInput(name="s2", topic="fresh", task="add"))
    published = await shop.topics.publish("fresh", events(1))
    assert published[0].event.offset == 1
