"""The store contract for the event bus: topics, subscriptions, leases, cursors, deliveries."""

from __future__ import annotations

from typing import cast

import pytest

from cronbus.errors import DeliveryNotFoundError, SubscriptionNotFoundError
from cronbus.events.records import (
    DeliveryFilter,
    DeliveryOutcome,
    DeliveryPolicy,
    DeliveryResult,
    NewDelivery,
    NewEvent,
    SubscriptionLease,
    SubscriptionSpec,
)
from cronbus.events.states import DeliveryState
from cronbus.store import Store
from cronbus.store.ports import EVENTS_CHANNEL, EventStore

T0 = 1_700_000_000.0
HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}
D = DeliveryState


@pytest.fixture
def es(store: Store) -> EventStore:
    return cast(EventStore, store)


def event(i: int | str, key: str | None = None, **kw: object) -> NewEvent:
    return NewEvent(
        id=f"e{i}",
        type=str(kw.pop("type", "order.created")),
        source="test",
        time=float(kw.pop("time", T0)),  # type: ignore[arg-type]
        data_json=str(kw.pop("data_json", f'{{"n": "{i}"}}')),
        key=key,
    )


def sub(name: str = "s", topic: str = "orders", **kw: object) -> SubscriptionSpec:
    return SubscriptionSpec(name=name, topic=topic, target=dict(HOOK), **kw)  # type: ignore[arg-type]


async def hold(es: EventStore, name: str = "s", holder: str = "d1") -> SubscriptionLease:
    leases = await es.acquire_subscriptions(holder, T0, 30.0, limit=10)
    return next(lease for lease in leases if lease.subscription == name)


async def record(es: EventStore, lease: SubscriptionLease, offsets: list[int]) -> None:
    news = [NewDelivery(offset=o, event_id=f"e{o}", key=None) for o in offsets]
    assert await es.advance(lease, max(offsets), news, T0)


# -- topics and events ---------------------------------------------------------------------------
async def test_append_gives_increasing_offsets_per_topic(es: EventStore) -> None:
    first = await es.append("orders", [event(1), event(2)], T0)
    assert [(a.id, a.offset, a.created) for a in first] == [("e1", 1, True), ("e2", 2, True)]
    other = await es.append("audit", [event(1)], T0)
    assert [(a.offset, a.created) for a in other] == [(1, True)]
    more = await es.append("orders", [event(3)], T0 + 1)
    assert [a.offset for a in more] == [3]
    read = await es.read_events("orders", after=1, limit=10)
    assert [(e.offset, e.id, e.topic) for e in read] == [(2, "e2", "orders"), (3, "e3", "orders")]
    assert read[0].data == {"n": "2"}
    assert read[0].published_at == T0
    assert [e.offset for e in await es.read_events("orders", after=0, limit=2)] == [1, 2]


async def test_a_repeated_event_id_is_stored_once(es: EventStore) -> None:
    await es.append("orders", [event(1), event(2)], T0)
    again = await es.append("orders", [event(2, data_json='{"changed": true}'), event(3)], T0)
    assert [(a.id, a.offset, a.created) for a in again] == [("e2", 2, False), ("e3", 3, True)]
    within = await es.append("orders", [event(4), event(4)], T0)
    assert [(a.offset, a.created) for a in within] == [(4, True), (4, False)]
    stored = await es.read_events("orders", after=0, limit=10)
    assert [e.id for e in stored] == ["e1", "e2", "e3", "e4"]
    assert stored[1].data == {"n": "2"}


async def test_event_attributes_round_trip(es: EventStore) -> None:
    new = NewEvent(
        id="x",
        type="order.paid",
        source="shop",
        subject="order/7",
        time=T0 - 5,
        datacontenttype="application/json",
        data_json='{"amount": 12.5, "tags": ["a"]}',
        key="customer-1",
    )
    await es.append("orders", [new], T0)
    (got,) = await es.read_events("orders", after=0, limit=1)
    assert (got.id, got.type, got.source, got.subject, got.time) == (
        "x",
        "order.paid",
        "shop",
        "order/7",
        T0 - 5,
    )
    assert (got.key, got.order_key, got.data) == ("customer-1", "customer-1", new_data())


def new_data() -> dict[str, object]:
    return {"amount": 12.5, "tags": ["a"]}


async def test_topics_report_offsets_and_retention(es: EventStore) -> None:
    empty = await es.get_topic("nothing")
    assert (empty.last_offset, empty.events, empty.first_offset) == (0, 0, None)
    await es.append("orders", [event(i) for i in range(1, 4)], T0)
    await es.set_retention("orders", max_age=3600.0, max_events=None)
    info = await es.get_topic("orders")
    assert (info.first_offset, info.last_offset, info.events) == (1, 3, 3)
    assert (info.max_age, info.max_events) == (3600.0, None)
    assert [t.name for t in await es.list_topics()] == ["orders"]


async def test_offset_at_finds_the_last_event_before_a_time(es: EventStore) -> None:
    await es.append("orders", [event(1)], T0)
    await es.append("orders", [event(2)], T0 + 10)
    await es.append("orders", [event(3)], T0 + 20)
    assert await es.offset_at("orders", T0 - 1) == 0
    assert await es.offset_at("orders", T0 + 15) == 2
    assert await es.offset_at("orders", T0 + 99) == 3


async def test_trim_applies_retention_but_keeps_events_of_live_deliveries(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(i) for i in range(1, 7)], T0)
    lease = await hold(es)
    # Every event matched (retention keeps what is above a cursor); event 2 has a live
    # (pending) delivery.
    assert await es.advance(lease, 6, [NewDelivery(offset=2, event_id="e2", key=None)], T0)
    await es.set_retention("orders", max_age=None, max_events=2)
    removed = await es.trim(T0 + 1)
    assert removed == 3
    assert [e.offset for e in await es.read_events("orders", 0, 10)] == [2, 5, 6]
    await es.set_retention("orders", max_age=60.0, max_events=None)
    await es.append("orders", [event(7)], T0 + 100)
    assert await es.trim(T0 + 100) == 2  # 5 and 6 are older than a minute; 2 is still needed
    assert [e.offset for e in await es.read_events("orders", 0, 10)] == [2, 7]
    assert (await es.get_topic("orders")).last_offset == 7


# -- subscriptions -------------------------------------------------------------------------------
async def test_put_get_list_and_delete_subscriptions(es: EventStore) -> None:
    await es.append("orders", [event(1), event(2)], T0)
    latest = await es.put_subscription(sub("late"), T0)
    earliest = await es.put_subscription(sub("early", start="earliest"), T0)
    assert (latest.cursor, earliest.cursor) == (2, 0)
    policy = DeliveryPolicy(max_in_flight=3, ordered=True)
    changed = await es.put_subscription(
        sub("early", filter={"types": ["order.*"]}, policy=policy), T0 + 1
    )
    assert changed.id == earliest.id
    assert changed.cursor == 0
    assert changed.spec.policy == policy
    assert changed.spec.filter == {"types": ["order.*"]}
    assert changed.spec.target == HOOK
    assert [s.name for s in await es.list_subscriptions()] == ["early", "late"]
    assert [s.name for s in await es.list_subscriptions("audit")] == []
    await es.delete_subscription("late")
    with pytest.raises(SubscriptionNotFoundError):
        await es.get_subscription("late")
    with pytest.raises(SubscriptionNotFoundError):
        await es.delete_subscription("late")


async def test_pause_and_resume(es: EventStore) -> None:
    await es.put_subscription(sub(), T0)
    paused = await es.set_subscription_paused("s", True, "410 Gone", T0)
    assert (paused.paused, paused.disabled_reason) == (True, "410 Gone")
    assert await es.acquire_subscriptions("d1", T0, 30.0, limit=10) == []
    resumed = await es.set_subscription_paused("s", False, None, T0)
    assert (resumed.paused, resumed.disabled_reason) == (False, None)
    with pytest.raises(SubscriptionNotFoundError):
        await es.set_subscription_paused("nope", True, None, T0)


# -- leases --------------------------------------------------------------------------------------
async def test_one_holder_at_a_time_and_takeover_after_expiry(es: EventStore) -> None:
    await es.put_subscription(sub(), T0)
    (a,) = await es.acquire_subscriptions("d1", T0, 10.0, limit=10)
    assert (a.holder, a.expires_at) == ("d1", T0 + 10.0)
    assert await es.acquire_subscriptions("d2", T0 + 5, 10.0, limit=10) == []
    (renewed,) = await es.acquire_subscriptions("d1", T0 + 5, 10.0, limit=10)
    assert (renewed.epoch, renewed.expires_at) == (a.epoch, T0 + 15.0)
    assert await es.acquire_subscriptions("d2", T0 + 14, 10.0, limit=10) == []
    (b,) = await es.acquire_subscriptions("d2", T0 + 16, 10.0, limit=10)
    assert b.holder == "d2"
    assert b.epoch > a.epoch
    stored = await es.get_subscription("s")
    assert (stored.holder, stored.lease_expires_at) == ("d2", T0 + 26.0)
    assert await es.acquire_subscriptions("d1", T0 + 17, 10.0, limit=10) == []


async def test_acquire_respects_its_limit_and_release_frees(es: EventStore) -> None:
    for name in ("a", "b", "c"):
        await es.put_subscription(sub(name), T0)
    first = await es.acquire_subscriptions("d1", T0, 30.0, limit=2)
    assert len(first) == 2
    second = await es.acquire_subscriptions("d2", T0, 30.0, limit=2)
    assert len(second) == 1
    assert {lease.subscription for lease in first + second} == {"a", "b", "c"}
    await es.release_subscriptions("d1", [first[0].subscription])
    taken = await es.acquire_subscriptions("d2", T0 + 1, 30.0, limit=2)
    assert {lease.subscription for lease in taken} == {
        first[0].subscription,
        second[0].subscription,
    }


# -- cursors and deliveries ----------------------------------------------------------------------
async def test_advance_records_deliveries_with_the_cursor(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(i, key="k") for i in range(1, 4)], T0)
    lease = await hold(es)
    news = [
        NewDelivery(offset=1, event_id="e1", key="k"),
        NewDelivery(offset=3, event_id="e3", key="k"),
    ]
    assert await es.advance(lease, 3, news, T0)
    assert (await es.get_subscription("s")).cursor == 3
    listed = await es.list_deliveries(DeliveryFilter(subscription="s"))
    assert sorted((d.offset, d.state, d.attempts, d.key) for d in listed) == [
        (1, D.PENDING, 0, "k"),
        (3, D.PENDING, 0, "k"),
    ]
    assert await es.next_delivery_due("s") == T0
    assert await es.count_deliveries("s") == {D.PENDING: 2}


async def test_a_stale_lease_changes_nothing(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(1), event(2)], T0)
    (old,) = await es.acquire_subscriptions("d1", T0, 10.0, limit=1)
    await record(es, old, [1])
    (taken,) = await es.take_deliveries(old, T0, fresh=10, retry=0)
    (new,) = await es.acquire_subscriptions("d2", T0 + 11, 10.0, limit=1)
    # The new holder finds the dead holder's in-flight delivery pending again.
    (back,) = await es.list_deliveries(DeliveryFilter(subscription="s"))
    assert (back.id, back.state) == (taken.id, D.PENDING)
    late = [NewDelivery(offset=2, event_id="e2", key=None)]
    assert not await es.advance(old, 2, late, T0 + 12)
    assert (await es.get_subscription("s")).cursor == 1
    acked = _result(taken.id, DeliveryOutcome.ACKED, T0 + 12)
    assert await es.finish_deliveries(old, [acked], T0 + 12) == [False]
    assert await es.take_deliveries(old, T0 + 12, fresh=10, retry=10) == []
    (retaken,) = await es.take_deliveries(new, T0 + 12, fresh=10, retry=0)
    assert retaken.id == taken.id
    assert retaken.attempts == 0  # a lost push spends no attempt


def _result(delivery_id: int, outcome: DeliveryOutcome, at: float, **kw: object) -> DeliveryResult:
    return DeliveryResult(
        delivery_id=delivery_id, outcome=outcome, started_at=at - 0.1, finished_at=at, **kw
    )  # type: ignore[arg-type]


async def test_take_moves_due_deliveries_in_flight_with_their_events(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(i) for i in range(1, 5)], T0)
    lease = await hold(es)
    await record(es, lease, [1, 2, 3, 4])
    taken = await es.take_deliveries(lease, T0, fresh=3, retry=0)
    assert [d.offset for d in taken] == [1, 2, 3]
    assert all(d.state is D.IN_FLIGHT for d in taken)
    assert taken[0].event is not None
    assert (taken[0].event.id, taken[0].event.data) == ("e1", {"n": "1"})
    rest = await es.take_deliveries(lease, T0, fresh=3, retry=0)
    assert [d.offset for d in rest] == [4]
    assert await es.take_deliveries(lease, T0, fresh=3, retry=3) == []
    assert await es.count_deliveries("s") == {D.IN_FLIGHT: 4}


async def test_finish_acks_retries_and_dead_letters(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(i) for i in range(1, 4)], T0)
    lease = await hold(es)
    await record(es, lease, [1, 2, 3])
    one, two, three = await es.take_deliveries(lease, T0, fresh=10, retry=0)
    results = [
        _result(one.id, DeliveryOutcome.ACKED, T0 + 1, status=200),
        _result(
            two.id,
            DeliveryOutcome.FAILED,
            T0 + 1,
            status=500,
            retry_at=T0 + 30,
            response="oops",
            error="HTTP 500",
        ),
        _result(three.id, DeliveryOutcome.TIMED_OUT, T0 + 1, error="timed out after 10s"),
    ]
    assert await es.finish_deliveries(lease, results, T0 + 1) == [True, True, True]
    acked, retry, dead = [await es.get_delivery(d.id) for d in (one, two, three)]
    assert (acked.state, acked.attempts, acked.last_status) == (D.ACKED, 1, 200)
    assert (retry.state, retry.due_at, retry.last_status, retry.last_response) == (
        D.RETRY,
        T0 + 30,
        500,
        "oops",
    )
    assert (dead.state, dead.last_error) == (D.DEAD, "timed out after 10s")
    attempts = await es.list_delivery_attempts(two.id)
    assert [(a.number, a.outcome, a.status, a.error) for a in attempts] == [
        (1, DeliveryOutcome.FAILED, 500, "HTTP 500")
    ]
    # Finishing twice is refused: the delivery is no longer in flight.
    again = _result(one.id, DeliveryOutcome.ACKED, T0 + 2)
    assert await es.finish_deliveries(lease, [again], T0 + 2) == [False]
    # The retry lane: not before it is due, then taken by the retry share only.
    assert await es.take_deliveries(lease, T0 + 29, fresh=10, retry=10) == []
    assert await es.next_delivery_due("s") == T0 + 30
    assert await es.take_deliveries(lease, T0 + 30, fresh=10, retry=0) == []
    (retaken,) = await es.take_deliveries(lease, T0 + 30, fresh=0, retry=10)
    assert (retaken.id, retaken.attempts) == (two.id, 1)


async def test_a_delay_that_spends_no_attempt(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(1)], T0)
    lease = await hold(es)
    await record(es, lease, [1])
    (d,) = await es.take_deliveries(lease, T0, fresh=1, retry=0)
    limited = _result(
        d.id, DeliveryOutcome.FAILED, T0, status=429, retry_at=T0 + 5, spend_attempt=False
    )
    assert await es.finish_deliveries(lease, [limited], T0) == [True]
    got = await es.get_delivery(d.id)
    assert (got.state, got.attempts, got.due_at) == (D.RETRY, 0, T0 + 5)


async def test_ordered_subscriptions_hold_back_a_failing_key_only(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest", policy=DeliveryPolicy(ordered=True)), T0)
    keys = ["a", "a", "b", "a", "b"]
    await es.append("orders", [event(i, key=k) for i, k in enumerate(keys, 1)], T0)
    lease = await hold(es)
    news = [NewDelivery(offset=i, event_id=f"e{i}", key=k) for i, k in enumerate(keys, 1)]
    assert await es.advance(lease, 5, news, T0)
    first = await es.take_deliveries(lease, T0, fresh=10, retry=10)
    assert [d.offset for d in first] == [1, 3]  # the first of each key
    failed = _result(first[0].id, DeliveryOutcome.FAILED, T0 + 1, retry_at=T0 + 60)
    acked = _result(first[1].id, DeliveryOutcome.ACKED, T0 + 1)
    await es.finish_deliveries(lease, [failed, acked], T0 + 1)
    assert [d.offset for d in await es.take_deliveries(lease, T0 + 2, 10, 10)] == [5]
    (retry,) = await es.take_deliveries(lease, T0 + 60, fresh=10, retry=10)
    assert retry.offset == 1
    await es.finish_deliveries(lease, [_result(retry.id, DeliveryOutcome.ACKED, T0 + 61)], T0 + 61)
    assert [d.offset for d in await es.take_deliveries(lease, T0 + 61, 10, 10)] == [2]


async def test_dead_deliveries_can_be_requeued(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(1), event(2)], T0)
    lease = await hold(es)
    await record(es, lease, [1, 2])
    taken = await es.take_deliveries(lease, T0, fresh=10, retry=0)
    dead = [_result(d.id, DeliveryOutcome.FAILED, T0 + 1, error="boom") for d in taken]
    await es.finish_deliveries(lease, dead, T0 + 1)
    assert await es.count_deliveries("s") == {D.DEAD: 2}
    assert await es.requeue_deliveries([taken[0].id], T0 + 2) == [taken[0].id]
    back = await es.get_delivery(taken[0].id)
    assert (back.state, back.attempts, back.due_at) == (D.PENDING, 0, T0 + 2)
    assert await es.requeue_deliveries([taken[0].id], T0 + 2) == []  # no longer dead
    assert await es.requeue_deliveries(None, T0 + 3, subscription="s") == [taken[1].id]
    with pytest.raises(DeliveryNotFoundError):
        await es.get_delivery(999_999)


async def test_replay_moves_the_cursor_back(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(i) for i in range(1, 4)], T0)
    lease = await hold(es)
    await record(es, lease, [1, 2, 3])
    replayed = await es.replay("s", after=1, now=T0 + 1)
    assert (replayed.cursor, replayed.holder) == (1, None)
    # The old holder is fenced: its in-memory cursor cannot overwrite the replayed one.
    stale = [NewDelivery(offset=3, event_id="e3", key=None)]
    assert not await es.advance(lease, 3, stale, T0 + 1)
    # The next holder matches events 2 and 3 again and records new deliveries for them.
    lease = await hold(es)
    await record(es, lease, [2, 3])
    listed = await es.list_deliveries(DeliveryFilter(subscription="s"))
    assert sorted(d.offset for d in listed) == [1, 2, 2, 3, 3]
    with pytest.raises(SubscriptionNotFoundError):
        await es.replay("nope", after=0, now=T0)


async def test_deleting_a_subscription_deletes_its_deliveries(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(1)], T0)
    lease = await hold(es)
    await record(es, lease, [1])
    (d,) = await es.list_deliveries(DeliveryFilter(subscription="s"))
    await es.delete_subscription("s")
    with pytest.raises(DeliveryNotFoundError):
        await es.get_delivery(d.id)
    assert await es.list_deliveries(DeliveryFilter()) == []


async def test_list_deliveries_filters_by_state(es: EventStore) -> None:
    await es.put_subscription(sub(start="earliest"), T0)
    await es.append("orders", [event(1), event(2)], T0)
    lease = await hold(es)
    await record(es, lease, [1, 2])
    (one, _) = await es.take_deliveries(lease, T0, fresh=10, retry=0)
    await es.finish_deliveries(lease, [_result(one.id, DeliveryOutcome.ACKED, T0)], T0)
    acked = await es.list_deliveries(DeliveryFilter(subscription="s", states=[D.ACKED]))
    assert [d.id for d in acked] == [one.id]
    assert len(await es.list_deliveries(DeliveryFilter(limit=1))) == 1


async def test_append_wakes_listeners_of_the_events_channel(store: Store, es: EventStore) -> None:
    listener = await store.listen([EVENTS_CHANNEL])
    try:
        await es.append("orders", [event(1)], T0)
        assert await listener.wait(5.0)
    finally:
        await listener.close()
