"""The event bus as the app shows it: publishing, pulling, and subscriptions in the store.

``app.publish(...)`` appends one event and returns once it is durable; ``app.events`` reads
topics (pull by cursor, with long polling) and sets retention; ``app.subscriptions`` adds,
changes and inspects subscriptions. Handler subscriptions defined in code with
``@app.subscribe`` are synced to the store when a dispatcher starts.

Managing topics and subscriptions goes through the service layer (:mod:`cronbus.services`),
as the CLI and the HTTP API do, so each rule is written once; publishing and pulling, the hot
paths, go to the store directly with the same checks.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DeliveryNotFoundError, InvalidArgumentError
from ..store.ports import EVENTS_CHANNEL, EventStore
from ..validation import check_int, check_seconds, check_topic, shorten
from .event import Event, validate_topic
from .records import (
    Delivery,
    DeliveryAttempt,
    DeliveryFilter,
    DeliveryPolicy,
    Origin,
    Subscription,
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
from .targets import to_event

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
    from ..services.dead_letters import DeadLettersService
    from ..services.subscriptions import SubscriptionsService
    from ..services.topics import TopicsService

log = logging.getLogger("cronbus.events")
REMOVED_FROM_CODE = "its handler is no longer in the code"
OFFSET_LIMIT = 2**62
"""Offsets and event counts fit a signed 64-bit column, with room to add."""


@dataclass(frozen=True, slots=True)
class Published:
    """Where a published event landed; ``created`` is False for a repeated id."""

    event: Event
    created: bool


class Events:
    """Topics of the app's store: publish, read by cursor (pull), retention.

    Topics are managed through the topics service (:mod:`cronbus.services.topics`), where
    their rules are written once for the Python API, the CLI and the HTTP API; publishing and
    pulling are the hot paths and go to the store directly, checked by the very functions
    the service checks with.
    """

    def __init__(self, app: App) -> None:
        self.app = app

    @property
    def store(self) -> EventStore:
        """The app's store, as an event store."""
        return self.app.store

    async def _service(self, topic: str) -> TopicsService:
        """The topics service of the topic's namespace: names are unique per store, and a
        local caller may reach a topic of any namespace by its name; a topic not written yet
        is the app's namespace's to create."""
        from ..services.subscription_rules import has_row  # the services import this module

        info = await self.store.get_topic(validate_topic(topic))
        namespace = info.namespace if has_row(info) else self.app.namespace
        return self.app.services(namespace=namespace).topics

    async def publish_many(self, topic: str, events: Iterable[Event]) -> list[Published]:
        """Append events to ``topic`` in one transaction; returns once they are durable.

        Topics under ``cronbus.`` are refused: cronbus publishes them itself (run outcomes go
        to ``cronbus.runs`` from the worker, straight to the store), so a user cannot forge one.

        A hot path, so it goes to the store without the service layer's access check and
        audit entry, but with the checks of
        :meth:`cronbus.services.topics.TopicsService.publish`: the topic by
        :func:`~cronbus.validation.check_topic` (``publish=True``), each event as
        :func:`~cronbus.events.event.make_event` built it and as
        :func:`~cronbus.events.specs.to_new_event` stores it (payload limit included), and a
        new topic created in the app's namespace by the store. Unlike the API, a batch has no
        size bound here (the caller is the store's owner).
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

        A consumer's hot path (and pages of up to 10,000 events, with long polling, which the
        service's pages do not have), so it reads the store directly, with the checks of
        :meth:`cronbus.services.topics.TopicsService.read` (topic name, offset).
        """
        from ..services.topics import check_offset  # the services import this module

        validate_topic(topic)
        check_int(limit, "limit", 1, 10_000)
        check_offset(after)
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
        return await (await self._service(topic)).get(topic)

    async def topics(self) -> list[TopicInfo]:
        """Every topic of the app's namespace."""
        return await self.app.services().topics.list()

    async def set_retention(
        self, topic: str, *, max_age: float | None = None, max_events: int | None = None
    ) -> None:
        """Keep at most ``max_age`` seconds and ``max_events`` events of ``topic`` (None: all).

        Retention is applied in the background by dispatchers; events still needed by a
        pending delivery are kept. Topics under ``cronbus.`` are cronbus's own.
        """
        await (await self._service(topic)).set_retention(
            topic, max_age=max_age, max_events=max_events
        )


_POLICY_OPTIONS = frozenset(DeliveryPolicy.__dataclass_fields__)


class Subscriptions:
    """Subscriptions in the app's store: ``await app.subscriptions.add(...)`` and the rest.

    Each method is the local caller's door to the subscriptions service
    (:mod:`cronbus.services.subscriptions`), where the rules are written once for the Python
    API, the CLI and the HTTP API (validation naming the field, namespaces, the audit log).
    Subscriptions come back as stored, their secrets included: the caller owns the store.
    A subscription is reached by its name in whichever namespace it lives (names are unique
    per store); a new one goes to the app's namespace.
    """

    def __init__(self, app: App) -> None:
        self.app = app

    @property
    def store(self) -> EventStore:
        """The app's store, as an event store."""
        return self.app.store

    def _service(self, namespace: str | None = None) -> SubscriptionsService:
        return self.app.services(namespace=namespace).subscriptions

    async def _of(self, name: str) -> SubscriptionsService:
        """The service of the subscription's own namespace."""
        sub = await self.store.get_subscription(check_name(name))
        return self._service(sub.spec.namespace)

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
        from ..services import SubscriptionInput  # the services import this module

        if set(policy) - _POLICY_OPTIONS:
            build_policy(**policy)  # refuses the unknown options, naming them
        given = SubscriptionInput(
            name=name,
            topic=topic,
            webhook=webhook,
            secrets=secrets or (),
            headers=headers or {},
            task=task,
            queue=queue,
            types=types,
            source=source,
            subject=subject,
            data=data,
            filter=filter,
            start=start,
            replace_existing=replace_existing,
            **policy,
        )
        service = self._service()
        view = await service.create(given)
        return await service.stored(view.subscription.name)

    async def update(self, name: str, **changes: Any) -> Subscription:
        """Change a subscription's filter (``types``, ``filter`` ...), its target (given
        whole: ``webhook`` with ``secrets`` and ``headers``, or ``task`` with ``queue``) or
        delivery options; what is not given stays, and so does its cursor."""
        service = await self._of(name)
        await service.update(name, changes)
        return await service.stored(name)

    async def get(self, name: str) -> Subscription:
        """One subscription."""
        return await (await self._of(name)).stored(name)

    async def list(self, topic: str | None = None) -> builtins.list[Subscription]:
        """Every subscription of the app's namespace (to ``topic``)."""
        return await self._service().stored_list(topic)

    async def pause(self, name: str) -> Subscription:
        """Stop pushing; events keep arriving and are delivered after ``resume``."""
        service = await self._of(name)
        await service.pause(name)
        return await service.stored(name)

    async def resume(self, name: str) -> Subscription:
        """Push again (also after a 410 disabled it)."""
        service = await self._of(name)
        await service.resume(name)
        return await service.stored(name)

    async def remove(self, name: str) -> None:
        """Delete a subscription and its deliveries."""
        await (await self._of(name)).delete(name)

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
        service = await self._of(name)
        await service.replay(name, offset=offset, since=since)
        return await service.stored(name)

    async def deliveries(
        self, name: str | None = None, *, states: Sequence[str] = (), limit: int = 100
    ) -> builtins.list[Delivery]:
        """Deliveries (of subscription ``name``, else of every subscription), newest first."""
        from ..services.deliveries import check_delivery_states  # they import this module
        from ..services.pages import MAX_LIMIT

        check_int(limit, "limit", 1, OFFSET_LIMIT)
        if name is None:
            # Across subscriptions: a listing the service does not have (its deliveries are a
            # subscription's), read with the service's checks.
            chosen = check_delivery_states(states, "states")
            return await self.store.list_deliveries(DeliveryFilter(states=chosen, limit=limit))
        service = await self._of(name)
        found: builtins.list[Delivery] = []
        cursor: str | None = None
        while len(found) < limit:
            page = await service.deliveries(
                name, list(states), min(MAX_LIMIT, limit - len(found)), cursor
            )
            found += page.items
            cursor = page.next
            if cursor is None:
                break
        return found

    async def attempts(self, delivery_id: int) -> builtins.list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        from ..services.deliveries import check_delivery_id  # the services import this module

        delivery = await self.store.get_delivery(check_delivery_id(delivery_id, "delivery id"))
        service = await self._of(delivery.subscription)
        return (await service.delivery(delivery.id)).attempts

    async def counts(self, name: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``name`` are in each state (states with none left out)."""
        view = await (await self._of(name)).get(name)
        return {DeliveryState(s): n for s, n in (view.deliveries or {}).items() if n}

    async def requeue(
        self, delivery_ids: Sequence[int] | None = None, *, subscription: str | None = None
    ) -> builtins.list[int]:
        """Push dead deliveries again (None: every dead one of the app's namespace, or of
        ``subscription`` if given); returns the ids requeued. Ids that are not dead, unknown
        or of another namespace are left as they are."""
        if subscription is not None:
            service = (await self._dead_letters_of(subscription)).requeue
            if delivery_ids is None:
                done = await service(all_deliveries=True, subscription=subscription)
                return done.deliveries
            # Only those of the subscription.
            mine = [i for i in delivery_ids if await self._delivery_of(i) == subscription]
            return (await service(delivery_ids=mine)).deliveries if mine else []
        dead_letters = self.app.services().dead_letters
        if delivery_ids is None:
            return (await dead_letters.requeue(all_deliveries=True)).deliveries
        if not delivery_ids:
            return []
        return (await dead_letters.requeue(delivery_ids=delivery_ids)).deliveries

    async def _delivery_of(self, delivery_id: int) -> str | None:
        """The subscription of a delivery (None when there is no such delivery)."""
        from ..services.deliveries import check_delivery_id  # the services import this module

        try:
            delivery = await self.store.get_delivery(check_delivery_id(delivery_id, "delivery id"))
        except DeliveryNotFoundError:
            return None
        return delivery.subscription

    async def _dead_letters_of(self, subscription: str) -> DeadLettersService:
        sub = await self.store.get_subscription(check_name(subscription))
        return self.app.services(namespace=sub.spec.namespace).dead_letters

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
