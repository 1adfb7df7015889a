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

from ..errors import InvalidArgumentError, SubscriptionNotFoundError
from ..serialization import encode_value
from ..store.events_base import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL, EventStore
from .event import Event, validate_topic
from .filters import Filter
from .records import (
    Delivery,
    DeliveryAttempt,
    DeliveryFilter,
    DeliveryPolicy,
    NewEvent,
    Origin,
    Subscription,
    SubscriptionSpec,
    TopicInfo,
)
from .states import DeliveryState
from .targets import check_target, to_event

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("cronbus.events")
REMOVED_FROM_CODE = "its handler is no longer in the code"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:")


def to_new_event(event: Event) -> NewEvent:
    """The store's form of a checked event: its data encoded once, here."""
    if event.extensions or event.dataschema is not None:
        raise InvalidArgumentError(
            "events with CloudEvents extension attributes or a dataschema cannot be stored yet"
        )
    return NewEvent(
        id=event.id,
        type=event.type,
        source=event.source,
        subject=event.subject,
        time=event.time,
        datacontenttype=event.datacontenttype,
        data_json=encode_value(event.data, f"the data of event type {event.type!r}"),
        key=event.key,
    )


def check_name(name: str) -> str:
    """A subscription name: 1-200 letters, digits, ``.``, ``_``, ``-`` or ``:``."""
    if not isinstance(name, str) or not 0 < len(name) <= 200 or not set(name) <= _NAME_CHARS:
        raise InvalidArgumentError(
            f"invalid subscription name {name!r}: use 1 to 200 letters, digits, '.', '_', '-' "
            "or ':'"
        )
    return name


def build_filter(
    types: Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    subject: str | Sequence[str] | None = None,
    data: Mapping[str, Any] | None = None,
    filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One filter spec from the keyword forms and a full spec; checked by compiling it."""
    spec: dict[str, Any] = dict(filter or {})
    for name, value in (("types", types), ("source", source), ("subject", subject)):
        if value is not None:
            spec[name] = [value] if isinstance(value, str) else list(value)
    if data is not None:
        spec["data"] = dict(data)
    return Filter.from_json(spec).to_json()


def build_policy(base: DeliveryPolicy | None = None, **options: Any) -> DeliveryPolicy:
    """A delivery policy with ``options`` changed; unknown or out-of-range ones are refused."""
    unknown = set(options) - set(DeliveryPolicy.__dataclass_fields__)
    if unknown:
        known = ", ".join(sorted(DeliveryPolicy.__dataclass_fields__))
        raise InvalidArgumentError(f"unknown delivery option(s) {sorted(unknown)} (known: {known})")
    policy = replace(base or DeliveryPolicy(), **options)
    _check_policy(policy)
    return policy


def _check_policy(policy: DeliveryPolicy) -> None:
    positive = {
        "max_in_flight": policy.max_in_flight,
        "timeout": policy.timeout,
        "max_attempts": policy.max_attempts,
        "circuit_failures": policy.circuit_failures,
    }
    for name, value in positive.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise InvalidArgumentError(f"{name} must be a positive number, not {value!r}")
    for name, value in (
        ("backoff", policy.backoff),
        ("max_backoff", policy.max_backoff),
        ("circuit_probe", policy.circuit_probe),
    ):
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise InvalidArgumentError(f"{name} must be a number of seconds >= 0, not {value!r}")
    if policy.rate_limit is not None and not (
        isinstance(policy.rate_limit, int | float) and policy.rate_limit > 0
    ):
        raise InvalidArgumentError(
            f"rate_limit must be deliveries per second > 0, not {policy.rate_limit!r}"
        )


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
        """Append events to ``topic`` in one transaction; returns once they are durable."""
        validate_topic(topic)
        checked = list(events)
        for event in checked:
            if not isinstance(event, Event):
                raise InvalidArgumentError(
                    f"publish_many takes events built with cronbus.events.make_event, not {event!r}"
                )
        if not checked:
            return []
        now = self.app.clock.now()
        appended = await self.store.append(topic, [to_new_event(e) for e in checked], now)
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
        if not isinstance(limit, int) or not 0 < limit <= 10_000:
            raise InvalidArgumentError(f"limit must be 1 to 10000, not {limit!r}")
        if not isinstance(after, int) or after < 0:
            raise InvalidArgumentError(f"after must be an offset >= 0, not {after!r}")
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
        """Every topic."""
        return await self.store.list_topics()

    async def set_retention(
        self, topic: str, *, max_age: float | None = None, max_events: int | None = None
    ) -> None:
        """Keep at most ``max_age`` seconds and ``max_events`` events of ``topic`` (None: all).

        Retention is applied in the background by dispatchers; events still needed by a
        pending delivery are kept.
        """
        if max_age is not None and not max_age > 0:
            raise InvalidArgumentError(f"max_age must be seconds > 0, not {max_age!r}")
        if max_events is not None and (not isinstance(max_events, int) or max_events <= 0):
            raise InvalidArgumentError(f"max_events must be a count > 0, not {max_events!r}")
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
            target = {"kind": "task", "task": task, "queue": queue}
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
        )
        if not replace_existing:
            try:
                await self.store.get_subscription(name)
            except SubscriptionNotFoundError:
                pass
            else:
                raise InvalidArgumentError(
                    f"a subscription named {name!r} exists; change it with update()"
                )
        return await self._changed(await self.store.put_subscription(spec, self.app.clock.now()))

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
        return await self.store.get_subscription(name)

    async def list(self, topic: str | None = None) -> builtins.list[Subscription]:
        """Every subscription (of ``topic``)."""
        return await self.store.list_subscriptions(topic)

    async def pause(self, name: str) -> Subscription:
        """Stop pushing; events keep arriving and are delivered after ``resume``."""
        now = self.app.clock.now()
        return await self._changed(await self.store.set_subscription_paused(name, True, None, now))

    async def resume(self, name: str) -> Subscription:
        """Push again (also after a 410 disabled it)."""
        now = self.app.clock.now()
        return await self._changed(await self.store.set_subscription_paused(name, False, None, now))

    async def remove(self, name: str) -> None:
        """Delete a subscription and its deliveries."""
        await self.store.delete_subscription(name)
        await self.app.store.notify([SUBSCRIPTIONS_CHANNEL])

    async def replay(
        self, name: str, *, offset: int | None = None, since: float | None = None
    ) -> Subscription:
        """Deliver again from ``offset`` (the first offset to re-deliver) or from the events
        published at or after ``since`` (epoch seconds)."""
        if (offset is None) == (since is None):
            raise InvalidArgumentError("give exactly one of offset= or since=")
        sub = await self.get(name)
        if offset is not None:
            if not isinstance(offset, int) or offset < 1:
                raise InvalidArgumentError(f"offset must be >= 1, not {offset!r}")
            after = offset - 1
        else:
            assert since is not None
            after = await self.store.offset_at(sub.topic, since)
        return await self._changed(await self.store.replay(name, after, self.app.clock.now()))

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
        return await self.store.list_deliveries(
            DeliveryFilter(subscription=name, states=chosen, limit=limit)
        )

    async def attempts(self, delivery_id: int) -> builtins.list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        return await self.store.list_delivery_attempts(delivery_id)

    async def counts(self, name: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``name`` are in each state."""
        return await self.store.count_deliveries(name)

    async def requeue(
        self, delivery_ids: Sequence[int] | None = None, *, subscription: str | None = None
    ) -> builtins.list[int]:
        """Push dead deliveries again (None: every dead one, of ``subscription`` if given)."""
        ids = await self.store.requeue_deliveries(delivery_ids, self.app.clock.now(), subscription)
        if ids:
            await self.app.store.notify([EVENTS_CHANNEL])
        return ids

    async def sync(self) -> builtins.list[str]:
        """Store the code's handler subscriptions (``@app.subscribe``), and pause (never
        delete) those no longer in the code, as jobs are; return the names paused."""
        now = self.app.clock.now()
        stored = {sub.name: sub for sub in await self.store.list_subscriptions()}
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


def handler_spec(
    name: str,
    topic: str,
    *,
    types: Sequence[str] | None,
    source: str | Sequence[str] | None,
    subject: str | Sequence[str] | None,
    data: Mapping[str, Any] | None,
    filter: Mapping[str, Any] | None,
    start: str,
    policy: Mapping[str, Any],
) -> SubscriptionSpec:
    """The stored form of an ``@app.subscribe`` handler."""
    if start not in ("latest", "earliest"):
        raise InvalidArgumentError(f"start must be 'latest' or 'earliest', not {start!r}")
    return SubscriptionSpec(
        name=check_name(name),
        topic=validate_topic(topic),
        target={"kind": "handler", "handler": name},
        filter=build_filter(types, source, subject, data, filter),
        policy=build_policy(**policy),
        origin=Origin.CODE,
        start=start,
    )
