"""Topics and events in the SQLite store.

Durability: a publish commits at the store's ``synchronous`` level, like a defer; a trim commits
relaxed. ``max_events`` keeps the newest that many offsets; events that live deliveries need are
kept on top of them, and so are events some subscription has not matched yet (above its
cursor). An event's identity is its source and id (CloudEvents): a repeat is deduplicated while
its event is kept.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence

from ...errors import ConflictError
from ...events.records import Appended, EventRecord, NewEvent, TopicInfo
from ..event_rows import event_from_row
from ..ports import EVENTS_CHANNEL
from . import events_sql as q
from .connection import Connected, Inline
from .rows import Row, execute

_INLINE_BATCH = 16
"""Appends of at most this many events may run on the event loop's thread."""
_TRIM_BATCH = 2000
"""Events examined per trim transaction, so a large trim never holds the write lock long."""


def append_events(
    conn: sqlite3.Connection,
    topic: str,
    events: Sequence[NewEvent],
    now: float,
    namespace: str = "default",
) -> list[Appended]:
    """Give new events the next offsets and insert them with one ``executemany``; known ones
    (same source and id, stored before or earlier in the batch) report their offset. The
    topic is created in ``namespace``; one of another namespace is refused."""
    conn.execute(q.ENSURE_TOPIC, (topic, namespace, now))
    last, owner = conn.execute(q.TOPIC_LAST_OFFSET, (topic,)).fetchone()
    if owner != namespace:
        raise ConflictError(f"topic {topic!r} belongs to namespace {owner!r}")
    ids = json.dumps(list({e.id: None for e in events}))
    known: dict[tuple[str, str], int] = {
        (source, event_id): offset
        for event_id, source, offset in conn.execute(q.KNOWN_IDS, (topic, ids))
    }
    appended: list[Appended] = []
    rows: list[Row] = []
    for e in events:
        offset = known.get((e.source, e.id))
        if offset is not None:
            appended.append(Appended(id=e.id, offset=offset, created=False))
            continue
        last += 1
        known[e.source, e.id] = last
        appended.append(Appended(id=e.id, offset=last, created=True))
        rows.append(_event_row(topic, last, e, now))
    if rows:
        conn.executemany(q.INSERT_EVENT, rows)
        conn.execute(q.SET_LAST_OFFSET, (last, topic))
    return appended


def _event_row(topic: str, offset: int, e: NewEvent, now: float) -> Row:
    """The parameters of :data:`~.events_sql.INSERT_EVENT`."""
    attributes = (e.id, e.type, e.source, e.subject, e.time, e.datacontenttype, e.key)
    return (topic, offset, *attributes, e.data_json, now, e.trace)


def topic_info(conn: sqlite3.Connection, topic: str) -> TopicInfo:
    """A topic's offsets, event count and retention."""
    row = conn.execute(q.TOPIC_ROW, (topic,)).fetchone()
    if row is None:
        return TopicInfo(name=topic, first_offset=None, last_offset=0, events=0)
    first, count = conn.execute(q.TOPIC_EVENTS, (topic,)).fetchone()
    return TopicInfo(
        name=topic,
        first_offset=first,
        last_offset=row[1],
        events=count,
        max_age=row[2],
        max_events=row[3],
        namespace=row[4],
    )


def offset_at(conn: sqlite3.Connection, topic: str, when: float) -> int:
    """The offset of the last event of ``topic`` published before ``when`` (0: none)."""
    row = conn.execute(q.OFFSET_AT, (topic, when)).fetchone()
    return 0 if row is None else int(row[0])


def trim_cuts(conn: sqlite3.Connection, now: float) -> list[tuple[str, int]]:
    """Per topic with retention, the offset at and below which events may go.

    ``max_events`` keeps the newest that many offsets; ``max_age`` removes what was published
    before ``now - max_age``. Offsets only grow, so a cut read before the deleting transactions
    stays safe while events are appended meanwhile.
    """
    cuts = []
    for name, last, max_age, max_events in conn.execute(q.RETAINED_TOPICS).fetchall():
        cut = 0
        if max_events is not None:
            cut = max(cut, last - max_events)
        if max_age is not None:
            cut = max(cut, offset_at(conn, name, now - max_age))
        if cut > 0:
            cuts.append((name, cut))
    return cuts


def trim_batch(
    conn: sqlite3.Connection, topic: str, after: int, cut: int
) -> tuple[int, int | None]:
    """Delete one batch of events of ``topic`` in ``(after, cut]`` that no live delivery needs
    and every subscription of the topic has matched (at or below its cursor).

    The cursors are read in the deleting transaction, so an event above a cursor is never
    removed, however the cursors moved since the cut was computed. Returns how many were
    deleted and the offset to go on after (None: done).
    """
    (floor,) = conn.execute(q.CURSOR_FLOOR, (topic,)).fetchone()
    if floor is not None:
        cut = min(cut, floor)
    params = {"topic": topic, "after": after, "cut": cut, "limit": _TRIM_BATCH}
    rows = conn.execute(q.TRIM_CANDIDATES, params).fetchall()
    if not rows:
        return 0, None
    doomed = [offset for offset, needed in rows if not needed]
    if doomed:
        conn.execute(q.DELETE_EVENTS, (topic, json.dumps(doomed)))
    return len(doomed), (rows[-1][0] if len(rows) == _TRIM_BATCH else None)


def _topics(conn: sqlite3.Connection, namespace: str | None) -> list[TopicInfo]:
    if namespace is None:
        names = conn.execute(q.TOPIC_NAMES).fetchall()
    else:
        names = conn.execute(q.NAMESPACE_TOPIC_NAMES, (namespace,)).fetchall()
    return [topic_info(conn, name) for (name,) in names]


class SqliteEvents(Connected):
    """The events role (:class:`~cronbus.store.ports.Events`) of the SQLite store."""

    async def append(
        self, topic: str, events: Sequence[NewEvent], now: float, namespace: str = "default"
    ) -> list[Appended]:
        """Append events durably in one transaction; a known id reports its stored offset.
        The first append creates the topic in ``namespace``; a topic of another namespace
        raises :class:`~cronbus.errors.ConflictError`."""
        if not events:
            return []
        quick: Inline = "write" if len(events) <= _INLINE_BATCH else ""
        appended = await self._transact(
            append_events, topic, events, now, namespace, wake=True, inline=quick
        )
        created = sum(1 for a in appended if a.created)
        if created:
            if self.observer is not None:
                self.observer.published(topic, created)
            await self.notify([EVENTS_CHANNEL])
        return appended

    async def read_events(self, topic: str, after: int, limit: int) -> list[EventRecord]:
        """Events of ``topic`` above offset ``after``, in offset order."""
        quick: Inline = "read" if limit <= _INLINE_BATCH else ""
        rows = await self._rows(q.READ_EVENTS, (topic, after, limit), inline=quick)
        return [event_from_row(row) for row in rows]

    async def get_topic(self, topic: str) -> TopicInfo:
        """A topic's offsets and retention (an unknown topic is empty, at offset 0)."""
        return await self._call(topic_info, self._db, topic)

    async def list_topics(self, namespace: str | None = None) -> list[TopicInfo]:
        """Every topic (of ``namespace``; None: of all) with events or settings, by name."""
        return await self._call(_topics, self._db, namespace)

    async def set_retention(
        self,
        topic: str,
        max_age: float | None,
        max_events: int | None,
        namespace: str = "default",
    ) -> None:
        """Keep events of ``topic`` at most ``max_age`` seconds and ``max_events`` (None: any);
        a new topic is created in ``namespace``."""
        params = (topic, max_age, max_events, namespace, time.time())
        await self._transact(execute, q.SET_RETENTION, params)

    async def trim(self, now: float) -> int:
        """Apply every topic's retention, in bounded batches (each its own transaction, so
        publishers interleave); events of live deliveries stay, and so do events above the
        cursor of any subscription of the topic, paused or not. Returns how many were removed."""
        cuts = await self._call(trim_cuts, self._db, now)
        removed = 0
        for topic, cut in cuts:
            after: int | None = 0
            while after is not None:
                deleted, after = await self._transact(trim_batch, topic, after, cut, durable=False)
                removed += deleted
        return removed

    async def offset_at(self, topic: str, when: float) -> int:
        """The offset of the last event of ``topic`` published before ``when`` (0: none)."""
        return await self._call(offset_at, self._db, topic, when, inline="read")
