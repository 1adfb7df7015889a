"""The event bus as the app shows it: publishing, pulling, and subscriptions in the store.

``app.publish(...)`` appends one event and returns once it is durable; ``app.events`` reads
topics (pull by cursor, with long polling) and sets retention; ``app.subscriptions`` adds,
changes and inspects subscriptions. Handler subscriptions defined in code with
``@app.subscribe`` are synced to the store when a dispatcher starts.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..serialization import check_json
from ..store.ports import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL, EventStore
from ..validation import (
    check_int,
    check_label,
    check_queue,
    check_seconds,
    check_time,
    check_topic,
    invalid,
    shorten,
)
from .event import Event, validate_topic
from .records import (
    Delivery,
    DeliveryAttempt,
    DeliveryFilter,
    Origin,
    Subscription,
    SubscriptionSpec,
    TopicInfo,
)
from .specs import (
    build_filter,
    build_policy,
    check_name,
    handler_spec,
    to_new_event,
)
from .states import DeliveryState
from .targets import check_target, to_event

__all__ = [
    "REMOVED_FROM_CODE",
    "Events",
    "Published",
    "Subscriptions",
    "build_filter",
    "build_policy",
    "check_name",
    "handler_spec",
    "to_new_event",
]

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("cronbus.events")
REMOVED_FROM_CODE = "its handler is no longer in the code"
ID_LIMIT = 2**63 - 1
"""Ids are signed 64-bit integers in both stores."""
OFFSET_LIMIT = 2**62
"""Offsets and event counts fit a signed 64-bit column, with room to add."""


@dataclass(frozen=True, slots=True)
class Published:
    """Where a published event landed; ``created`` is False for a repeated id."""

    event: Event
    created: bool


class Events:
    """Topics of the app's store: publish, read by cursor (pull), retention."""

    def __init__(self, app: App) -> None:
        self.app = app

    @property
    def store(self) -> EventStore:
        """The app's store, as an event store."""
        return self.app.store

    async def publish_many(self, topic: str, events: Iterable[Event]) -> list[Published]:
        """Append events to ``topic`` in one transaction; returns once they are durable.

        Topics under ``cronbus.`` are refused: cronbus publishes them itself (run outcomes go
        to ``cronbus.runs`` from the worker, straight to the store), so a user cannot forge one.
        """
        check_topic(topic, publish=True)
        if isinstance(events, Event | str | bytes | Mapping) or not isinstance(events, Iterable):
            raise InvalidArgumentError(
                f"publish_many takes a list of events, got {type(events).__name__}"
            )
        checked = list(events)
        for event in checked:
            if not isinstance(event, Event):
                raise InvalidArgumentError(
                    "publish_many takes events built with cronbus.events.make_event, not "
                    f"{shorten(event)}"
                )
        if not checked:
            return []
        now = self.app.clock.now()
        limit = self.app.settings.max_payload_bytes
        news = [to_new_event(e, limit) for e in checked]
        # A new topic is created in the app's namespace; a topic of another namespace refuses.
        appended = await self.store.append(topic, news, now, namespace=self.app.namespace)
        return [
            Published(e.appended(topic=topic, offset=a.offset, published_at=now), a.created)
            for e, a in zip(checked, appended, strict=True)
        ]

    async def read(
        self, topic: str, *, after: int = 0, limit: int = 100, wait: float = 0.0
    ) -> list[Event]:
        """Events of ``topic`` past offset ``after``, oldest first (pull by cursor).

        With ``wait``, an empty read waits up to that many seconds for new events (long
        polling); keep the offset of the last event you handled and pass it as ``after``.
        """
        validate_topic(topic)
        check_int(limit, "limit", 1, 10_000)
        check_int(after, "after", 0, OFFSET_LIMIT)
        if wait:
            check_seconds(wait, "wait")
        records = await self.store.read_events(topic, after, limit)
        if records or wait <= 0:
            return [to_event(r) for r in records]
        listener = await self.app.store.listen([EVENTS_CHANNEL])
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            while not records and loop.time() < deadline:
                await listener.wait(min(1.0, deadline - loop.time()))
                records = await self.store.read_events(topic, after, limit)
        finally:
            await listener.close()
        return [to_event(r) for r in records]

    async def topic(self, topic: str) -> TopicInfo:
        """A topic's offsets, size and retention."""
        return await self.store.get_topic(validate_topic(topic))

    async def topics(self) -> list[TopicInfo]:
        """Every topic of the app's namespace."""
        return await self.store.list_topics(namespace=self.app.namespace)

    async def set_retention(
        self, topic: str, *, max_age: float | None = None, max_events: int | None = None
    ) -> None:
        """Keep at most ``max_age`` seconds and ``max_events`` events of ``topic`` (None: all).

        Retention is applied in the background by dispatchers; events still needed by a
        pending delivery are kept.
        """
        if max_age is not None:
            max_age = check_seconds(max_age, "max_age", positive=True)
        if max_events is not None:
            check_int(max_events, "max_events", 1, OFFSET_LIMIT)
        await self.store.set_retention(validate_topic(topic), max_age, max_events)


class Subscriptions:
    """Subscriptions in the app's store: ``await app.subscriptions.add(...)`` and the rest."""

    def __init__(self, app: App) -> None:
        self.app = app

    @property
    def store(self) -> EventStore:
        """The app's store, as an event store."""
        return self.app.store

    async def add(
        self,
        name: str,
        *,
        topic: str,
        webhook: str | None = None,
        secrets: str | Sequence[str] | None = None,
        headers: Mapping[str, str] | None = None,
        task: str | None = None,
        queue: str | None = None,
        types: Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        subject: str | Sequence[str] | None = None,
        data: Mapping[str, Any] | None = None,
        filter: Mapping[str, Any] | None = None,
        start: str = "latest",
        replace_existing: bool = False,
        **policy: Any,
    ) -> Subscription:
        """Subscribe a webhook (``webhook=url``) or a task (``task=name``) to ``topic``.

        Filters: ``types`` patterns (``order.*``), ``source``, ``subject``, ``data``
        conditions, or a full ``filter`` spec (docs/events.md). Delivery options (``timeout``,
        ``max_in_flight``, ``max_attempts``, ``backoff``, ``rate_limit``, ``ordered`` ...) go
        to :class:`~cronbus.events.records.DeliveryPolicy`. ``start`` is ``latest`` (events
        from now on) or ``earliest`` (the whole topic).

        Adding a name that exists is a no-op if the definition is the same, and raises
        :class:`~cronbus.errors.SubscriptionExistsError` otherwise (``replace_existing=True``
        redefines it, keeping its cursor); the store decides it, so of two concurrent adds
        exactly one wins.
        """
        check_name(name)
        if (webhook is None) == (task is None):
            raise InvalidArgumentError("give exactly one target: webhook=URL or task=NAME")
        if webhook is not None:
            chosen = [secrets] if isinstance(secrets, str) else list(secrets or [])
            target: dict[str, Any] = {
                "kind": "webhook",
                "url": webhook,
                "headers": dict(headers or {}),
                "secrets": chosen,
            }
        else:
            queue = None if queue is None else check_queue(queue, "subscription queue")
            target = {
                "kind": "task",
                "task": check_label(task, "subscription task"),
                "queue": queue,
            }
        # Targets are stored as JSON (jsonb on PostgreSQL, which refuses NUL): one pass first.
        check_json(target, "the subscription's target")
        if start not in ("latest", "earliest"):
            raise InvalidArgumentError(f"start must be 'latest' or 'earliest', not {start!r}")
        spec = SubscriptionSpec(
            name=name,
            topic=validate_topic(topic),
            target=check_target(target),
            filter=build_filter(types, source, subject, data, filter),
            policy=build_policy(**policy),
            origin=Origin.API,
            start=start,
            namespace=self.app.namespace,
        )
        # The store's insert decides between concurrent adds of one name: the same definition
        # again is a no-op, another one raises SubscriptionExistsError.
        now = self.app.clock.now()
        return await self._changed(
            await self.store.put_subscription(spec, now, create=not replace_existing)
        )

    async def _changed(self, sub: Subscription) -> Subscription:
        """Tell dispatchers at once (they also look every few seconds)."""
        await self.app.store.notify([SUBSCRIPTIONS_CHANNEL])
        return sub

    async def update(self, name: str, **changes: Any) -> Subscription:
        """Change a subscription's filter (``types``, ``filter`` ...) or delivery options."""
        current = (await self.get(name)).spec
        filter_keys = {"types", "source", "subject", "data", "filter"}
        spec = current
        if filter_keys & set(changes):
            parts = {k: changes.pop(k) for k in list(changes) if k in filter_keys}
            base = {} if "filter" in parts else dict(current.filter)
            spec = replace(
                spec,
                filter=build_filter(filter={**base, **(parts.pop("filter", None) or {})}, **parts),
            )
        if changes:
            spec = replace(spec, policy=build_policy(current.policy, **changes))
        return await self._changed(await self.store.put_subscription(spec, self.app.clock.now()))

    async def get(self, name: str) -> Subscription:
        """One subscription."""
        return await self.store.get_subscription(check_name(name))

    async def list(self, topic: str | None = None) -> builtins.list[Subscription]:
        """Every subscription of the app's namespace (to ``topic``)."""
        return await self.store.list_subscriptions(topic, namespace=self.app.namespace)

    async def pause(self, name: str) -> Subscription:
        """Stop pushing; events keep arriving and are delivered after ``resume``."""
        now = self.app.clock.now()
        return await self._changed(
            await self.store.set_subscription_paused(check_name(name), True, None, now)
        )

    async def resume(self, name: str) -> Subscription:
        """Push again (also after a 410 disabled it)."""
        now = self.app.clock.now()
        return await self._changed(
            await self.store.set_subscription_paused(check_name(name), False, None, now)
        )

    async def remove(self, name: str) -> None:
        """Delete a subscription and its deliveries."""
        await self.store.delete_subscription(check_name(name))
        await self.app.store.notify([SUBSCRIPTIONS_CHANNEL])

    async def replay(
        self, name: str, *, offset: int | None = None, since: float | None = None
    ) -> Subscription:
        """Deliver again from ``offset`` (the first offset to re-deliver) or from the events
        published at or after ``since`` (epoch seconds).

        The cursor never passes the topic's end: an ``offset`` beyond the topic's last offset
        (or a ``since`` after its last event, or in the future) moves it to the last offset,
        so every event published from now on is delivered (logged at INFO). The returned
        subscription's ``cursor`` says where it went. Events that retention removed are not
        delivered again.
        """
        if (offset is None) == (since is None):
            raise InvalidArgumentError("give exactly one of offset= or since=")
        sub = await self.get(name)
        if offset is not None:
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
                raise invalid("offset", "must be >= 1", offset)
            after = check_int(offset, "offset", 1, OFFSET_LIMIT) - 1
        else:
            after = await self.store.offset_at(sub.topic, check_time(since, "since"))
        moved = await self.store.replay(name, after, self.app.clock.now())
        if moved.cursor < after:
            log.info(
                "replay of %s: the topic ends at offset %d; cursor moved to %d",
                name,
                moved.cursor,
                moved.cursor,
                extra={"action": "subscription.replay_clamped"},
            )
        return await self._changed(moved)

    async def deliveries(
        self, name: str | None = None, *, states: Sequence[str] = (), limit: int = 100
    ) -> builtins.list[Delivery]:
        """Deliveries (of subscription ``name``), newest first."""
        try:
            chosen = [DeliveryState(s) for s in states]
        except ValueError:
            known = ", ".join(s.value for s in DeliveryState)
            raise InvalidArgumentError(
                f"unknown delivery state in {states!r} (known: {known})"
            ) from None
        check_int(limit, "limit", 1, OFFSET_LIMIT)
        chosen_name = None if name is None else check_name(name)
        return await self.store.list_deliveries(
            DeliveryFilter(subscription=chosen_name, states=chosen, limit=limit)
        )

    async def attempts(self, delivery_id: int) -> builtins.list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        return await self.store.list_delivery_attempts(
            check_int(delivery_id, "delivery id", 1, ID_LIMIT)
        )

    async def counts(self, name: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``name`` are in each state."""
        return await self.store.count_deliveries(check_name(name))

    async def requeue(
        self, delivery_ids: Sequence[int] | None = None, *, subscription: str | None = None
    ) -> builtins.list[int]:
        """Push dead deliveries again (None: every dead one, of ``subscription`` if given)."""
        if delivery_ids is not None:
            delivery_ids = [check_int(i, "delivery id", 1, ID_LIMIT) for i in delivery_ids]
        if subscription is not None:
            check_name(subscription)
        ids = await self.store.requeue_deliveries(delivery_ids, self.app.clock.now(), subscription)
        if ids:
            await self.app.store.notify([EVENTS_CHANNEL])
        return ids

    async def sync(self) -> builtins.list[str]:
        """Store the code's handler subscriptions (``@app.subscribe``), and pause (never
        delete) those no longer in the code, as jobs are; return the names paused.

        Only the app's namespace is synced, as for jobs."""
        now = self.app.clock.now()
        stored = {
            sub.name: sub
            for sub in await self.store.list_subscriptions(namespace=self.app.namespace)
        }
        for spec in self.app.code_subscriptions.values():
            current = stored.get(spec.name)
            if current is None or current.spec != spec:
                await self.store.put_subscription(spec, now)
        gone = [
            sub.name
            for sub in stored.values()
            if sub.spec.origin is Origin.CODE
            and sub.name not in self.app.code_subscriptions
            and not sub.paused
        ]
        for name in gone:
            await self.store.set_subscription_paused(name, True, REMOVED_FROM_CODE, now)
            log.warning(
                "subscription %s is no longer in the code: paused, not deleted "
                "(`cronbus subs delete %s` deletes it)",
                name,
                name,
                extra={"action": "subscription.paused"},
            )
        return gone
