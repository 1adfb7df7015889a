"""Replay and retention never skip events (both stores).

A replay past a topic's end stops the cursor at the topic's last offset, so events published
after it are matched and counted as lag (issue #9: `--from 500` on a 3-event topic used to move
the cursor to 499 and the next events were never delivered). Retention never removes an event
above the cursor of a subscription of its topic, paused subscriptions included.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import cast

import pytest

from cronbus import App
from cronbus.errors import InvalidArgumentError
from cronbus.events.records import NewDelivery, NewEvent, SubscriptionSpec
from cronbus.store import Store
from cronbus.store.ports import EventStore

T0 = 1_700_000_000.0
HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}


@pytest.fixture
def es(store: Store) -> EventStore:
    return cast(EventStore, store)


@pytest.fixture
async def app(store: Store) -> AsyncIterator[App]:
    """The Python API on the contract store (its own connections, the same data)."""
    async with App(store=store.url) as opened:
        yield opened


def event(i: int, source: str = "test") -> NewEvent:
    return NewEvent(
        id=f"e{i}", type="order.created", source=source, time=T0, data_json=f'{{"n": {i}}}'
    )


def sub(name: str = "s", **kw: object) -> SubscriptionSpec:
    return SubscriptionSpec(name=name, topic="orders", target=dict(HOOK), **kw)  # type: ignore[arg-type]


async def lag(es: EventStore, name: str = "s") -> int:
    """What `subs show` reports: the topic's end minus the cursor."""
    subscription = await es.get_subscription(name)
    return max(0, (await es.get_topic(subscription.topic)).last_offset - subscription.cursor)


async def matched_next(es: EventStore, name: str = "s") -> list[int]:
    """The offsets a dispatcher taking the subscription reads next (above its cursor)."""
    cursor = (await es.get_subscription(name)).cursor
    return [e.offset for e in await es.read_events("orders", cursor, 100)]


# -- replay --------------------------------------------------------------------------------------
async def test_a_replay_past_the_end_stops_at_the_last_offset_and_misses_nothing(
    es: EventStore,
) -> None:
    await es.append("orders", [event(i) for i in (1, 2, 3)], T0)
    await es.put_subscription(sub(start="earliest"), T0)

    replayed = await es.replay("s", after=499, now=T0 + 1)

    assert replayed.cursor == 3
    await es.append("orders", [event(4), event(5)], T0 + 2)
    assert await lag(es) == 2
    assert await matched_next(es) == [4, 5]
    # The holder that takes the subscription next starts from the replayed cursor and records
    # the new events' deliveries.
    (lease,) = await es.acquire_subscriptions("d1", T0 + 3, 30.0, 10)
    news = [NewDelivery(offset=o, event_id=f"e{o}", key=None) for o in (4, 5)]
    assert await es.advance(lease, 5, news, T0 + 3)
    assert sorted(d.offset for d in await es.take_deliveries(lease, T0 + 3, 10, 0)) == [4, 5]


async def test_a_replay_on_an_empty_or_unknown_topic_stays_at_zero(es: EventStore) -> None:
    await es.put_subscription(sub(), T0)
    assert (await es.replay("s", after=10, now=T0)).cursor == 0
    await es.append("orders", [event(1)], T0)
    assert await matched_next(es) == [1]


async def test_a_replay_within_the_topic_moves_the_cursor_back_or_on(es: EventStore) -> None:
    await es.append("orders", [event(i) for i in range(1, 6)], T0)
    await es.put_subscription(sub(), T0)
    assert (await es.replay("s", after=1, now=T0)).cursor == 1
    assert (await es.replay("s", after=4, now=T0)).cursor == 4
    assert (await es.replay("s", after=5, now=T0)).cursor == 5
    with pytest.raises(InvalidArgumentError, match="0 or more"):
        await es.replay("s", after=-1, now=T0)


async def test_the_api_clamps_offset_and_future_since_and_says_so(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    for n in (1, 2, 3):
        await app.publish_async("orders", "order.created", {"n": n})
    await app.subscriptions.add("s", topic="orders", task="ship", start="earliest")
    with caplog.at_level(logging.INFO, logger="cronbus"):
        moved = await app.subscriptions.replay("s", offset=500)
    assert moved.cursor == 3
    assert "the topic ends at offset 3; cursor moved to 3" in caplog.text
    await app.subscriptions.replay("s", offset=1)
    future = app.clock.now() + 3600
    assert (await app.subscriptions.replay("s", since=future)).cursor == 3
    await app.publish_async("orders", "order.created", {"n": 4})
    await app.publish_async("orders", "order.created", {"n": 5})
    store = cast(EventStore, app.store)
    assert await lag(store) == 2
    assert await matched_next(store) == [4, 5]


# -- retention -----------------------------------------------------------------------------------
async def test_retention_keeps_what_a_paused_subscription_has_not_matched(
    es: EventStore,
) -> None:
    await es.put_subscription(sub("behind", start="earliest"), T0)
    await es.put_subscription(sub("ahead", start="earliest"), T0)
    await es.append("orders", [event(i) for i in range(1, 11)], T0)
    leases = {
        lease.subscription: lease for lease in await es.acquire_subscriptions("d1", T0, 30.0, 10)
    }
    assert await es.advance(leases["ahead"], 10, [], T0)  # every event matched (filtered out)
    assert await es.advance(leases["behind"], 3, [], T0)
    await es.set_subscription_paused("behind", True, None, T0)
    await es.set_retention("orders", max_age=None, max_events=2)

    assert await es.trim(T0 + 1) == 3  # 1-3: matched by both; 4-10 wait for "behind"

    assert [e.offset for e in await es.read_events("orders", 0, 100)] == list(range(4, 11))
    assert (await es.get_topic("orders")).events == 7
    # By age too: everything is a day old, and still nothing above the paused cursor goes.
    await es.set_retention("orders", max_age=60.0, max_events=None)
    assert await es.trim(T0 + 86_400) == 0
    # Once the paused subscription is deleted, retention applies in full.
    await es.delete_subscription("behind")
    await es.set_retention("orders", max_age=None, max_events=2)
    assert await es.trim(T0 + 2) == 5
    assert [e.offset for e in await es.read_events("orders", 0, 100)] == [9, 10]


async def test_retention_applies_in_full_to_a_topic_without_subscriptions(
    es: EventStore,
) -> None:
    await es.append("orders", [event(i) for i in range(1, 6)], T0)
    await es.set_retention("orders", max_age=60.0, max_events=None)
    assert await es.trim(T0 + 3600) == 5
    assert (await es.get_topic("orders")).last_offset == 5


async def test_a_replay_below_what_retention_kept_delivers_what_is_left(
    es: EventStore,
) -> None:
    await es.append("orders", [event(i) for i in range(1, 6)], T0)
    await es.set_retention("orders", max_age=None, max_events=2)
    assert await es.trim(T0 + 1) == 3
    await es.put_subscription(sub(), T0)  # latest: at 5
    assert (await es.replay("s", after=0, now=T0 + 2)).cursor == 0
    assert await matched_next(es) == [4, 5]
    # The replayed subscription now holds 4 and 5 until it matches them.
    assert await es.trim(T0 + 3) == 0
