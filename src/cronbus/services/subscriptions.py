"""Subscriptions: create, read, update, delete, pause, resume, replay, and their deliveries.

Definitions are checked whole (name, topic, target, filter, delivery policy, by the rules of
:mod:`cronbus.events.specs` and :mod:`cronbus.events.targets`) before the store changes, and
each refusal names its field. What a subscription shows is masked: webhook URL credentials,
header values and signing secrets never leave the service, but to an admin asking for the
subscription as stored (``stored``, ``stored_list``: the local Python API's door).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import (
    ConflictError,
    DeliveryNotFoundError,
    InvalidArgumentError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
)
from ..events.bus import OFFSET_LIMIT
from ..events.masking import public_target
from ..events.records import Delivery, Origin, Subscription, SubscriptionSpec
from ..events.specs import check_name
from ..events.states import DeliveryState
from ..store.ports import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL
from ..validation import check_int, check_time, shorten
from .context import Context, naming
from .deliveries import check_delivery_id, check_delivery_states, list_deliveries
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, page_of
from .subscription_rules import (
    FILTER_FIELDS,
    POLICY_FIELDS,
    TARGET_FIELDS,
    build_target,
    check_topic_name,
    claim_topic,
    masked,
    named_filter,
    named_policy,
    replay_message,
    subscription_state,
    topic_of,
)
from .views import DeliveryDetail, ReplayResult, SubscriptionInput, SubscriptionView

log = logging.getLogger("cronbus.services")
_CURSOR = {"n": str}
_DELIVERY_CURSOR = {"b": int}


class SubscriptionsService:
    """Subscriptions of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    # -- reads -----------------------------------------------------------------------------------
    async def list(
        self, topic: str | None = None, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[SubscriptionView]:
        """Subscriptions of the namespace (to ``topic``) by name, a page at a time."""
        self._c.read()
        limit = check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor, _CURSOR)["n"]
        if topic is not None:
            with naming("topic"):
                topic = check_topic_name(topic)
        found = await self._c.store.list_subscriptions(topic, namespace=self._c.namespace)
        ordered = [
            s for s in sorted(found, key=lambda s: s.name) if after is None or s.name > after
        ]
        topics = await self._c.store.list_topics(namespace=self._c.namespace)
        ends = {info.name: info.last_offset for info in topics}
        views = [self._view(sub, ends.get(sub.topic, 0)) for sub in ordered[: limit + 1]]
        return page_of(views, limit, lambda view: {"n": view.subscription.name})

    async def get(self, name: str) -> SubscriptionView:
        """One subscription with its lag and its deliveries counted by state."""
        self._c.read()
        sub = await self._get(name)
        counts = await self._c.store.count_deliveries(sub.name)
        view = await self._seen(sub)
        every = {state.value: counts.get(state, 0) for state in DeliveryState}
        return replace(view, deliveries=every)

    async def stored(self, name: str) -> Subscription:
        """One subscription as stored, unmasked: its webhook's URL, headers and signing
        secrets included. For the local Python API (``app.subscriptions``), whose caller owns
        the store; admin only, since secrets leave the service."""
        self._c.admin()
        return await self._get(name)

    async def stored_list(self, topic: str | None = None) -> builtins.list[Subscription]:
        """Every subscription of the namespace (to ``topic``) as stored, unmasked, in the
        store's order: :meth:`stored` for all of them at once; admin only."""
        self._c.admin()
        if topic is not None:
            with naming("topic"):
                topic = check_topic_name(topic)
        return await self._c.store.list_subscriptions(topic, namespace=self._c.namespace)

    async def _get(self, name: str) -> Subscription:
        with naming("name"):
            name = check_name(name)
        sub = await self._c.store.get_subscription(name)
        self._c.owns(
            sub.spec.namespace, SubscriptionNotFoundError(f"no subscription named {name!r}")
        )
        return sub

    async def _seen(self, sub: Subscription) -> SubscriptionView:
        info = await self._c.store.get_topic(sub.topic)
        return self._view(sub, info.last_offset)

    def _view(self, sub: Subscription, topic_end: int) -> SubscriptionView:
        expires = sub.lease_expires_at
        holder = sub.holder if expires is not None and expires > self._c.now() else None
        return SubscriptionView(
            subscription=masked(sub),
            state=subscription_state(sub),
            topic_end=topic_end,
            lag=max(0, topic_end - sub.cursor),
            holder=holder,
        )

    # -- define ----------------------------------------------------------------------------------
    async def create(self, given: SubscriptionInput) -> SubscriptionView:
        """Subscribe a webhook or a task to a topic. A name that exists is a no-op with the
        same definition and :class:`~cronbus.errors.SubscriptionExistsError` with another
        (``replace_existing`` redefines it, keeping its cursor); the store's insert decides,
        so of two concurrent creates exactly one wins."""
        self._c.write()
        with naming("name"):
            name = check_name(given.name)
        with naming("topic"):
            topic = check_topic_name(given.topic)
        if given.start not in ("latest", "earliest"):
            raise InvalidArgumentError(
                f"start must be 'latest' or 'earliest', got {shorten(given.start)}", field="start"
            )
        target = build_target(given.webhook, given.secrets, given.headers, given.task, given.queue)
        spec_filter = named_filter(
            given.types, given.source, given.subject, given.data, given.filter
        )
        options = {k: getattr(given, k) for k in POLICY_FIELDS if getattr(given, k) is not None}
        policy = named_policy(None, options)
        spec = SubscriptionSpec(
            name=name,
            topic=topic,
            target=target,
            filter=spec_filter,
            policy=policy,
            origin=Origin.API,
            start=given.start,
            namespace=self._c.namespace,
        )
        info = await topic_of(self._c.store, topic, self._c.namespace, "a subscription")
        if given.replace_existing:
            await self._mine_or_absent(name)
        try:
            sub = await self._c.store.put_subscription(
                spec, self._c.now(), create=not given.replace_existing
            )
        except SubscriptionExistsError:
            raise SubscriptionExistsError(
                f"a subscription named {name!r} exists with another definition; replace it "
                "(replace_existing, --replace) to redefine it"
            ) from None
        except ConflictError:
            raise ConflictError(
                f"a subscription named {name!r} exists in another namespace"
            ) from None
        await claim_topic(self._c.store, info, self._c.namespace)
        await self._c.store.notify([SUBSCRIPTIONS_CHANNEL])
        await self._c.audit(
            "subscriptions.create", name, {"topic": topic, "target": public_target(target)}
        )
        return await self._seen(sub)

    async def _mine_or_absent(self, name: str) -> None:
        """Refuse to replace a subscription of another namespace (a conflict: names are
        unique per store)."""
        try:
            sub = await self._c.store.get_subscription(name)
        except SubscriptionNotFoundError:
            return
        if sub.spec.namespace != self._c.namespace:
            raise ConflictError(f"a subscription named {name!r} exists in another namespace")

    async def update(self, name: str, changes: Mapping[str, Any]) -> SubscriptionView:
        """Change a subscription's filter (``types``, ``source``, ``subject``, ``data``,
        ``filter``), its target (``webhook``, ``secrets``, ``headers``, ``task``, ``queue``:
        given whole) or delivery options; what is not given stays. Its cursor is kept."""
        self._c.write()
        sub = await self._get(name)
        changes = dict(changes)
        if not changes:
            raise InvalidArgumentError("give at least one change", field="changes")
        unknown = sorted(set(changes) - {*FILTER_FIELDS, *TARGET_FIELDS, *POLICY_FIELDS})
        if unknown:
            raise InvalidArgumentError(
                f"unknown subscription option(s): {', '.join(map(shorten, unknown))}",
                field=unknown[0],
            )
        spec = sub.spec
        parts = {k: changes.pop(k) for k in list(changes) if k in FILTER_FIELDS}
        if parts:
            base = {} if "filter" in parts else dict(spec.filter)
            full = {**base, **(parts.pop("filter", None) or {})}
            spec = replace(spec, filter=named_filter(filter=full, **parts))
        target = {k: changes.pop(k) for k in list(changes) if k in TARGET_FIELDS}
        if target:
            spec = replace(
                spec,
                target=build_target(
                    target.get("webhook"),
                    target.get("secrets") or (),
                    target.get("headers") or {},
                    target.get("task"),
                    target.get("queue"),
                ),
            )
        if changes:
            spec = replace(spec, policy=named_policy(spec.policy, changes))
        changed = await self._c.store.put_subscription(spec, self._c.now())
        await self._c.store.notify([SUBSCRIPTIONS_CHANNEL])
        await self._c.audit(
            "subscriptions.update", sub.name, {"changes": sorted({*parts, *target, *changes})}
        )
        return await self._seen(changed)

    async def delete(self, name: str) -> SubscriptionView:
        """Delete a subscription with its cursor and deliveries (dead ones too); returns it
        as it was. One defined in the code comes back when a dispatcher starts."""
        self._c.write()
        sub = await self._get(name)
        view = await self._seen(sub)
        await self._c.store.delete_subscription(sub.name)
        await self._c.store.notify([SUBSCRIPTIONS_CHANNEL])
        await self._c.audit("subscriptions.delete", sub.name)
        return view

    async def pause(self, name: str) -> SubscriptionView:
        """Stop pushing; events keep arriving and are delivered after ``resume``."""
        return await self._set_paused(name, True)

    async def resume(self, name: str) -> SubscriptionView:
        """Push again (also after cronbus disabled it, e.g. on a 410 Gone)."""
        return await self._set_paused(name, False)

    async def _set_paused(self, name: str, paused: bool) -> SubscriptionView:
        self._c.write()
        sub = await self._get(name)
        changed = await self._c.store.set_subscription_paused(sub.name, paused, None, self._c.now())
        await self._c.store.notify([SUBSCRIPTIONS_CHANNEL])
        await self._c.audit(f"subscriptions.{'pause' if paused else 'resume'}", sub.name)
        return await self._seen(changed)

    async def replay(
        self, name: str, offset: int | None = None, since: float | None = None
    ) -> ReplayResult:
        """Deliver again from ``offset`` (the first offset to deliver again) or from the
        events published at or after ``since`` (epoch seconds).

        Replayed events become new deliveries, with the event id as their idempotency key.
        The cursor may move forward too, skipping events, but never past the topic's end: an
        offset beyond it (or a time after the last event) moves it to the topic's last
        offset, so every event published from then on is delivered."""
        self._c.write()
        if (offset is None) == (since is None):
            raise InvalidArgumentError("give exactly one of offset or since", field="offset")
        sub = await self._get(name)
        if offset is not None:
            with naming("offset"):
                after = check_int(offset, "offset", 1, OFFSET_LIMIT) - 1
        else:
            with naming("since"):
                when = check_time(since, "since")
            after = await self._c.store.offset_at(sub.topic, when)
        moved = await self._c.store.replay(sub.name, after, self._c.now())
        await self._c.store.notify([SUBSCRIPTIONS_CHANNEL, EVENTS_CHANNEL])
        info = await self._c.store.get_topic(sub.topic)
        view = self._view(moved, info.last_offset)
        clamped = offset is not None and moved.cursor < after
        if clamped:
            log.info(
                "replay of %s: the topic ends at offset %d; cursor moved to %d",
                sub.name,
                moved.cursor,
                moved.cursor,
                extra={"action": "subscription.replay_clamped"},
            )
        message = replay_message(sub.name, since, sub.cursor, view, info.first_offset, clamped)
        await self._c.audit(
            "subscriptions.replay",
            sub.name,
            {"from": sub.cursor, "to": moved.cursor, "offset": offset, "since": since},
        )
        return ReplayResult(
            subscription=view, previous_cursor=sub.cursor, clamped=clamped, message=message
        )

    # -- deliveries ------------------------------------------------------------------------------
    async def deliveries(
        self,
        name: str,
        state: Sequence[DeliveryState | str] | DeliveryState | str | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Page[Delivery]:
        """A subscription's deliveries (in ``state``), newest first, a page at a time."""
        self._c.read()
        limit = check_limit(limit)
        states = check_delivery_states(state)
        before = None if cursor is None else decode_cursor(cursor, _DELIVERY_CURSOR)["b"]
        sub = await self._get(name)
        found = await list_deliveries(self._c, sub.name, states, before, limit + 1)
        return page_of(found, limit, lambda d: {"b": d.id})

    async def delivery(self, delivery_id: int) -> DeliveryDetail:
        """One delivery of a subscription of the namespace, with its attempts."""
        self._c.read()
        delivery_id = check_delivery_id(delivery_id)
        delivery = await self._c.store.get_delivery(delivery_id)
        missing = DeliveryNotFoundError(f"no delivery has id {delivery_id}")
        try:
            sub = await self._c.store.get_subscription(delivery.subscription)
        except SubscriptionNotFoundError:
            raise missing from None
        self._c.owns(sub.spec.namespace, missing)
        attempts = await self._c.store.list_delivery_attempts(delivery_id)
        return DeliveryDetail(delivery=delivery, attempts=attempts)
