"""Running a source task: poll, append with positions in one transaction, then tell the task.

Each poll's records become events of the connector's topic; the events, the new position of
each partition, the records that failed for good (tolerance ``all``) and the outcome counts are
written by one fenced store transaction (:meth:`~cronbus.store.connector_ports.ConnectorLeases.
append_from_source`). So a crash before it leaves the positions where they were (the records
are polled again, with the same ids: stored once), and a crash after it loses nothing; an older
generation of the task, fenced by the epoch, writes neither events nor positions. Only then is
:meth:`~cronbus.connectors.api.SourceTask.commit_record` called for each record.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..events.event import make_event
from ..events.records import NewEvent
from ..events.specs import to_new_event
from .api import RecordMetadata, SourceConnector, SourceRecord, SourceTask
from .calls import RETRY, backoff, call, describe, retriable
from .records import Commit, Connector, ConnectorLease, ConnectorTask, NewDeadRecord, TaskCounts
from .runner import LeaseLost, Setting, TaskFailed, TaskRunner, log

_IDS = uuid.UUID("6f1d3c5e-8a62-4c1b-9d43-2b7e0f5a9c11")
"""The namespace of derived event ids (uuid5 of connector, partition and position)."""


class UnreadableRecord(Exception):
    """A record its task could not read (:attr:`SourceRecord.error`)."""


class SourceRunner(TaskRunner):
    """Runs one source task this worker holds."""

    def __init__(
        self,
        setting: Setting,
        lease: ConnectorLease,
        connector: Connector,
        task: ConnectorTask,
        plugin: SourceConnector,
    ) -> None:
        super().__init__(setting, lease, connector, task)
        self.plugin_task: SourceTask = plugin.task()
        self.source = f"/cronbus/connectors/{connector.name}"
        given = task.config.get("poll_seconds")
        self.poll_seconds = (
            float(given) if isinstance(given, (int, float)) and given > 0 else setting.poll_seconds
        )
        """How long an empty poll waits: the connector's ``poll_seconds``, else the worker's."""

    async def run(self) -> None:
        """Poll, append, commit, until stopped."""
        await call(self.plugin_task.start, self.task.config, dict(self.task.positions))
        retried = 0
        while not self.stopping.is_set():
            records, spent = await self._poll()
            retried += spent
            if records is None:
                return
            if not records:
                if not await self.pause(self.poll_seconds):
                    return
                continue
            await self._deliver(records, retried)
            retried = 0

    async def _poll(self) -> tuple[list[SourceRecord] | None, int]:
        """The next records (None: stopping), and how many retries the poll spent."""
        attempt = 0
        while True:
            try:
                return list(await call(self.plugin_task.poll)), attempt
            except Exception as exc:
                attempt += 1
                if not retriable(exc) or attempt > RETRY.retries:
                    raise TaskFailed(f"poll failed: {describe(exc)}") from exc
                log.warning("connector task %s: poll failed (%s); retrying", self.name, exc)
                if not await backoff(attempt, self.stopping):
                    return None, attempt

    async def _deliver(self, records: Sequence[SourceRecord], retried: int) -> None:
        """Append one poll's records and positions in one transaction, then tell the task."""
        events: list[NewEvent] = []
        fates: list[int | BaseException] = []
        dead: list[NewDeadRecord] = []
        positions: dict[str, Any] = {}
        for record in records:
            try:
                if record.error is not None:
                    raise UnreadableRecord(record.error)
                events.append(self._event(record))
                fates.append(len(events) - 1)
            except Exception as exc:
                where = f"record at {record.partition} {_text(record.position)}"
                self.failed_record(where, exc)
                dead.append(
                    NewDeadRecord(
                        record=_record_doc(record), error=describe(exc), partition=record.partition
                    )
                )
                fates.append(exc)
            positions[record.partition] = _checked_position(record)
        commit = Commit(
            positions=positions,
            dead=tuple(dead),
            counts=TaskCounts(delivered=len(events), dead=len(dead), retried=retried),
        )
        appended = await self.stored(
            "appending records",
            self.setting.store.append_from_source,
            self.lease,
            events,
            commit,
            self.setting.clock.now(),
        )
        if appended is None:
            raise LeaseLost(self.name)
        if not self._listens:
            return
        topic = self.connector.spec.topic
        told: list[tuple[SourceRecord, RecordMetadata | None, BaseException | None]] = []
        for record, fate in zip(records, fates, strict=True):
            if isinstance(fate, BaseException):
                told.append((record, None, fate))
            else:
                landed = appended[fate]
                meta = RecordMetadata(
                    topic=topic, offset=landed.offset, id=landed.id, created=landed.created
                )
                told.append((record, meta, None))
        await self._tell(told)

    @property
    def _listens(self) -> bool:
        """Whether the task overrides ``commit_record`` (most sources do not need it)."""
        return type(self.plugin_task).commit_record is not SourceTask.commit_record

    async def _tell(
        self, told: Sequence[tuple[SourceRecord, RecordMetadata | None, BaseException | None]]
    ) -> None:
        """Call ``commit_record`` for each record, in order: awaited when it is ``async``,
        else all of a poll's calls in one thread hop (not one per record)."""
        commit = self.plugin_task.commit_record
        if inspect.iscoroutinefunction(commit):
            for record, meta, error in told:
                try:
                    await commit(record, meta, error)
                except Exception:
                    log.exception("connector task %s: commit_record raised", self.name)
            return

        def tell_all() -> None:
            for record, meta, error in told:
                try:
                    commit(record, meta, error)
                except Exception:
                    # The record's fate is stored already; its bookkeeping is the task's own.
                    log.exception("connector task %s: commit_record raised", self.name)

        await asyncio.to_thread(tell_all)

    def _event(self, record: SourceRecord) -> NewEvent:
        """The store's event for a record (its id derived when the task gave none)."""
        event = make_event(
            record.type,
            record.data,
            source=self.source,
            subject=record.subject,
            id=record.id if record.id is not None else self._derived_id(record),
            key=record.key,
            time=record.time,
        )
        return to_new_event(event)

    def _derived_id(self, record: SourceRecord) -> str:
        where = f"{self.connector.name}\n{record.partition}\n{_text(record.position)}"
        return str(uuid.uuid5(_IDS, where))

    async def close(self) -> None:
        """Stop the plugin's task."""
        try:
            await call(self.plugin_task.stop)
        except Exception:
            log.exception("connector task %s: stop raised", self.name)


def _text(position: Any) -> str:
    """A position as canonical JSON text."""
    return json.dumps(position, sort_keys=True, separators=(",", ":"), default=str)


def _checked_position(record: SourceRecord) -> Any:
    """The record's position, refused (failing the task: a plugin bug) unless it is JSON."""
    try:
        json.dumps(record.position, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TaskFailed(
            f"the position of a record of {record.partition} is not JSON: {describe(exc)}"
        ) from exc
    return record.position


def _record_doc(record: SourceRecord) -> Mapping[str, Any]:
    """A source record as kept in dead letters (values that are not JSON as their repr)."""
    doc = {
        "partition": record.partition,
        "position": record.position,
        "type": record.type,
        "id": record.id,
        "subject": record.subject,
        "key": record.key,
        "time": record.time,
        "data": record.data,
    }
    try:
        json.dumps(doc, allow_nan=False)
    except (TypeError, ValueError):
        doc = {name: _jsonable(value) for name, value in doc.items()}
    return doc


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value
