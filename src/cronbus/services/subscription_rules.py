"""The rules of a subscription's definition, written once for every door: its target, filter
and delivery policy checked with the field at fault named, how it is shown (masked, with its
one-word state), and what a replay says it did."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..admin_records import DEFAULT_NAMESPACE
from ..errors import ConflictError, InvalidArgumentError
from ..events.masking import public_target
from ..events.records import DeliveryPolicy, Subscription, TopicInfo
from ..events.specs import build_filter, build_policy
from ..events.targets import check_target
from ..serialization import check_json
from ..validation import check_label, check_queue, check_topic, shorten
from .context import guess_field, naming
from .views import SubscriptionView

if TYPE_CHECKING:
    from ..store.ports import Events

POLICY_FIELDS = tuple(f.name for f in fields(DeliveryPolicy))
"""The delivery options a subscription takes."""
FILTER_FIELDS = ("types", "source", "subject", "data", "filter")
"""The changes that rebuild a subscription's filter."""
TARGET_FIELDS = ("webhook", "secrets", "headers", "task", "queue")
"""The changes that rebuild a subscription's target."""
_FILTER_PATH = re.compile(r"filter\.([A-Za-z_]+)(\S*?):")
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


def subscription_state(sub: Subscription) -> str:
    """``active``, ``paused`` or ``disabled`` (paused by cronbus, with a reason)."""
    if not sub.paused:
        return "active"
    return "disabled" if sub.disabled_reason else "paused"


def masked(sub: Subscription) -> Subscription:
    """The subscription with its target as it may be shown (no secrets)."""
    return replace(sub, spec=replace(sub.spec, target=public_target(sub.spec.target)))


def build_target(
    webhook: str | None,
    secrets: Sequence[str] | str,
    headers: Mapping[str, str],
    task: str | None,
    queue: str | None,
) -> dict[str, Any]:
    """The target the inputs describe, checked; refuses both, neither, and options of the
    other kind, naming the field at fault."""
    if webhook is not None and task is not None:
        raise InvalidArgumentError("give one target, webhook or task, not both", field="task")
    if webhook is None and task is None:
        raise InvalidArgumentError(
            "give exactly one target: a webhook URL or a task name", field="webhook"
        )
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


def has_row(info: TopicInfo) -> bool:
    """True when a topic exists in the store: events ever written, or settings."""
    return bool(info.last_offset or info.events or info.max_age or info.max_events)


async def topic_of(store: Events, topic: str, namespace: str, who: str) -> TopicInfo:
    """The topic ``who`` (``a subscription``, ``a connector``) of ``namespace`` is defined on,
    or :class:`~cronbus.errors.ConflictError` when it belongs to another namespace: everything
    that reads or writes a topic does so in its own namespace only (without saying whose the
    topic is). An unknown topic reads as an empty one of the default namespace: anyone's."""
    info = await store.get_topic(topic)
    if info.namespace != namespace and (has_row(info) or info.namespace != DEFAULT_NAMESPACE):
        raise ConflictError(
            f"topic {topic!r} belongs to another namespace; {who} uses topics of its own "
            "namespace only"
        )
    return info


async def claim_topic(store: Events, info: TopicInfo, namespace: str) -> None:
    """After a definition on a topic no one has written (``info`` from :func:`topic_of`),
    claim it for ``namespace`` now, so another namespace cannot create it later and have its
    events pushed here (a topic's namespace is its first writer's)."""
    if not has_row(info):
        await store.set_retention(info.name, None, None, namespace=namespace)


def _moved(before: int, cursor: int) -> str:
    return f"cursor moved to {cursor}" if before != cursor else f"cursor stays at {cursor}"


def check_topic_name(topic: object) -> str:
    """A topic name a subscription reads (topics under ``cronbus.`` may be read)."""
    return check_topic(topic, "topic")


def named_filter(
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


def named_policy(base: DeliveryPolicy | None, options: Mapping[str, Any]) -> DeliveryPolicy:
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
