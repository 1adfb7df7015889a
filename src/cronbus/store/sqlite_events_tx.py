"""The event bus inside SQLite write transactions: functions that take a connection the
caller holds, so each change (an append, a cursor move with its deliveries, a finish) is one
transaction with what it checks (the lease's fence).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import SubscriptionNotFoundError
from ..events.records import (
    Appended,
    Delivery,
    DeliveryOutcome,
    DeliveryResult,
    NewDelivery,
    NewEvent,
    Subscription,
    SubscriptionLease,
    TopicInfo,
)
from ..events.states import DeliveryEvent, DeliveryState, transition
from . import sqlite_events_sql as q
from .event_rows import delivery_from_row, subscription_from_row

if TYPE_CHECKING:
    pass

T = TypeVar("T")
Row = tuple[Any, ...]
_INLINE_BATCH = 16
"""Appends of at most this many events may run on the event loop's thread."""
_TRIM_BATCH = 2000
"""Events examined per trim transaction, so a large trim never holds the write lock long."""
_STARTS = ("latest", "earliest")


def append_events(
    conn: sqlite3.Connection, topic: str, events: Sequence[NewEvent], now: float
) -> list[Appended]:
    """Give new ids the next offsets and insert them with one ``executemany``; known ids
    (stored before, or earlier in the batch) report their offset."""
    conn.execute(q.ENSURE_TOPIC, (topic, now))
    (last,) = conn.execute(q.TOPIC_LAST_OFFSET, (topic,)).fetchone()
    ids = json.dumps(list({e.id: None for e in events}))
    known: dict[str, int] = dict(conn.execute(q.KNOWN_IDS, (topic, ids)).fetchall())
    appended: list[Appended] = []
    rows: list[Row] = []
    for e in events:
        offset = known.get(e.id)
        if offset is not None:
            appended.append(Appended(id=e.id, offset=offset, created=False))
            continue
        last += 1
        known[e.id] = last
        appended.append(Appended(id=e.id, offset=last, created=True))
        rows.append(_event_row(topic, last, e, now))
    if rows:
        conn.executemany(q.INSERT_EVENT, rows)
        conn.execute(q.SET_LAST_OFFSET, (last, topic))
    return appended


def _event_row(topic: str, offset: int, e: NewEvent, now: float) -> Row:
    """The parameters of :data:`~.sqlite_events_sql.INSERT_EVENT`."""
    attributes = (e.id, e.type, e.source, e.subject, e.time, e.datacontenttype, e.key)
    return (topic, offset, *attributes, e.data_json, now)


def topic_info(conn: sqlite3.Connection, topic: str) -> TopicInfo:
    """A topic's offsets, event count and retention."""
    row = conn.execute(q.TOPIC_ROW, (topic,)).fetchone()
    if row is None:
        return TopicInfo(name=topic, first_offset=None, last_offset=0, events=0)
    first, count = conn.execute(q.TOPIC_EVENTS, (topic,)).fetchone()
    return TopicInfo(
        name=topic,
        first_offset=first,
        last_offset=row[1],
        events=count,
        max_age=row[2],
        max_events=row[3],
    )


def offset_at(conn: sqlite3.Connection, topic: str, when: float) -> int:
    """The offset of the last event of ``topic`` published before ``when`` (0: none)."""
    row = conn.execute(q.OFFSET_AT, (topic, when)).fetchone()
    return 0 if row is None else int(row[0])


def trim_cuts(conn: sqlite3.Connection, now: float) -> list[tuple[str, int]]:
    """Per topic with retention, the offset at and below which events may go.

    ``max_events`` keeps the newest that many offsets; ``max_age`` removes what was published
    before ``now - max_age``. Offsets only grow, so a cut read before the deleting transactions
    stays safe while events are appended meanwhile.
    """
    cuts = []
    for name, last, max_age, max_events in conn.execute(q.RETAINED_TOPICS).fetchall():
        cut = 0
        if max_events is not None:
            cut = max(cut, last - max_events)
        if max_age is not None:
            cut = max(cut, offset_at(conn, name, now - max_age))
        if cut > 0:
            cuts.append((name, cut))
    return cuts


def trim_batch(
    conn: sqlite3.Connection, topic: str, after: int, cut: int
) -> tuple[int, int | None]:
    """Delete one batch of events of ``topic`` in ``(after, cut]`` that no live delivery needs.

    Returns how many were deleted and the offset to go on after (None: done).
    """
    params = {"topic": topic, "after": after, "cut": cut, "limit": _TRIM_BATCH}
    rows = conn.execute(q.TRIM_CANDIDATES, params).fetchall()
    if not rows:
        return 0, None
    doomed = [offset for offset, needed in rows if not needed]
    if doomed:
        conn.execute(q.DELETE_EVENTS, (topic, json.dumps(doomed)))
    return len(doomed), (rows[-1][0] if len(rows) == _TRIM_BATCH else None)


def get_subscription(conn: sqlite3.Connection, name: str) -> Subscription:
    """One subscription by name."""
    row = conn.execute(q.GET_SUBSCRIPTION, (name,)).fetchone()
    if row is None:
        raise no_subscription(name)
    return subscription_from_row(row)


def acquire_subscriptions(
    conn: sqlite3.Connection, holder: str, now: float, expires: float, limit: int
) -> list[SubscriptionLease]:
    """Renew every lease of ``holder``, then take free or expired ones while below ``limit``.

    A takeover bumps the epoch, which fences the previous holder, and puts the deliveries it
    had in flight back to pending (their pushes are lost: no attempt spent).
    """
    renewed = conn.execute(q.RENEW_SUBSCRIPTIONS, {"holder": holder, "expires": expires})
    held = [(name, epoch) for name, epoch in renewed.fetchall()]
    room = limit - len(held)
    if room > 0:
        params = {"holder": holder, "now": now, "limit": room}
        ids = json.dumps([row[0] for row in conn.execute(q.FREE_SUBSCRIPTIONS, params)])
        taken = conn.execute(
            q.TAKE_SUBSCRIPTIONS, {"holder": holder, "expires": expires, "ids": ids}
        )
        held.extend(taken.fetchall())
        conn.execute(q.LOSE_IN_FLIGHT, {"ids": ids, "now": now})
    return [
        SubscriptionLease(subscription=name, holder=holder, epoch=epoch, expires_at=expires)
        for name, epoch in sorted(held)
    ]


def advance(
    conn: sqlite3.Connection,
    lease: SubscriptionLease,
    cursor: int,
    deliveries: Sequence[NewDelivery],
    now: float,
) -> bool:
    """Record deliveries and move the cursor, if the lease still holds."""
    fence = _fence(conn, lease)
    if fence is None:
        return False
    sub_id, topic, _ = fence
    rows = [(sub_id, topic, d.offset, d.event_id, d.key, now, now, now) for d in deliveries]
    conn.executemany(q.INSERT_DELIVERY, rows)
    conn.execute(q.SET_CURSOR, (cursor, now, sub_id))
    return True


def take_deliveries(
    conn: sqlite3.Connection, lease: SubscriptionLease, now: float, fresh: int, retry: int
) -> list[Delivery]:
    """Pick due deliveries of each lane (the first of each key, if ordered) and send them."""
    fence = _fence(conn, lease)
    if fence is None:
        return []
    sub_id, _, ordered = fence
    ids: list[int] = []
    for sql, limit in ((q.TAKE_FRESH, fresh), (q.TAKE_RETRY, retry)):
        if limit > 0:
            params = {"sub": sub_id, "now": now, "ordered": ordered, "limit": limit}
            ids.extend(row[0] for row in conn.execute(sql, params))
    if not ids:
        return []
    chosen = json.dumps(ids)
    conn.execute(q.SEND, {"ids": chosen, "now": now})
    rows = conn.execute(q.DELIVERIES_WITH_EVENTS, (chosen,)).fetchall()
    return [delivery_from_row(row, with_event=True) for row in rows]


def finish_deliveries(
    conn: sqlite3.Connection,
    lease: SubscriptionLease,
    results: Sequence[DeliveryResult],
    now: float,
) -> list[bool]:
    """Move each in-flight delivery of the lease's subscription to acked, retry or dead."""
    fence = _fence(conn, lease)
    if fence is None:
        return [False] * len(results)
    ids = json.dumps([r.delivery_id for r in results])
    in_flight = {row[0] for row in conn.execute(q.IN_FLIGHT, (ids, fence[0]))}
    done, changes, attempts = [], [], []
    for result in results:
        if result.delivery_id not in in_flight:
            done.append(False)
            continue
        in_flight.discard(result.delivery_id)  # the same id twice: only the first counts
        changes.append(_finish_params(result, now))
        if result.spend_attempt:
            attempts.append(_attempt_params(result))
        done.append(True)
    conn.executemany(q.FINISH, changes)
    conn.executemany(q.INSERT_ATTEMPT, attempts)
    return done


def _fence(conn: sqlite3.Connection, lease: SubscriptionLease) -> Row | None:
    """The subscription's id, topic and ``ordered`` flag, if ``lease`` still holds it."""
    params = (lease.subscription, lease.holder, lease.epoch)
    row: Row | None = conn.execute(q.FENCE, params).fetchone()
    return row


def _finish_params(result: DeliveryResult, now: float) -> dict[str, Any]:
    if result.outcome is DeliveryOutcome.ACKED:
        event = DeliveryEvent.ACK
    elif result.retry_at is not None:
        event = DeliveryEvent.FAIL
    else:
        event = DeliveryEvent.GIVE_UP
    state = transition(DeliveryState.IN_FLIGHT, event)
    return {
        "id": result.delivery_id,
        "state": state.value,
        "spent": int(result.spend_attempt),
        "due_at": result.retry_at if state is DeliveryState.RETRY else None,
        "now": now,
        "status": result.status,
        "error": result.error,
        "response": result.response,
    }


def _attempt_params(result: DeliveryResult) -> dict[str, Any]:
    return {
        "id": result.delivery_id,
        "outcome": result.outcome.value,
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "status": result.status,
        "error": result.error,
        "response": result.response,
    }


def no_subscription(name: str) -> SubscriptionNotFoundError:
    """The error for an unknown subscription name."""
    return SubscriptionNotFoundError(f"no subscription named {name!r}")
