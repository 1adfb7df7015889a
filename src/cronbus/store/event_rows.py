"""Row layouts of the event bus shared by both stores: column lists and row converters.

Both stores select events, deliveries and subscriptions in these column orders and build the
records here, so the SQLite and PostgreSQL stores cannot drift apart. ``"offset"`` is quoted,
as PostgreSQL needs and SQLite accepts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import SubscriptionExistsError
from ..events.records import (
    Delivery,
    DeliveryAttempt,
    DeliveryOutcome,
    DeliveryPolicy,
    EventRecord,
    Origin,
    Subscription,
    SubscriptionSpec,
)
from ..events.states import DeliveryState

Row = Sequence[Any]

EVENT_COLUMNS = """
    e.topic, e."offset", e.event_id, e.type, e.source, e.subject, e.time, e.datacontenttype,
    e.data, e.key, e.published_at, e.trace
"""
DELIVERY_COLUMNS = """
    d.id, s.name, d.topic, d."offset", d.event_id, d.key, d.state, d.attempts, d.due_at,
    d.created_at, d.updated_at, d.last_status, d.last_error, d.last_response
"""
SUBSCRIPTION_FIELDS = (
    "id, name, topic, target, filter, policy, origin, start, cursor, paused, disabled_reason, "
    "holder, lease_expires_at, created_at, updated_at, namespace"
)
"""The subscription columns, in the order :func:`subscription_from_row` reads them."""
_EVENT_WIDTH = 12
_DELIVERY_WIDTH = 14


def event_from_row(row: Row, at: int = 0) -> EventRecord:
    """An :class:`EventRecord` from :data:`EVENT_COLUMNS`, starting at column ``at``."""
    r = row[at : at + _EVENT_WIDTH]
    return EventRecord(
        topic=r[0],
        offset=r[1],
        id=r[2],
        type=r[3],
        source=r[4],
        subject=r[5],
        time=r[6],
        datacontenttype=r[7],
        data_json=r[8],
        key=r[9],
        published_at=r[10],
        trace=r[11],
    )


def delivery_from_row(row: Row, *, with_event: bool = False) -> Delivery:
    """A :class:`Delivery` from :data:`DELIVERY_COLUMNS`, then :data:`EVENT_COLUMNS` with
    ``with_event`` (whose topic is NULL when retention removed the event)."""
    has_event = with_event and len(row) > _DELIVERY_WIDTH and row[_DELIVERY_WIDTH] is not None
    return Delivery(
        id=row[0],
        subscription=row[1],
        topic=row[2],
        offset=row[3],
        event_id=row[4],
        key=row[5],
        state=DeliveryState(row[6]),
        attempts=row[7],
        due_at=row[8],
        created_at=row[9],
        updated_at=row[10],
        last_status=row[11],
        last_error=row[12],
        last_response=row[13],
        event=event_from_row(row, _DELIVERY_WIDTH) if has_event else None,
    )


def attempt_from_row(row: Row) -> DeliveryAttempt:
    """A :class:`DeliveryAttempt` from ``delivery_id, number, outcome, started_at,
    finished_at, status, error, response``."""
    return DeliveryAttempt(
        delivery_id=row[0],
        number=row[1],
        outcome=DeliveryOutcome(row[2]),
        started_at=row[3],
        finished_at=row[4],
        status=row[5],
        error=row[6],
        response=row[7],
    )


def subscription_from_row(row: Row, decode: Callable[[Any], Any] = json.loads) -> Subscription:
    """A :class:`Subscription` from :data:`SUBSCRIPTION_FIELDS`; ``decode`` reads the JSON
    columns (text in SQLite; PostgreSQL's jsonb arrives decoded: pass :func:`decoded`)."""
    spec = SubscriptionSpec(
        name=row[1],
        topic=row[2],
        target=decode(row[3]),
        filter=decode(row[4]),
        policy=DeliveryPolicy.from_json(decode(row[5])),
        origin=Origin(row[6]),
        start=row[7],
        namespace=row[15],
    )
    return Subscription(
        spec=spec,
        id=row[0],
        cursor=row[8],
        paused=bool(row[9]),
        disabled_reason=row[10],
        holder=row[11],
        lease_expires_at=row[12],
        created_at=row[13],
        updated_at=row[14],
    )


def decoded(value: Any) -> Any:
    """The identity: for JSON columns the driver has already decoded."""
    return value


def created_or_same(existing: Subscription, spec: SubscriptionSpec) -> Subscription:
    """Decide an add (``put_subscription(create=True)``) that found ``existing`` by name.

    The same definition is a no-op (an add retried, or two processes adding the same thing);
    another definition is refused with :class:`~cronbus.errors.SubscriptionExistsError`, so the
    first add wins whole and nothing is half-overwritten.
    """
    if existing.spec == spec:
        return existing
    raise SubscriptionExistsError(
        f"subscription {spec.name!r} exists with another definition; change it with "
        "update, or add it again with replace_existing=True (--replace)"
    )
