"""Subscriptions in the SQLite store: their definitions, leases, cursors and deliveries.

Durability: what users are told has happened (a publish, a subscription's definition, a replay,
a requeue) commits at the store's ``synchronous`` level, like a defer. A dispatcher's bookkeeping
(leases, ``advance``, take, finish, trim) commits relaxed, like a worker's claims: ``advance``
records the deliveries and moves the cursor in one transaction, so a power cut can lose both
together, never the deliveries alone; the events are then matched again and pushed again, which
at-least-once delivery allows (every push carries the event id). The cursor never passes an event
whose delivery is not recorded (invariant 4).

Choices the contract leaves open:

- The fence is the lease's holder and epoch. A holder whose lease expired but was not taken over
  still passes (and renews it, epoch unchanged): its in-flight deliveries are still its own.
  Pausing or releasing drops the holder; whoever takes the subscription next bumps the epoch and
  puts the in-flight deliveries back to pending.
- In an ordered subscription a delivery without a key is held back by nothing and holds back
  nothing (the dispatcher records the event's ``order_key``: the key, else the subject).
- A push that spends no attempt (rate limited, circuit open) leaves no attempt row: it updates
  the delivery's last status, error and response only. Attempt rows are numbered over the
  delivery's whole life, so a requeue (which resets the attempt budget) keeps its history.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

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
    DeliveryResult,
    NewDelivery,
    Subscription,
    SubscriptionLease,
    SubscriptionSpec,
)
from ...events.states import DeliveryState
from ..event_rows import (
    attempt_from_row,
    created_or_same,
    delivery_from_row,
    subscription_from_row,
)
from ..ports import EVENTS_CHANNEL
from . import events_sql as q
from .connection import Connected, Inline
from .rows import Row, delivery_attempt_params, delivery_finish_params, execute, fetch_all

_STARTS = ("latest", "earliest")
_INLINE_BATCH = 16
"""Advances of at most this many deliveries may run on the event loop's thread."""


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
        changes.append(delivery_finish_params(result, now))
        if result.spend_attempt:
            attempts.append(delivery_attempt_params(result))
        done.append(True)
    conn.executemany(q.FINISH, changes)
    conn.executemany(q.INSERT_ATTEMPT, attempts)
    return done


def _fence(conn: sqlite3.Connection, lease: SubscriptionLease) -> Row | None:
    """The subscription's id, topic and ``ordered`` flag, if ``lease`` still holds it."""
    params = (lease.subscription, lease.holder, lease.epoch)
    row: Row | None = conn.execute(q.FENCE, params).fetchone()
    return row


def no_subscription(name: str) -> SubscriptionNotFoundError:
    """The error for an unknown subscription name."""
    return SubscriptionNotFoundError(f"no subscription named {name!r}")


def _put_subscription(
    conn: sqlite3.Connection, spec: SubscriptionSpec, now: float, create: bool
) -> Subscription:
    """Upsert, or with ``create`` insert only: the insert decides between concurrent adds (the
    write lock is held from the insert to the read that follows)."""
    row = conn.execute(q.TOPIC_LAST_OFFSET, (spec.topic,)).fetchone()
    if row is not None and row[1] != spec.namespace:
        raise ConflictError(f"topic {spec.topic!r} belongs to namespace {row[1]!r}")
    cursor = row[0] if row is not None and spec.start == "latest" else 0
    params = q.subscription_params(spec, cursor, now)
    if create:
        inserted = conn.execute(q.CREATE_SUBSCRIPTION, params).rowcount
        if not inserted:
            return created_or_same(get_subscription(conn, spec.name), spec)
    elif conn.execute(q.UPSERT_SUBSCRIPTION, params).rowcount == 0:
        (owner,) = conn.execute(q.SUBSCRIPTION_NAMESPACE, (spec.name,)).fetchone()
        raise ConflictError(f"subscription {spec.name!r} belongs to namespace {owner!r}")
    return get_subscription(conn, spec.name)


def _delete_deliveries(conn: sqlite3.Connection, delivery_ids: Sequence[int]) -> list[int]:
    ids = sorted(r[0] for r in conn.execute(q.DEAD_DELIVERIES, (json.dumps(list(delivery_ids)),)))
    if ids:
        doomed = json.dumps(ids)
        conn.execute(q.DELETE_DELIVERY_ATTEMPTS, (doomed,))
        conn.execute(q.DELETE_DELIVERIES, (doomed,))
    return ids


def _updated(conn: sqlite3.Connection, sql: str, params: Any, name: str) -> Subscription:
    """Change the subscription ``name`` by ``sql`` and read it back."""
    if conn.execute(sql, params).rowcount == 0:
        raise no_subscription(name)
    return get_subscription(conn, name)


def _delete_subscription(conn: sqlite3.Connection, name: str) -> None:
    row = conn.execute(q.DELETE_SUBSCRIPTION, (name,)).fetchone()
    if row is None:
        raise no_subscription(name)
    conn.execute(q.DELETE_SUBSCRIPTION_ATTEMPTS, (row[0],))
    conn.execute(q.DELETE_SUBSCRIPTION_DELIVERIES, (row[0],))


def _next_due(conn: sqlite3.Connection, subscription: str) -> float | None:
    row = conn.execute(q.SUBSCRIPTION_ID, (subscription,)).fetchone()
    if row is None:
        return None
    (due,) = conn.execute(q.NEXT_DUE, {"sub": row[0]}).fetchone()
    return None if due is None else float(due)


class SqliteSubscriptions(Connected):
    """The subscriptions and subscription leases roles (:class:`~cronbus.store.ports.Subscriptions`,
    :class:`~cronbus.store.ports.SubscriptionLeases`) of the SQLite store."""

    async def put_subscription(
        self, spec: SubscriptionSpec, now: float, *, create: bool = False
    ) -> Subscription:
        """Create or replace a subscription's definition; cursor, lease and state are kept.

        With ``create``, only create it: an existing one with the same definition is returned
        unchanged, one with another definition raises ``SubscriptionExistsError``.
        """
        if spec.start not in _STARTS:
            raise InvalidArgumentError(
                f"a subscription starts at 'latest' or 'earliest', not {spec.start!r}"
            )
        # Dispatchers are told of changed subscriptions by the bus (SUBSCRIPTIONS_CHANNEL).
        return await self._transact(_put_subscription, spec, now, create)

    async def get_subscription(self, name: str) -> Subscription:
        """One subscription, or :class:`~cronbus.errors.SubscriptionNotFoundError`."""
        return await self._call(get_subscription, self._db, name, inline="read")

    async def list_subscriptions(
        self, topic: str | None = None, namespace: str | None = None
    ) -> list[Subscription]:
        """Every subscription (of ``topic``, of ``namespace``), by name."""
        rows = await self._rows(q.LIST_SUBSCRIPTIONS, {"topic": topic, "namespace": namespace})
        return [subscription_from_row(row) for row in rows]

    async def set_subscription_paused(
        self, name: str, paused: bool, reason: str | None, now: float
    ) -> Subscription:
        """Pause (dropping the lease, which fences its holder) or resume a subscription."""
        params = {"name": name, "paused": int(paused), "reason": reason, "now": now}
        return await self._transact(_updated, q.SET_PAUSED, params, name, inline="write")

    async def delete_subscription(self, name: str) -> None:
        """Delete a subscription with its deliveries and their attempts."""
        await self._transact(_delete_subscription, name)

    async def replay(self, name: str, after: int, now: float) -> Subscription:
        """Move the cursor to ``after``, or to the topic's last offset if ``after`` is beyond
        it; its holder matches the events above it again."""
        if after < 0:
            raise InvalidArgumentError(f"replay of {name!r}: the offset must be 0 or more")
        params = {"after": after, "now": now, "name": name}
        subscription = await self._transact(
            _updated, q.REPLAY, params, name, wake=True, inline="write"
        )
        await self.notify([EVENTS_CHANNEL])
        return subscription

    async def acquire_subscriptions(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[SubscriptionLease]:
        """Renew ``holder``'s leases, take free or expired ones up to ``limit`` in all."""
        expires = now + lease_seconds
        return await self._transact(
            acquire_subscriptions, holder, now, expires, limit, durable=False, inline="write"
        )

    async def release_subscriptions(self, holder: str, names: Sequence[str]) -> None:
        """Give up leases, so other dispatchers take them at once (bumping the epoch)."""
        if not names:
            return
        params = (holder, json.dumps(list(names)))
        await self._transact(
            execute, q.RELEASE_SUBSCRIPTIONS, params, durable=False, inline="write"
        )

    async def advance(
        self,
        lease: SubscriptionLease,
        cursor: int,
        deliveries: Sequence[NewDelivery],
        now: float,
    ) -> bool:
        """Record ``deliveries`` (pending, due now) and move the cursor, in one transaction;
        False (nothing done) when the lease is no longer held."""
        quick: Inline = "write" if len(deliveries) <= _INLINE_BATCH else ""
        return await self._transact(
            advance, lease, cursor, deliveries, now, durable=False, inline=quick
        )

    async def take_deliveries(
        self, lease: SubscriptionLease, now: float, fresh: int, retry: int
    ) -> list[Delivery]:
        """Move due deliveries of both lanes in flight and return them with their events."""
        if fresh <= 0 and retry <= 0:
            return []
        return await self._transact(
            take_deliveries, lease, now, fresh, retry, durable=False, inline="write"
        )

    async def finish_deliveries(
        self, lease: SubscriptionLease, results: Sequence[DeliveryResult], now: float
    ) -> list[bool]:
        """Record ended pushes; each False if the lease is lost or the delivery not in flight."""
        if not results:
            return []
        return await self._transact(
            finish_deliveries, lease, results, now, durable=False, inline="write"
        )

    async def next_delivery_due(self, subscription: str) -> float | None:
        """When the earliest pending or retry delivery of ``subscription`` is due."""
        return await self._call(_next_due, self._db, subscription, inline="read")

    async def get_delivery(self, delivery_id: int) -> Delivery:
        """One delivery with its event, or :class:`~cronbus.errors.DeliveryNotFoundError`."""
        row = await self._one(q.GET_DELIVERY, (delivery_id,), inline="read")
        if row is None:
            raise DeliveryNotFoundError(f"no delivery has id {delivery_id}")
        return delivery_from_row(row, with_event=True)

    async def list_deliveries(self, filter: DeliveryFilter) -> list[Delivery]:
        """Deliveries matching ``filter``, newest first (without their events)."""
        where: list[str] = []
        params: list[Any] = []
        if filter.subscription is not None:
            where.append("s.name = ?")
            params.append(filter.subscription)
        if filter.states:
            where.append("d.state IN (SELECT value FROM json_each(?))")
            params.append(json.dumps([DeliveryState(s).value for s in filter.states]))
        sql = q.LIST_DELIVERIES + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY d.id DESC LIMIT ?"
        params.append(filter.limit)
        rows = await self._rows(sql, params)
        return [delivery_from_row(row) for row in rows]

    async def list_delivery_attempts(self, delivery_id: int) -> list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        rows = await self._rows(q.LIST_ATTEMPTS, (delivery_id,))
        return [attempt_from_row(row) for row in rows]

    async def count_deliveries(self, subscription: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``subscription`` are in each state."""
        rows = await self._rows(q.COUNT_DELIVERIES, (subscription,))
        return {DeliveryState(state): count for state, count in rows}

    async def requeue_deliveries(
        self, delivery_ids: Sequence[int] | None, now: float, subscription: str | None = None
    ) -> list[int]:
        """Push dead deliveries again with a fresh attempt budget; return their ids."""
        params: dict[str, Any] = {"now": now, "name": subscription}
        if delivery_ids is not None:
            sql, params["ids"] = q.REQUEUE_IDS, json.dumps(list(delivery_ids))
        elif subscription is not None:
            sql = q.REQUEUE_SUBSCRIPTION
        else:
            sql = q.REQUEUE_ALL
        ids = sorted(row[0] for row in await self._transact(fetch_all, sql, params, wake=True))
        if ids:
            await self.notify([EVENTS_CHANNEL])
        return ids

    async def delete_deliveries(self, delivery_ids: Sequence[int]) -> list[int]:
        """Delete the dead deliveries among ``delivery_ids`` with their attempts (a purge)."""
        if not delivery_ids:
            return []
        return await self._transact(_delete_deliveries, delivery_ids)
