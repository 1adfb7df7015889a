"""Topics and their events: list, show, publish one or a batch, read from an offset, retention.

A topic belongs to the namespace of its first event; names are unique per store, so publishing
to a topic of another namespace is a conflict (without saying whose it is), and reading it is
not found. Topics under ``cronbus.`` are written by cronbus alone.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from ..errors import ConflictError, CronbusError, InvalidArgumentError, NotFoundError
from ..events.bus import OFFSET_LIMIT, Published
from ..events.event import DEFAULT_SOURCE, Event, make_event, validate_topic
from ..events.records import TopicInfo
from ..events.specs import to_new_event
from ..events.targets import to_event
from ..validation import check_int, check_seconds, check_topic, shorten
from .context import Context, guess_field, naming
from .pages import Page, check_limit, decode_cursor, encode_cursor
from .subscription_rules import has_row
from .views import EventInput

MAX_BATCH = 1_000
"""The most events one publish takes (one transaction)."""
_CURSOR = {"o": int}
_WORDS = {
    "event type": "type",
    "event source": "source",
    "event subject": "subject",
    "event key": "key",
    "event id": "id",
    "time": "time",
    "data": "data",
}


def check_offset(value: object, field: str = "after") -> int:
    """An offset to read after: a whole number from 0."""
    with naming(field):
        return check_int(value, field, 0, OFFSET_LIMIT)


class TopicsService:
    """Topics of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def list(self) -> builtins.list[TopicInfo]:
        """Every topic of the namespace, by name, with its offsets, size and retention."""
        self._c.read()
        return await self._c.store.list_topics(namespace=self._c.namespace)

    async def get(self, name: str) -> TopicInfo:
        """A topic's offsets, size and retention (a topic never written to is empty, at offset
        0); a topic of another namespace is :class:`~cronbus.errors.NotFoundError`."""
        self._c.read()
        return await self._get(name)

    async def _get(self, name: str) -> TopicInfo:
        with naming("topic"):
            name = validate_topic(name)
        info = await self._c.store.get_topic(name)
        if info.namespace != self._c.namespace and has_row(info):
            raise NotFoundError(f"no topic named {name!r}")
        return info

    async def publish(
        self, topic: str, events: Sequence[EventInput | Event]
    ) -> builtins.list[Published]:
        """Append events to ``topic`` in one transaction, all or none; each comes back with
        its offset once durable (``created`` False for an id already in the topic, stored
        once). The first event creates the topic in this namespace."""
        self._c.write()
        with naming("topic"):
            check_topic(topic, "topic", publish=True)
        if isinstance(events, str | bytes | EventInput | Event) or not isinstance(events, Sequence):
            raise InvalidArgumentError(
                f"events must be a list of events, got {shorten(events)}", field="events"
            )
        if not events:
            raise InvalidArgumentError("give at least one event", field="events")
        if len(events) > MAX_BATCH:
            raise InvalidArgumentError(
                f"events must be at most {MAX_BATCH} per publish, got {len(events)}",
                field="events",
            )
        checked = [self._event(item, f"events[{i}]") for i, item in enumerate(events)]
        limit = self._c.settings.max_payload_bytes
        news = []
        for i, event in enumerate(checked):
            with naming(f"events[{i}].data"):
                news.append(to_new_event(event, limit))
        now = self._c.now()
        try:
            appended = await self._c.store.append(topic, news, now, namespace=self._c.namespace)
        except ConflictError:
            # Names are unique per store; whose the topic is stays unsaid.
            raise ConflictError(
                f"topic {topic!r} belongs to another namespace; choose another topic name"
            ) from None
        published = [
            Published(e.appended(topic=topic, offset=a.offset, published_at=now), a.created)
            for e, a in zip(checked, appended, strict=True)
        ]
        created = [p.event.offset for p in published if p.created]
        if created:
            await self._c.audit(
                "topics.publish", topic, {"events": len(created), "first_offset": created[0]}
            )
        return published

    def _event(self, item: EventInput | Event, field: str) -> Event:
        if isinstance(item, Event):
            return item
        if not isinstance(item, EventInput):
            raise InvalidArgumentError(
                f"{field} must be an event, got {shorten(item)}", field=field
            )
        try:
            return make_event(
                item.type,
                item.data,
                source=DEFAULT_SOURCE if item.source is None else item.source,
                subject=item.subject,
                id=item.id,
                key=item.key,
                time=item.time,
            )
        except CronbusError as exc:
            name = f"{field}.{guess_field(str(exc), _WORDS, 'type')}"
            raise InvalidArgumentError(str(exc), field=name) from None

    async def read(
        self, topic: str, after: int = 0, limit: int = 50, cursor: str | None = None
    ) -> Page[Event]:
        """Events of ``topic`` past offset ``after`` (or the ``cursor`` of a previous page),
        oldest first. ``next`` is set when the page is full: more may follow."""
        self._c.read()
        limit = check_limit(limit)
        start = check_offset(after)
        if cursor is not None:
            start = decode_cursor(cursor, _CURSOR)["o"]
        info = await self._get(topic)
        records = await self._c.store.read_events(info.name, start, limit)
        items = [to_event(r) for r in records]
        last = records[-1].offset if records else None
        more = last is not None and len(records) == limit
        return Page(items=items, next=encode_cursor({"o": last}) if more else None)

    async def set_retention(
        self, topic: str, max_age: float | None = None, max_events: int | None = None
    ) -> TopicInfo:
        """Keep at most ``max_age`` seconds and ``max_events`` events of ``topic`` (None: no
        bound). Dispatchers apply it in the background; events a live delivery still needs
        are kept."""
        self._c.write()
        with naming("topic"):
            check_topic(topic, "topic", publish=True)
        if max_age is not None:
            with naming("max_age"):
                max_age = check_seconds(max_age, "max_age", positive=True)
        if max_events is not None:
            with naming("max_events"):
                check_int(max_events, "max_events", 1, OFFSET_LIMIT)
        info = await self._get(topic)
        await self._c.store.set_retention(
            info.name, max_age, max_events, namespace=self._c.namespace
        )
        await self._c.audit(
            "topics.set_retention", topic, {"max_age": max_age, "max_events": max_events}
        )
        return await self._c.store.get_topic(info.name)
