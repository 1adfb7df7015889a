"""The event bus in the SQLite store: topics, subscriptions, leases, cursors and deliveries.

:class:`SqliteEvents` is the :class:`~cronbus.store.events_base.EventStore` half of
:class:`~cronbus.store.sqlite.SQLiteStore`, built on its connection calls and write transactions.
The work inside a transaction is done by the functions of :mod:`.sqlite_events_tx`, which take
the connection (as in :mod:`.sqlite_jobs`); the SQL is named in :mod:`.sqlite_events_sql`.

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
- ``max_events`` keeps the newest that many offsets; events that live deliveries need are kept
  on top of them. An id is deduplicated while its event is kept.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import DeliveryNotFoundError, InvalidArgumentError
from ..events.records import (
    Appended,
    Delivery,
    DeliveryAttempt,
    DeliveryFilter,
    DeliveryResult,
    EventRecord,
    NewDelivery,
    NewEvent,
    Subscription,
    SubscriptionLease,
    SubscriptionSpec,
    TopicInfo,
)
from ..events.states import DeliveryState
from . import sqlite_events_sql as q
from .event_rows import attempt_from_row, delivery_from_row, event_from_row, subscription_from_row
from .events_base import EVENTS_CHANNEL
from .sqlite_events_tx import (
    acquire_subscriptions,
    advance,
    append_events,
    finish_deliveries,
    get_subscription,
    no_subscription,
    offset_at,
    take_deliveries,
    topic_info,
    trim_batch,
    trim_cuts,
)

if TYPE_CHECKING:
    from .sqlite_db import Inline

T = TypeVar("T")
Row = tuple[Any, ...]
_INLINE_BATCH = 16
"""Appends of at most this many events may run on the event loop's thread."""
_TRIM_BATCH = 2000
"""Events examined per trim transaction, so a large trim never holds the write lock long."""
_STARTS = ("latest", "earliest")


class SqliteEvents:
    """The event bus methods of the SQLite store (a mixin of :class:`SQLiteStore`)."""

    if TYPE_CHECKING:
        # Provided by SQLiteStore.
        @property
        def _db(self) -> sqlite3.Connection: ...

        async def _call(self, fn: Callable[..., T], *args: Any, inline: Inline = "") -> T: ...

        def _write(
            self, *, durable: bool = True, wake: bool | set[str] = False
        ) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

        async def notify(self, channels: Sequence[str]) -> None: ...

    # -- topics and events ---------------------------------------------------------------------
    async def append(self, topic: str, events: Sequence[NewEvent], now: float) -> list[Appended]:
        """Append events durably in one transaction; a known id reports its stored offset."""
        if not events:
            return []

        def apply() -> list[Appended]:
            with self._write(wake=True) as conn:
                return append_events(conn, topic, events, now)

        quick: Inline = "write" if len(events) <= _INLINE_BATCH else ""
        appended = await self._call(apply, inline=quick)
        if any(a.created for a in appended):
            await self.notify([EVENTS_CHANNEL])
        return appended

    async def read_events(self, topic: str, after: int, limit: int) -> list[EventRecord]:
        """Events of ``topic`` above offset ``after``, in offset order."""
        rows = await self._call(
            lambda: self._db.execute(q.READ_EVENTS, (topic, after, limit)).fetchall(),
            inline="read" if limit <= _INLINE_BATCH else "",
        )
        return [event_from_row(row) for row in rows]

    async def get_topic(self, topic: str) -> TopicInfo:
        """A topic's offsets and retention (an unknown topic is empty, at offset 0)."""
        return await self._call(topic_info, self._db, topic)

    async def list_topics(self) -> list[TopicInfo]:
        """Every topic with events or settings, by name."""

        def read() -> list[TopicInfo]:
            names = [row[0] for row in self._db.execute(q.TOPIC_NAMES)]
            return [topic_info(self._db, name) for name in names]

        return await self._call(read)

    async def set_retention(
        self, topic: str, max_age: float | None, max_events: int | None
    ) -> None:
        """Keep events of ``topic`` at most ``max_age`` seconds and ``max_events`` (None: any)."""

        def put() -> None:
            with self._write() as conn:
                conn.execute(q.SET_RETENTION, (topic, max_age, max_events, time.time()))

        await self._call(put)

    async def trim(self, now: float) -> int:
        """Apply every topic's retention, in bounded batches (each its own transaction, so
        publishers interleave); events of live deliveries stay. Returns how many were removed."""
        cuts = await self._call(trim_cuts, self._db, now)
        removed = 0
        for topic, cut in cuts:
            after: int | None = 0
            while after is not None:
                deleted, after = await self._call(self._trim_batch, topic, after, cut)
                removed += deleted
        return removed

    def _trim_batch(self, topic: str, after: int, cut: int) -> tuple[int, int | None]:
        with self._write(durable=False) as conn:
            return trim_batch(conn, topic, after, cut)

    async def offset_at(self, topic: str, when: float) -> int:
        """The offset of the last event of ``topic`` published before ``when`` (0: none)."""
        return await self._call(offset_at, self._db, topic, when, inline="read")

    # -- subscriptions -------------------------------------------------------------------------
    async def put_subscription(self, spec: SubscriptionSpec, now: float) -> Subscription:
        """Create or replace a subscription's definition; cursor, lease and state are kept."""
        if spec.start not in _STARTS:
            raise InvalidArgumentError(
                f"a subscription starts at 'latest' or 'earliest', not {spec.start!r}"
            )

        def put() -> Subscription:
            with self._write() as conn:
                row = conn.execute(q.TOPIC_LAST_OFFSET, (spec.topic,)).fetchone()
                cursor = row[0] if row is not None and spec.start == "latest" else 0
                conn.execute(q.UPSERT_SUBSCRIPTION, q.subscription_params(spec, cursor, now))
                return get_subscription(conn, spec.name)

        # Dispatchers are told of changed subscriptions by the bus (SUBSCRIPTIONS_CHANNEL).
        return await self._call(put)

    async def get_subscription(self, name: str) -> Subscription:
        """One subscription, or :class:`~cronbus.errors.SubscriptionNotFoundError`."""
        return await self._call(get_subscription, self._db, name, inline="read")

    async def list_subscriptions(self, topic: str | None = None) -> list[Subscription]:
        """Every subscription (of ``topic``), by name."""

        def read() -> list[Row]:
            if topic is None:
                return self._db.execute(q.LIST_SUBSCRIPTIONS).fetchall()
            return self._db.execute(q.LIST_TOPIC_SUBSCRIPTIONS, (topic,)).fetchall()

        return [subscription_from_row(row) for row in await self._call(read)]

    async def set_subscription_paused(
        self, name: str, paused: bool, reason: str | None, now: float
    ) -> Subscription:
        """Pause (dropping the lease, which fences its holder) or resume a subscription."""
        params = {"name": name, "paused": int(paused), "reason": reason, "now": now}

        def update() -> Subscription:
            with self._write() as conn:
                if conn.execute(q.SET_PAUSED, params).rowcount == 0:
                    raise no_subscription(name)
                return get_subscription(conn, name)

        return await self._call(update, inline="write")

    async def delete_subscription(self, name: str) -> None:
        """Delete a subscription with its deliveries and their attempts."""

        def delete() -> None:
            with self._write() as conn:
                row = conn.execute(q.DELETE_SUBSCRIPTION, (name,)).fetchone()
                if row is None:
                    raise no_subscription(name)
                conn.execute(q.DELETE_SUBSCRIPTION_ATTEMPTS, (row[0],))
                conn.execute(q.DELETE_SUBSCRIPTION_DELIVERIES, (row[0],))

        await self._call(delete)

    async def replay(self, name: str, after: int, now: float) -> Subscription:
        """Move the cursor to ``after``; its holder matches the events above it again."""

        def update() -> Subscription:
            with self._write(wake=True) as conn:
                if conn.execute(q.REPLAY, (after, now, name)).rowcount == 0:
                    raise no_subscription(name)
                return get_subscription(conn, name)

        subscription = await self._call(update, inline="write")
        await self.notify([EVENTS_CHANNEL])
        return subscription

    # -- pushers: leases -----------------------------------------------------------------------
    async def acquire_subscriptions(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[SubscriptionLease]:
        """Renew ``holder``'s leases, take free or expired ones up to ``limit`` in all."""

        def acquire() -> list[SubscriptionLease]:
            with self._write(durable=False) as conn:
                return acquire_subscriptions(conn, holder, now, now + lease_seconds, limit)

        return await self._call(acquire, inline="write")

    async def release_subscriptions(self, holder: str, names: Sequence[str]) -> None:
        """Give up leases, so other dispatchers take them at once (bumping the epoch)."""
        if not names:
            return

        def release() -> None:
            with self._write(durable=False) as conn:
                conn.execute(q.RELEASE_SUBSCRIPTIONS, (holder, json.dumps(list(names))))

        await self._call(release, inline="write")

    # -- cursors and deliveries (fenced by the lease) ------------------------------------------
    async def advance(
        self,
        lease: SubscriptionLease,
        cursor: int,
        deliveries: Sequence[NewDelivery],
        now: float,
    ) -> bool:
        """Record ``deliveries`` (pending, due now) and move the cursor, in one transaction;
        False (nothing done) when the lease is no longer held."""

        def apply() -> bool:
            with self._write(durable=False) as conn:
                return advance(conn, lease, cursor, deliveries, now)

        quick: Inline = "write" if len(deliveries) <= _INLINE_BATCH else ""
        return await self._call(apply, inline=quick)

    async def take_deliveries(
        self, lease: SubscriptionLease, now: float, fresh: int, retry: int
    ) -> list[Delivery]:
        """Move due deliveries of both lanes in flight and return them with their events."""
        if fresh <= 0 and retry <= 0:
            return []

        def take() -> list[Delivery]:
            with self._write(durable=False) as conn:
                return take_deliveries(conn, lease, now, fresh, retry)

        return await self._call(take, inline="write")

    async def finish_deliveries(
        self, lease: SubscriptionLease, results: Sequence[DeliveryResult], now: float
    ) -> list[bool]:
        """Record ended pushes; each False if the lease is lost or the delivery not in flight."""
        if not results:
            return []

        def finish() -> list[bool]:
            with self._write(durable=False) as conn:
                return finish_deliveries(conn, lease, results, now)

        return await self._call(finish, inline="write")

    async def next_delivery_due(self, subscription: str) -> float | None:
        """When the earliest pending or retry delivery of ``subscription`` is due."""

        def read() -> float | None:
            row = self._db.execute(q.SUBSCRIPTION_ID, (subscription,)).fetchone()
            if row is None:
                return None
            (due,) = self._db.execute(q.NEXT_DUE, {"sub": row[0]}).fetchone()
            return None if due is None else float(due)

        return await self._call(read, inline="read")

    async def get_delivery(self, delivery_id: int) -> Delivery:
        """One delivery with its event, or :class:`~cronbus.errors.DeliveryNotFoundError`."""
        row = await self._call(
            lambda: self._db.execute(q.GET_DELIVERY, (delivery_id,)).fetchone(), inline="read"
        )
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
        rows = await self._call(lambda: self._db.execute(sql, params).fetchall())
        return [delivery_from_row(row) for row in rows]

    async def list_delivery_attempts(self, delivery_id: int) -> list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        rows = await self._call(
            lambda: self._db.execute(q.LIST_ATTEMPTS, (delivery_id,)).fetchall()
        )
        return [attempt_from_row(row) for row in rows]

    async def count_deliveries(self, subscription: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``subscription`` are in each state."""
        rows = await self._call(
            lambda: self._db.execute(q.COUNT_DELIVERIES, (subscription,)).fetchall()
        )
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

        def requeue() -> list[int]:
            with self._write(wake=True) as conn:
                return sorted(row[0] for row in conn.execute(sql, params))

        ids = await self._call(requeue)
        if ids:
            await self.notify([EVENTS_CHANNEL])
        return ids
