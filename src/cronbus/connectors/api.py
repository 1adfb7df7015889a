"""The connector API: what a source or a sink plugin implements.

A **source** moves records from another system into a topic. Its connector validates a config
and splits it into task configs; each task polls records, each with the *partition* of the
source it came from (a table, a file) and the *position* in that partition just after it. The
runtime appends a poll's records to the topic and stores their positions **in one store
transaction**, then calls :meth:`SourceTask.commit_record` once per record with the offset it
got (or with the failure). A task restarted anywhere resumes from the stored positions, so
between the source and the topic nothing is skipped or written twice.

A **sink** moves events from a topic to another system. Each task receives batches of records
in topic order (:meth:`SinkTask.put`) and answers each record's outcome; the runtime stores the
task's position only after :meth:`SinkTask.flush` made every put record durable. A record that
fails for good goes to the connector's dead letters (tolerance ``all``) or fails the task
(tolerance ``none``); failures raised as :class:`RetriableError` are retried with backoff first,
those of the final write (``flush``) included.

Methods may be plain or ``async``: the runtime runs plain ones in a thread, so a blocking
driver (``sqlite3``, ``psycopg``'s sync API, file I/O) never stalls the worker's event loop.
``docs/connectors.md`` is the guide to writing one.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..events.event import Event

JSON = Any
"""A JSON-serialisable value (configs, positions, record data)."""

Config = Mapping[str, JSON]
"""A connector's or a task's config: a JSON object."""


class RetriableError(Exception):
    """A failure worth trying again (a timeout, a connection reset, a lock): the runtime retries
    the record or the flush with backoff before it counts as failed."""


class TaskError(Exception):
    """A failure that is not one record's: the other system is gone or refuses every record
    (a webhook answering 410 Gone, revoked credentials). Raised by any method or returned
    as a record's outcome, it fails the task whatever its tolerance, saying why, instead of
    sending every record after it to dead letters; ``connectors restart`` tries again."""


class RecordErrors(Exception):
    """Raised by :meth:`SinkTask.flush` when the final write failed for some records only:
    ``errors`` maps each failed record's event id to why (a :class:`RetriableError` is tried
    again); every other record put since the last flush is durable."""

    def __init__(self, errors: Mapping[str, BaseException]) -> None:
        self.errors = dict(errors)
        super().__init__(f"{len(self.errors)} record(s) failed in the final write")


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRecord:
    """One record a source task polled: the event to append, and where the source is after it.

    ``id`` is the event's id and the topic's idempotency key (an id already in the topic is
    stored once); leave it None to derive it from the connector, the partition and the
    position, which is stable across restarts.
    """

    partition: str
    """The part of the source this record comes from (a table, a file); positions are kept per
    partition."""
    position: JSON
    """Where the source's ``partition`` is just after this record (JSON; compared by nobody but
    the task: it gets the last committed one back in :meth:`SourceTask.start`)."""
    data: JSON
    type: str
    id: str | None = None
    subject: str | None = None
    key: str | None = None
    """The ordering key of the event (``ordered`` subscriptions keep order per key)."""
    time: float | None = None
    """The event's time (seconds since the epoch); None: when it is appended."""
    error: str | None = None
    """Why the task could not read this record (a line that is not JSON, say): the runtime
    treats it as a bad record, never appended: with tolerance ``all`` it goes to the
    connector's dead letters (``data`` holding what was read) and the position moves past it;
    with ``none`` the task fails saying why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordMetadata:
    """Where a source record landed: its topic and offset; ``created`` is False when an event
    with its id was in the topic already (it was stored once)."""

    topic: str
    offset: int
    id: str
    created: bool


SinkRecord = Event
"""What a sink task receives: an :class:`~cronbus.events.event.Event` as stored in its topic
(``topic``, ``offset`` and ``published_at`` set); ``to_cloudevent()`` gives its structured
CloudEvent JSON."""


class SourceTask(abc.ABC):
    """One unit of a source connector's work, run by one worker at a time."""

    def start(self, config: Config, positions: Mapping[str, JSON]) -> Awaitable[None] | None:
        """Open what the task reads, given its config and the last committed position of each
        partition it wrote before (empty on the first start)."""
        return None

    @abc.abstractmethod
    def poll(self) -> Sequence[SourceRecord] | Awaitable[Sequence[SourceRecord]]:
        """Records that are ready, oldest first (empty: none now; the runtime polls again after
        the connector's ``poll_seconds``). Raising fails the poll: it is retried with backoff,
        and with tolerance ``none`` a non-retriable error fails the task."""

    def commit_record(
        self, record: SourceRecord, metadata: RecordMetadata | None, error: BaseException | None
    ) -> Awaitable[None] | None:
        """Called once per polled record after its fate is stored: with ``metadata`` when it is
        in the topic (its position committed in the same transaction), or with ``error`` when
        it went to the connector's dead letters instead."""
        return None

    def stop(self) -> Awaitable[None] | None:
        """Close what :meth:`start` opened (also called after a failure)."""
        return None


class SinkTask(abc.ABC):
    """One unit of a sink connector's work, run by one worker at a time."""

    def start(self, config: Config) -> Awaitable[None] | None:
        """Open what the task writes to."""
        return None

    @abc.abstractmethod
    def put(
        self, records: Sequence[SinkRecord]
    ) -> Sequence[BaseException | None] | Awaitable[Sequence[BaseException | None]]:
        """Write (or buffer) ``records``, in topic order; answer one outcome per record: None
        when it was taken, or the exception that refused it (a :class:`RetriableError` is put
        again after a backoff; any other is a bad record). Raising fails the whole batch."""

    def flush(self, positions: Mapping[str, int]) -> Awaitable[None] | None:
        """Make every record put so far durable; ``positions`` is what the runtime will commit
        next (topic → offset). Raise :class:`RecordErrors` when some records failed and the
        others are durable. Raising :class:`RetriableError` retries the flush with backoff; any
        other error counts against every record put since the last flush (dead letters with
        tolerance ``all``), so a failing final write is never silently lost."""
        return None

    def stop(self) -> Awaitable[None] | None:
        """Close what :meth:`start` opened (also called after a failure)."""
        return None


class Connector(abc.ABC):
    """What both kinds share: validating a config and splitting it into task configs."""

    kind: ClassVar[str]
    """The name users give ``--kind`` (``sql-source``); unique among registered connectors."""

    def validate(self, config: Config) -> dict[str, JSON]:
        """Check ``config`` and return it normalised (defaults filled in); raise
        :class:`~cronbus.errors.ConnectorConfigError` naming the field that is wrong."""
        return dict(config)

    def task_configs(self, config: Config, max_tasks: int) -> list[dict[str, JSON]]:
        """Split a validated config into at most ``max_tasks`` task configs (one by default)."""
        return [dict(config)]


class SourceConnector(Connector):
    """A connector that reads another system into a topic (its config names the ``topic``)."""

    @abc.abstractmethod
    def task(self) -> SourceTask:
        """A new, unstarted task."""


class SinkConnector(Connector):
    """A connector that writes a topic's events to another system (its config names the
    ``topic`` it reads)."""

    @abc.abstractmethod
    def task(self) -> SinkTask:
        """A new, unstarted task."""
