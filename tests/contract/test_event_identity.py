"""An event's identity is CloudEvents' source + id (both stores): the same id from two sources is
two events; the same source and id again is one event, reported at its stored offset."""

from __future__ import annotations

from typing import cast

import pytest

from cronbus import App
from cronbus.events import make_event
from cronbus.events.records import NewEvent
from cronbus.store import Store
from cronbus.store.ports import EventStore

T0 = 1_700_000_000.0


@pytest.fixture
def es(store: Store) -> EventStore:
    return cast(EventStore, store)


def event(event_id: str, source: str) -> NewEvent:
    return NewEvent(
        id=event_id, type="order.created", source=source, time=T0, data_json=f'"{source}"'
    )


async def test_one_id_from_two_sources_is_two_events(es: EventStore) -> None:
    first = await es.append("orders", [event("42", "/shop/eu")], T0)
    second = await es.append("orders", [event("42", "/shop/us")], T0)

    assert [(a.offset, a.created) for a in (*first, *second)] == [(1, True), (2, True)]
    stored = await es.read_events("orders", 0, 10)
    assert [(e.id, e.source, e.data_json) for e in stored] == [
        ("42", "/shop/eu", '"/shop/eu"'),
        ("42", "/shop/us", '"/shop/us"'),
    ]


async def test_the_same_source_and_id_is_stored_once(es: EventStore) -> None:
    await es.append("orders", [event("42", "/shop/eu"), event("42", "/shop/us")], T0)
    again = await es.append(
        "orders",
        [event("42", "/shop/us"), event("7", "/shop/us"), event("42", "/shop/eu")],
        T0 + 1,
    )
    assert [(a.id, a.offset, a.created) for a in again] == [
        ("42", 2, False),
        ("7", 3, True),
        ("42", 1, False),
    ]
    assert (await es.get_topic("orders")).last_offset == 3


async def test_repeats_within_one_batch_keep_the_first(es: EventStore) -> None:
    batch = [event("a", "/x"), event("a", "/y"), event("a", "/x"), event("b", "/x")]
    appended = await es.append("orders", batch, T0)
    assert [(a.offset, a.created) for a in appended] == [
        (1, True),
        (2, True),
        (1, False),
        (3, True),
    ]
    assert len(await es.read_events("orders", 0, 10)) == 3


async def test_an_id_is_per_topic(es: EventStore) -> None:
    await es.append("orders", [event("42", "/shop")], T0)
    (other,) = await es.append("audit", [event("42", "/shop")], T0)
    assert (other.offset, other.created) == (1, True)


async def test_publishing_through_the_api_dedupes_by_source_and_id(store: Store) -> None:
    async with App(store=store.url) as app:
        eu = make_event("order.created", {"n": 1}, source="/shop/eu", id="order-42")
        us = make_event("order.created", {"n": 2}, source="/shop/us", id="order-42")
        published = await app.events.publish_many("orders", [eu, us, eu])
        assert [(p.event.offset, p.created) for p in published] == [
            (1, True),
            (2, True),
            (1, False),
        ]
        read = await app.events.read("orders")
        assert [(e.source, e.data) for e in read] == [
            ("/shop/eu", {"n": 1}),
            ("/shop/us", {"n": 2}),
        ]
