"""Subscriptions in the PostgreSQL store: their definitions, leases, cursors and deliveries.

Round trips, as for runs, are what a call costs. Each of these is one pipelined transaction in
one round trip, whatever the batch: ``advance`` (cursor and deliveries in one statement),
``take_deliveries`` and ``finish_deliveries`` (fence, then one statement).
``acquire_subscriptions`` takes two.

Durability: appends and commands (users are told they happened) wait for the server's disk at
commit. Leases, cursor moves, takes and finishes do not (``synchronous_commit`` off): a server
crash may lose the last moment of them, all together and in commit order, which only pushes
some events again: at-least-once delivery allows it, and the cursor never passes a delivery that
was lost without it (invariant 4 holds within each transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ...errors import (
    ConflictError,
    DeliveryNotFoundError,
    InvalidArgumentError,
    SubscriptionNotFoundError,
)
from ...events.records import (
    Delivery,
    DeliveryAttempt,
    DeliveryFilter,
    DeliveryOutcome,
    DeliveryResult,
    NewDelivery,
    Subscription,
    SubscriptionLease,
    SubscriptionSpec,
)
from ...events.states import DeliveryEvent, DeliveryState, transition
from ..event_rows import (
    attempt_from_row,
    created_or_same,
    decoded,
    delivery_from_row,
    subscription_from_row,
)
from ..ports import EVENTS_CHANNEL
from . import events_sql as q
from .connection import Connected, Row
from .rows import arrays

_STARTS = ("latest", "earliest")
_PUSHED = DeliveryState.IN_FLIGHT
"""Where every push ends from: a result applies only to a delivery still in flight."""


class PostgresSubscriptions(Connected):
    """The subscriptions and subscription leases roles (:class:`~cronbus.store.ports.Subscriptions`,
    :class:`~cronbus.store.ports.SubscriptionLeases`) of the PostgreSQL store."""

    async def put_subscription(
        self, spec: SubscriptionSpec, now: float, *, create: bool = False
    ) -> Subscription:
        """Create or replace a subscription; a new one starts at ``spec.start``.

        With ``create``, only create it: the insert decides between concurrent adds; an
        existing one with the same definition is returned unchanged, one with another
        definition raises ``SubscriptionExistsError``. Dispatchers are told by the caller
        (``SUBSCRIPTIONS_CHANNEL``), as for every change of a definition or state.
        """
        if spec.start not in _STARTS:
            raise InvalidArgumentError(
                f"subscription {spec.name!r}: start must be 'latest' or 'earliest', "
                f"not {spec.start!r}"
            )
        owner = await self._db.one(q.TOPIC_NAMESPACE, (spec.topic,))
        if owner is not None and owner[0] != spec.namespace:
            raise ConflictError(f"topic {spec.topic!r} belongs to namespace {owner[0]!r}")
        params = _subscription_params(spec, now)
        if not create:
            row = await self._db.one(q.PUT_SUBSCRIPTION, params)
            if row is None:
                owner = await self._db.one(q.SUBSCRIPTION_NAMESPACE, (spec.name,))
                raise ConflictError(
                    f"subscription {spec.name!r} belongs to namespace {owner and owner[0]!r}"
                )
            return _subscription(row)
        # The winner of a race may be deleted before the loser reads it: then insert again.
        while True:
            row = await self._db.one(q.CREATE_SUBSCRIPTION, params)
            if row is not None:
                return _subscription(row)
            existing = await self._db.one(q.GET_SUBSCRIPTION, (spec.name,))
            if existing is not None:
                return created_or_same(_subscription(existing), spec)

    async def get_subscription(self, name: str) -> Subscription:
        """One subscription, or :class:`~cronbus.errors.SubscriptionNotFoundError`."""
        return _subscription(_found(await self._db.one(q.GET_SUBSCRIPTION, (name,)), name))

    async def list_subscriptions(
        self, topic: str | None = None, namespace: str | None = None
    ) -> list[Subscription]:
        """Every subscription (of ``topic``, of ``namespace``), by name."""
        params = {"topic": topic, "namespace": namespace}
        rows = await self._db.rows(q.LIST_SUBSCRIPTIONS, params)
        return [_subscription(row) for row in rows]

    async def set_subscription_paused(
        self, name: str, paused: bool, reason: str | None, now: float
    ) -> Subscription:
        """Pause (ending its lease) or resume a subscription."""
        params = {"name": name, "paused": paused, "reason": reason, "now": now}
        return _subscription(_found(await self._db.one(q.SET_PAUSED, params), name))

    async def delete_subscription(self, name: str) -> None:
        """Delete a subscription with its deliveries and their attempts."""
        async with self._db.transaction() as tx:
            await tx.queue(q.LOCK_SUBSCRIPTION, (name,))
            deleting = await tx.queue(q.DELETE_SUBSCRIPTION, {"name": name})
        _found(await deleting.fetchone(), name)

    async def replay(self, name: str, after: int, now: float) -> Subscription:
        """Move the cursor to ``after``; the holder matches the events above it again."""
        if after < 0:
            raise InvalidArgumentError(f"replay of {name!r}: the offset must be 0 or more")
        async with self._db.transaction() as tx:
            moving = await tx.queue(q.REPLAY, {"name": name, "after": after, "now": now})
            tx.nudges.add(EVENTS_CHANNEL)
        return _subscription(_found(await moving.fetchone(), name))

    async def acquire_subscriptions(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[SubscriptionLease]:
        """Renew ``holder``'s leases and take free or expired ones up to ``limit`` in all.

        Leases already held are all renewed, even beyond ``limit`` (a lower limit takes no
        more, and drops none). Two round trips: the reset of a taken subscription's in-flight
        deliveries reads a snapshot taken after the takeover locked it.
        """
        expires = now + lease_seconds
        params = {"holder": holder, "now": now, "expires": expires, "limit": limit}
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(q.ACQUIRE, params)
            taken = [row[0] for row in rows if row[3]]
            if taken:
                await tx.queue(q.RESET_IN_FLIGHT, {"ids": taken, "now": now})
        leases = [
            SubscriptionLease(subscription=name, holder=holder, epoch=epoch, expires_at=expires)
            for _, name, epoch, _ in rows
        ]
        return sorted(leases, key=lambda lease: lease.subscription)

    async def release_subscriptions(self, holder: str, names: Sequence[str]) -> None:
        """Give up leases; the next taker bumps the epoch and finds their pushes pending."""
        if names:
            await self._db.execute(q.RELEASE, (holder, list(names)))

    async def advance(
        self,
        lease: SubscriptionLease,
        cursor: int,
        deliveries: Sequence[NewDelivery],
        now: float,
    ) -> bool:
        """Record ``deliveries`` and move the cursor in one statement; False if fenced out."""
        rows = [(d.offset, d.event_id, d.key) for d in deliveries]
        params = {
            **_held(lease),
            **arrays(("offset", "event_id", "key"), rows),
            "cursor": cursor,
            "now": now,
        }
        async with self._db.transaction(durable=False) as tx:
            advancing = await tx.queue(q.ADVANCE, params)
        row = await advancing.fetchone()
        return bool(row and row[0])

    async def take_deliveries(
        self, lease: SubscriptionLease, now: float, fresh: int, retry: int
    ) -> list[Delivery]:
        """Move due deliveries of both lanes in flight and return them with their events."""
        if fresh <= 0 and retry <= 0:
            return []
        params = {**_held(lease), "now": now, "fresh": max(fresh, 0), "retry": max(retry, 0)}
        async with self._db.transaction(durable=False) as tx:
            await tx.queue(q.FENCE, params)
            taking = await tx.queue(q.TAKE, params)
        return [delivery_from_row(row, with_event=True) for row in await taking.fetchall()]

    async def finish_deliveries(
        self, lease: SubscriptionLease, results: Sequence[DeliveryResult], now: float
    ) -> list[bool]:
        """Record ended pushes in one statement; only the first result of a delivery in a
        batch, and only for a delivery still in flight under this lease, is applied."""
        if not results:
            return []
        firsts = _first_results(results)
        rows = [
            _finish_row(result, now) for result, first in zip(results, firsts, strict=True) if first
        ]
        params = {**_held(lease), **arrays(_FINISH_COLUMNS, rows), "now": now}
        async with self._db.transaction(durable=False) as tx:
            await tx.queue(q.FENCE, params)
            finishing = await tx.queue(q.FINISH, params)
        done = {row[0] for row in await finishing.fetchall()}
        return [
            first and result.delivery_id in done
            for result, first in zip(results, firsts, strict=True)
        ]

    async def next_delivery_due(self, subscription: str) -> float | None:
        """When the earliest pending or retry delivery of ``subscription`` is due."""
        row = await self._db.one(q.NEXT_DUE, (subscription,))
        return None if row is None or row[0] is None else float(row[0])

    async def get_delivery(self, delivery_id: int) -> Delivery:
        """One delivery with its event, or :class:`~cronbus.errors.DeliveryNotFoundError`."""
        row = await self._db.one(q.GET_DELIVERY, (delivery_id,))
        if row is None:
            raise DeliveryNotFoundError(f"no delivery has id {delivery_id}")
        return delivery_from_row(row, with_event=True)

    async def list_deliveries(self, filter: DeliveryFilter) -> list[Delivery]:
        """Deliveries matching ``filter``, newest first, without their events."""
        values = {
            "subscription": filter.subscription,
            "states": [state.value for state in filter.states] or None,
        }
        given = {name: value for name, value in values.items() if value is not None}
        where = " AND ".join(q.DELIVERY_FILTERS[name] for name in given)
        query = q.LIST_DELIVERIES + (f" WHERE {where}" if where else "") + q.LIST_DELIVERIES_ORDER
        rows = await self._db.rows(query, [*given.values(), filter.limit])
        return [delivery_from_row(row, with_event=True) for row in rows]

    async def list_delivery_attempts(self, delivery_id: int) -> list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        return [
            attempt_from_row(row) for row in await self._db.rows(q.LIST_ATTEMPTS, (delivery_id,))
        ]

    async def count_deliveries(self, subscription: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``subscription`` are in each state."""
        rows = await self._db.rows(q.COUNT_DELIVERIES, (subscription,))
        return {DeliveryState(state): count for state, count in rows}

    async def requeue_deliveries(
        self, delivery_ids: Sequence[int] | None, now: float, subscription: str | None = None
    ) -> list[int]:
        """Push dead deliveries again, due now with a fresh attempt budget; return their ids."""
        values = {
            "ids": list(delivery_ids) if delivery_ids is not None else None,
            "subscription": subscription,
        }
        given = {name: value for name, value in values.items() if value is not None}
        query = "".join(f" AND {q.REQUEUE_FILTERS[name]}" for name in given)
        async with self._db.transaction() as tx:
            rows = await tx.rows(
                q.REQUEUE + query + q.REQUEUE_RETURNING, [now, now, *given.values()]
            )
            if rows:
                tx.nudges.add(EVENTS_CHANNEL)
        return sorted(row[0] for row in rows)

    async def delete_deliveries(self, delivery_ids: Sequence[int]) -> list[int]:
        """Delete the dead deliveries among ``delivery_ids`` with their attempts (a purge)."""
        if not delivery_ids:
            return []
        async with self._db.transaction() as tx:
            rows = await tx.rows(q.DELETE_DELIVERIES, {"ids": list(delivery_ids)})
        return [row[0] for row in rows]


def _subscription_params(spec: SubscriptionSpec, now: float) -> dict[str, Any]:
    return {
        "name": spec.name,
        "topic": spec.topic,
        "target": Jsonb(spec.target),
        "filter": Jsonb(spec.filter),
        "policy": Jsonb(spec.policy.to_json()),
        "origin": spec.origin.value,
        "start": spec.start,
        "earliest": spec.start == "earliest",
        "namespace": spec.namespace,
        "now": now,
    }


def _held(lease: SubscriptionLease) -> dict[str, Any]:
    """The fence: the lease's subscription, holder and epoch."""
    return {"name": lease.subscription, "holder": lease.holder, "epoch": lease.epoch}


def _first_results(results: Sequence[DeliveryResult]) -> list[bool]:
    """Which results are the first of their delivery in the batch (only those can apply)."""
    seen: set[int] = set()
    firsts = []
    for result in results:
        firsts.append(result.delivery_id not in seen)
        seen.add(result.delivery_id)
    return firsts


def _finish_row(result: DeliveryResult, now: float) -> Row:
    """A result as ``FINISH``'s row: the state machine decides where the delivery goes.

    A lost push goes back to pending and spends nothing, whatever ``spend_attempt`` says.
    """
    outcome = result.outcome
    due_at: float | None = None
    if outcome is DeliveryOutcome.ACKED:
        event = DeliveryEvent.ACK
    elif outcome is DeliveryOutcome.LOST:
        event, due_at = DeliveryEvent.LOSE, result.retry_at if result.retry_at is not None else now
    elif result.retry_at is not None:
        event, due_at = DeliveryEvent.FAIL, result.retry_at
    else:
        event = DeliveryEvent.GIVE_UP
    spent = result.spend_attempt and outcome is not DeliveryOutcome.LOST
    return (
        result.delivery_id,
        _PUSHED.value,
        transition(_PUSHED, event).value,
        due_at,
        int(spent),
        outcome.value,
        result.started_at,
        result.finished_at,
        result.status,
        result.error,
        result.response,
    )


def _found(row: Row | None, name: str) -> Row:
    if row is None:
        raise SubscriptionNotFoundError(f"no subscription named {name!r}")
    return row


def _subscription(row: Row) -> Subscription:
    """A subscription row (its target, filter and policy arrive decoded from jsonb)."""
    return subscription_from_row(row, decoded)


_FINISH_COLUMNS = (
    "id",
    "source",
    "state",
    "due_at",
    "spent",
    "outcome",
    "started_at",
    "finished_at",
    "status",
    "error",
    "response",
)
