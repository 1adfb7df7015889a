"""Topics and events in the PostgreSQL store.

An append is one pipelined transaction in one round trip, whatever the batch (lock the topic,
insert, NOTIFY, commit); it waits for the server's disk at commit, like a defer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError
from ...events.records import (
    Appended,
    EventRecord,
    NewEvent,
    TopicInfo,
)
from ..event_rows import event_from_row
from ..ports import EVENTS_CHANNEL
from . import events_sql as q
from .connection import Connected, Row
from .rows import arrays


class PostgresEvents(Connected):
    """The events role (:class:`~cronbus.store.ports.Events`) of the PostgreSQL store."""

    async def append(
        self, topic: str, events: Sequence[NewEvent], now: float, namespace: str = "default"
    ) -> list[Appended]:
        """Append events durably at increasing offsets, in one round trip (see the SQL for how
        offsets follow commit order); a repeated id reports its stored offset. The first
        append creates the topic in ``namespace``; a topic of another namespace raises
        :class:`~cronbus.errors.ConflictError` (nothing was appended)."""
        if not events:
            return []
        async with self._db.transaction() as tx:
            await tx.queue(q.LOCK_TOPIC, {"topic": topic, "namespace": namespace, "now": now})
            params = {**_append_params(topic, events, now), "namespace": namespace}
            appending = await tx.queue(q.APPEND, params)
            tx.nudges.add(EVENTS_CHANNEL)
        rows = await appending.fetchall()
        owner = rows[0][2] if rows else namespace
        if owner != namespace:
            raise ConflictError(f"topic {topic!r} belongs to namespace {owner!r}")
        appended = [
            Appended(id=event.id, offset=offset, created=created)
            for event, (offset, created, _) in zip(events, rows, strict=True)
        ]
        if self.observer is not None:
            self.observer.published(topic, sum(1 for a in appended if a.created))
        return appended

    async def read_events(self, topic: str, after: int, limit: int) -> list[EventRecord]:
        """Events of ``topic`` above ``after``, in offset order (a primary key range)."""
        return [
            event_from_row(row) for row in await self._db.rows(q.READ_EVENTS, (topic, after, limit))
        ]

    async def get_topic(self, topic: str) -> TopicInfo:
        """A topic's offsets and retention; an unknown topic is empty (and is not created)."""
        row = await self._db.one(q.GET_TOPIC, (topic,))
        return (
            _topic(row)
            if row
            else TopicInfo(name=topic, first_offset=None, last_offset=0, events=0)
        )

    async def list_topics(self, namespace: str | None = None) -> list[TopicInfo]:
        """Every topic (of ``namespace``; None: of all) with events or settings, by name."""
        rows = await self._db.rows(q.LIST_TOPICS, {"namespace": namespace})
        return [_topic(row) for row in rows]

    async def set_retention(
        self,
        topic: str,
        max_age: float | None,
        max_events: int | None,
        namespace: str = "default",
    ) -> None:
        """Keep events of ``topic`` at most ``max_age`` seconds and ``max_events`` (None: any);
        a new topic is created in ``namespace``."""
        params = {
            "topic": topic,
            "max_age": max_age,
            "max_events": max_events,
            "namespace": namespace,
        }
        await self._db.execute(q.SET_RETENTION, params)

    async def trim(self, now: float) -> int:
        """Apply every topic's retention in one statement; events of live deliveries stay."""
        row = await self._db.one(q.TRIM, {"now": now})
        return int(row[0]) if row else 0

    async def offset_at(self, topic: str, when: float) -> int:
        """The largest offset of ``topic`` published before ``when`` (0: none)."""
        row = await self._db.one(q.OFFSET_AT, (topic, when))
        return int(row[0]) if row else 0


def _append_params(topic: str, events: Sequence[NewEvent], now: float) -> dict[str, Any]:
    rows = [
        (e.id, e.type, e.source, e.subject, e.time, e.datacontenttype, e.key, e.data_json, e.trace)
        for e in events
    ]
    return {**arrays(_APPEND_COLUMNS, rows), "topic": topic, "now": now}


def _topic(row: Row) -> TopicInfo:
    return TopicInfo(
        name=row[0],
        first_offset=row[1],
        last_offset=row[2],
        events=row[3],
        max_age=row[4],
        max_events=row[5],
        namespace=row[6],
    )


_APPEND_COLUMNS = (
    "event_id",
    "type",
    "source",
    "subject",
    "time",
    "datacontenttype",
    "key",
    "data",
    "trace",
)
