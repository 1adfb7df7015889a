"""`subscriptions.add` is decided by the store's insert (both stores): of concurrent adds of one
name, exactly one wins, the others get SubscriptionExistsError, and the stored definition is the
winner's whole; the same definition again is a no-op."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from cronbus import App
from cronbus.errors import SubscriptionExistsError
from cronbus.events.records import DeliveryPolicy, SubscriptionSpec
from cronbus.store import Store, open_store

ADDS = 8
T0 = 1_700_000_000.0


@pytest.fixture
async def apps(store: Store) -> AsyncIterator[list[App]]:
    """Two apps, each with its own store object (connections) on the contract store."""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(App(store=store.url)) for _ in range(2)]


async def test_concurrent_adds_of_one_name_have_exactly_one_winner(apps: list[App]) -> None:
    async def add(i: int) -> object:
        app = apps[i % 2]
        try:
            return await app.subscriptions.add(
                "race",
                topic="orders",
                webhook=f"http://127.0.0.1:9/hook-{i}",
                max_in_flight=i + 1,
            )
        except SubscriptionExistsError as exc:
            return exc

    outcomes = await asyncio.gather(*(add(i) for i in range(ADDS)))

    winners = [i for i, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, SubscriptionExistsError)]
    assert len(winners) == 1
    assert len(losers) == ADDS - 1
    assert all("'race' exists" in str(error) for error in losers)
    (won,) = winners
    stored = await apps[0].subscriptions.get("race")
    assert stored.spec.target["url"] == f"http://127.0.0.1:9/hook-{won}"
    assert stored.spec.policy.max_in_flight == won + 1
    assert [s.name for s in await apps[1].subscriptions.list()] == ["race"]


async def test_concurrent_adds_of_the_same_definition_all_succeed_once(apps: list[App]) -> None:
    added = await asyncio.gather(
        *(
            apps[i % 2].subscriptions.add(
                "same", topic="orders", task="ship", types=["order.*"], max_attempts=3
            )
            for i in range(ADDS)
        )
    )
    assert len({sub.id for sub in added}) == 1
    assert all(sub.spec == added[0].spec for sub in added)
    assert [s.name for s in await apps[0].subscriptions.list()] == ["same"]


async def test_replace_existing_still_redefines_and_keeps_the_cursor(apps: list[App]) -> None:
    app = apps[0]
    await app.publish_async("orders", "order.created", {"n": 1})
    first = await app.subscriptions.add("s", topic="orders", task="ship")
    replaced = await app.subscriptions.add(
        "s", topic="orders", task="ship", types=["order.paid"], replace_existing=True
    )
    assert (replaced.id, replaced.cursor) == (first.id, 1)
    assert replaced.spec.filter != first.spec.filter


async def test_the_store_decides_create_only_puts(store: Store) -> None:
    es = store
    other = open_store(store.url)
    await other.open()
    try:
        specs = [
            SubscriptionSpec(
                name="s",
                topic="orders",
                target={"kind": "task", "task": "ship", "queue": None},
                policy=DeliveryPolicy(max_in_flight=n),
            )
            for n in range(1, ADDS + 1)
        ]
        outcomes = await asyncio.gather(
            *(
                (es if n % 2 else other).put_subscription(spec, T0, create=True)
                for n, spec in enumerate(specs)
            ),
            return_exceptions=True,
        )
    finally:
        await other.close()
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1
    assert sum(isinstance(o, SubscriptionExistsError) for o in outcomes) == ADDS - 1
    assert (await es.get_subscription("s")).spec == won[0].spec
    # The same definition again is the stored subscription, unchanged.
    again = await es.put_subscription(won[0].spec, T0 + 5, create=True)
    assert again == won[0]


async def test_a_redefinition_on_another_topic_starts_on_that_topic(apps: list[App]) -> None:
    app = apps[0]
    for n in range(3):
        await app.publish_async("orders", "order.created", {"n": n})
    await app.publish_async("audit", "audit.logged", {"n": 0})
    first = await app.subscriptions.add("s", topic="orders", task="ship")
    assert first.cursor == 3
    moved = await app.subscriptions.add("s", topic="audit", task="ship", replace_existing=True)
    # The old cursor counted offsets of another topic: the new one starts at audit's end.
    assert (moved.topic, moved.cursor) == ("audit", 1)
