"""Subscriptions: create, read, update, delete, pause, resume, replay, and their deliveries.

Definitions are checked whole (name, topic, target, filter, delivery policy, by the rules of
:mod:`cronbus.events.specs` and :mod:`cronbus.events.targets`) before the store changes, and
each refusal names its field. What a subscription shows is masked: webhook URL credentials,
header values and signing secrets never leave the service.
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

from ..admin_records import DEFAULT_NAMESPACE
from ..errors import (
    ConflictError,
    DeliveryNotFoundError,
    InvalidArgumentError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
)
from ..events.bus import OFFSET_LIMIT
from ..events.masking import public_target
from ..events.records import (
    Delivery,
    DeliveryFilter,
    DeliveryPolicy,
    Origin,
    Subscription,
    SubscriptionSpec,
    TopicInfo,
)
from ..events.specs import build_filter, build_policy, check_name
from ..events.states import DeliveryState
from ..events.targets import check_target
from ..serialization import check_json
from ..store.ports import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL
from ..validation import (
    check_int,
    check_label,
    check_queue,
    check_time,
    check_topic,
    shorten,
)
from .context import Context, guess_field, naming
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, page_of
from .views import DeliveryDetail, ReplayResult, SubscriptionInput, SubscriptionView

log = logging.getLogger("cronbus.services")
POLICY_FIELDS = tuple(f.name for f in fields(DeliveryPolicy))
"""The delivery options a subscription takes."""
FILTER_FIELDS = ("types", "source", "subject", "data", "filter")
"""The changes that rebuild a subscription's filter."""
TARGET_FIELDS = ("webhook", "secrets", "headers", "task", "queue")
"""The changes that rebuild a subscription's target."""
_FILTER_PATH = re.compile(r"filter\.([A-Za-z_]+)(\S*?):")
_CURSOR = {"n": str}
_DELIVERY_CURSOR = {"b": int}
_SCAN = 10_000
"""Deliveries of one subscription read to find those below a cursor (the store's delivery
filter has no keyset yet)."""
_WORDS = {
    **{name: name for name in POLICY_FIELDS},
    "subscription name": "name",
    "topic": "topic",
    "webhook url": "webhook",
    "webhook target": "webhook",
    "webhook headers": "headers",
    "secret": "secrets",
    "task target": "task",
    "subscription task": "task",
    "subscription queue": "queue",
    "filter": "filter",
    "types": "types",
    "source": "source",
    "subject": "subject",
    "data": "data",
}


def check_delivery_id(value: object, field: str = "delivery_id") -> int:
    """A delivery id: a whole number from 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(
            f"{field} must be a whole number from 1, got {shorten(value)}", field=field
        )
    return value


def check_delivery_states(
    states: Sequence[DeliveryState | str] | DeliveryState | str | None, field: str = "state"
) -> tuple[DeliveryState, ...]:
    """Delivery states by name (``pending``, ``in_flight``, ``acked``, ``retry``, ``dead``)."""
    if states is None:
        return ()
    if isinstance(states, str):
        states = [states]
    chosen = []
    for state in states:
        try:
            chosen.append(DeliveryState(state))
        except ValueError:
            allowed = ", ".join(s.value for s in DeliveryState)
            raise InvalidArgumentError(
                f"{field} must be delivery states ({allowed}), got {shorten(state)}",
                field=field,
            ) from None
    return tuple(dict.fromkeys(chosen))


def subscription_state(sub: Subscription) -> str:
    """``active``, ``paused`` or ``disabled`` (paused by cronbus, with a reason)."""
    if not sub.paused:
        return "active"
    return "disabled" if sub.disabled_reason else "paused"


def masked(sub: Subscription) -> Subscription:
    """The subscription with its target as it may be shown (no secrets)."""
    return replace(sub, spec=replace(sub.spec, target=public_target(sub.spec.target)))


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
                topic = _topic(topic)
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
            topic = _topic(given.topic)
        if given.start not in ("latest", "earliest"):
            raise InvalidArgumentError(
                f"start must be 'latest' or 'earliest', got {shorten(given.start)}", field="start"
            )
        target = self._target(given.webhook, given.secrets, given.headers, given.task, given.queue)
        spec_filter = _filter(given.types, given.source, given.subject, given.data, given.filter)
        options = {k: getattr(given, k) for k in POLICY_FIELDS if getattr(given, k) is not None}
        policy = _policy(None, options)
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
        info = await self._c.store.get_topic(topic)
        # An unknown topic reads as an empty one of the default namespace.
        if info.namespace != self._c.namespace and (
            _has_row(info) or info.namespace != DEFAULT_NAMESPACE
        ):
            raise ConflictError(
                f"topic {topic!r} belongs to another namespace; a subscription reads topics of "
                "its own namespace only"
            )
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
        if not _has_row(info):
            # Claim the topic for this namespace now, so another namespace cannot create it
            # later and have its events pushed here (a topic's namespace is its first writer's).
            await self._c.store.set_retention(topic, None, None, namespace=self._c.namespace)
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

    def _target(
        self,
        webhook: str | None,
        secrets: Sequence[str] | str,
        headers: Mapping[str, str],
        task: str | None,
        queue: str | None,
    ) -> dict[str, Any]:
        """The target the inputs describe; refuses both, neither, and options of the other
        kind."""
        if webhook is not None and task is not None:
            raise InvalidArgumentError("give one target, webhook or task, not both", field="task")
        if webhook is None and task is None:
            raise InvalidArgumentError("give a target: webhook URL or task name", field="webhook")
        if webhook is not None:
            if queue is not None:
                raise InvalidArgumentError("queue goes with a task target", field="queue")
            chosen = [secrets] if isinstance(secrets, str) else list(secrets or [])
            target: dict[str, Any] = {
                "kind": "webhook",
                "url": webhook,
                "headers": dict(headers or {}),
                "secrets": chosen,
            }
        else:
            if secrets or headers:
                field = "secrets" if secrets else "headers"
                raise InvalidArgumentError(f"{field} go with a webhook target", field=field)
            with naming("task"):
                name = check_label(task, "task")
            with naming("queue"):
                chosen_queue = None if queue is None else check_queue(queue, "queue")
            target = {"kind": "task", "task": name, "queue": chosen_queue}
        try:
            # Targets are stored as JSON (jsonb on PostgreSQL, which refuses NUL): one pass.
            check_json(target, "the subscription's target")
            return check_target(target)
        except InvalidArgumentError as exc:
            default = "webhook" if webhook is not None else "task"
            field = guess_field(str(exc), _WORDS, default)
            raise InvalidArgumentError(str(exc), field=field) from None

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
            spec = replace(spec, filter=_filter(filter=full, **parts))
        target = {k: changes.pop(k) for k in list(changes) if k in TARGET_FIELDS}
        if target:
            spec = replace(
                spec,
                target=self._target(
                    target.get("webhook"),
                    target.get("secrets") or (),
                    target.get("headers") or {},
                    target.get("task"),
                    target.get("queue"),
                ),
            )
        if changes:
            spec = replace(spec, policy=_policy(spec.policy, changes))
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


async def list_deliveries(
    context: Context,
    subscription: str,
    states: Sequence[DeliveryState],
    before: int | None,
    limit: int,
) -> builtins.list[Delivery]:
    """Deliveries of one subscription below id ``before``, newest first, at most ``limit``."""
    if "before_id" in DeliveryFilter.__dataclass_fields__:
        keyset: dict[str, Any] = {"before_id": before}
        wanted = DeliveryFilter(subscription=subscription, states=states, limit=limit, **keyset)
        return await context.store.list_deliveries(wanted)
    wanted = DeliveryFilter(
        subscription=subscription, states=states, limit=limit if before is None else _SCAN
    )
    found = await context.store.list_deliveries(wanted)
    return [d for d in found if before is None or d.id < before][:limit]


def replay_message(
    name: str,
    since: float | None,
    before: int,
    view: SubscriptionView,
    first_offset: int | None,
    clamped: bool,
) -> str:
    """What a replay did, in one line (and why, when the cursor stopped at the topic's end)."""
    cursor, end = view.subscription.cursor, view.topic_end
    if clamped:
        message = (
            f"subscription {name}: the topic ends at offset {end}; {_moved(before, end)}; "
            "events published from now on are delivered"
        )
    elif since is not None and cursor == end:
        when = datetime.fromtimestamp(since, UTC).isoformat(timespec="seconds")
        message = (
            f"subscription {name}: no event of {view.subscription.topic} was published at or "
            f"after {when}; {_moved(before, end)}, the topic's end; events published from now "
            "on are delivered"
        )
    else:
        message = (
            f"subscription {name}: cursor moved from {before} to {cursor}; "
            f"{view.lag} event offset{'' if view.lag == 1 else 's'} to match again"
        )
    if first_offset is not None and first_offset > cursor + 1:
        message += f" (retention removed the events below offset {first_offset})"
    return message


def _has_row(info: TopicInfo) -> bool:
    """True when a topic exists in the store: events ever written, or settings."""
    return bool(info.last_offset or info.events or info.max_age or info.max_events)


def _moved(before: int, cursor: int) -> str:
    return f"cursor moved to {cursor}" if before != cursor else f"cursor stays at {cursor}"


def _topic(topic: object) -> str:
    return check_topic(topic, "topic")


def _filter(
    types: Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    subject: str | Sequence[str] | None = None,
    data: Mapping[str, Any] | None = None,
    filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A filter spec, checked; an error names the filter key at fault."""
    try:
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidArgumentError(f"filter must be an object, got {shorten(filter)}")
        return build_filter(types, source, subject, data, filter)
    except InvalidArgumentError as exc:
        field = exc.field
        # The filter compiler names the path at fault (filter.types[0]: ...); a key given as
        # its own input (types=...) is named as that input.
        path = _FILTER_PATH.match(str(exc))
        if field is None and path is not None:
            given = {"types": types, "source": source, "subject": subject, "data": data}
            key, rest = path[1], path[2]
            field = f"{key}{rest}" if given.get(key) is not None else f"filter.{key}{rest}"
        raise InvalidArgumentError(
            str(exc), field=field or guess_field(str(exc), _WORDS, "filter")
        ) from None


def _policy(base: DeliveryPolicy | None, options: Mapping[str, Any]) -> DeliveryPolicy:
    """A delivery policy with ``options`` changed; an error names the option at fault."""
    try:
        return build_policy(base, **options)
    except InvalidArgumentError as exc:
        first = next(iter(options), "policy")
        raise InvalidArgumentError(
            str(exc), field=exc.field or guess_field(str(exc), _WORDS, first)
        ) from None
    except TypeError as exc:  # a value dataclasses.replace could not take
        raise InvalidArgumentError(str(exc), field=next(iter(options), "policy")) from None
