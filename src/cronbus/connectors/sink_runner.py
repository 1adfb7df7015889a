"""Running a sink task: read the topic, put, flush, and only then commit the position.

The task reads its connector's topic from its committed offset, in offset order. With several
tasks, task ``i`` of ``n`` takes the events whose ordering key (the key, else the subject, else
the id) hashes to ``i``, so each key stays in order within one task. For each batch: ``put``
answers one outcome per record; records refused with a
:class:`~cronbus.connectors.api.RetriableError` are put again after a backoff; ``flush`` makes
the batch durable (a :class:`~cronbus.connectors.api.RecordErrors` names the records whose
final write failed, any other error fails every record put since the last flush). Records that
fail for good fail the task (tolerance ``none``) or go to the connector's dead letters
(tolerance ``all``), final writes included. The new offset, the dead records and the counts are
then committed in one fenced transaction: a crash before it repeats the batch (at least once:
sinks deduplicate by event id), never skips it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..errors import ConflictError
from ..events.event import Event
from ..events.records import EventRecord
from ..events.targets import to_event
from .api import RecordErrors, SinkConnector, SinkTask
from .calls import RETRY, backoff, call, describe, retriable
from .records import Commit, Connector, ConnectorLease, ConnectorTask, NewDeadRecord, TaskCounts
from .runner import LeaseLost, Setting, TaskFailed, TaskRunner, log


class SinkRunner(TaskRunner):
    """Runs one sink task this worker holds."""

    def __init__(
        self,
        setting: Setting,
        lease: ConnectorLease,
        connector: Connector,
        task: ConnectorTask,
        plugin: SinkConnector,
    ) -> None:
        super().__init__(setting, lease, connector, task)
        self.plugin_task: SinkTask = plugin.task()
        self.topic = connector.spec.topic
        self.tasks = max(1, len(connector.tasks))
        self.position = int(task.positions.get(self.topic, 0))
        self._flush_to = self.position

    async def run(self) -> None:
        """Read, put, flush, commit, until stopped."""
        await self._check_namespace()
        await call(self.plugin_task.start, self.task.config)
        while not self.stopping.is_set():
            batch = await self.stored(
                "reading the topic",
                self.setting.events.read_events,
                self.topic,
                self.position,
                self.setting.batch,
            )
            if not batch:
                if not await self.pause(self.setting.poll_seconds):
                    return
                continue
            mine = [to_event(record) for record in batch if self._mine(record)]
            self._flush_to = batch[-1].offset
            dead, retried = await self._write(mine) if mine else ([], 0)
            await self._commit(batch[-1].offset, len(mine), dead, retried)

    async def _check_namespace(self) -> None:
        """Fail unless the topic is the connector's namespace's, by the subscriptions' rule
        (checked at create too; again here for a sink defined before that check existed)."""
        from ..services.subscription_rules import topic_of  # services import connectors

        try:
            await topic_of(
                self.setting.events, self.topic, self.connector.spec.namespace, "a connector"
            )
        except ConflictError as exc:
            raise TaskFailed(str(exc)) from exc

    def _mine(self, record: EventRecord) -> bool:
        """Whether this task takes ``record`` (its key's share of the topic)."""
        if self.tasks == 1:
            return True
        key = record.order_key or record.id
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.tasks == self.task.index

    async def _write(self, records: Sequence[Event]) -> tuple[list[NewDeadRecord], int]:
        """Put and flush ``records`` until each is written or failed for good; returns the
        dead records and the retries spent."""
        dead: list[NewDeadRecord] = []
        retried = 0
        pending = list(records)
        attempt = 0
        while pending:
            failures = await self._put_and_flush(pending)
            again = [r for r in pending if r.id in failures and retriable(failures[r.id])]
            if again and attempt < RETRY.retries:
                attempt += 1
                retried += len(again)
                log.warning(
                    "connector task %s: %d record(s) failed (%s); retrying",
                    self.name,
                    len(again),
                    describe(failures[again[0].id]),
                )
                if not await backoff(attempt, self.stopping):
                    raise LeaseLost(self.name)
            else:
                again = []
            retrying = {r.id for r in again}
            for record in pending:
                error = failures.get(record.id)
                if error is not None and record.id not in retrying:
                    self.failed_record(f"event {record.id} (offset {record.offset})", error)
                    dead.append(
                        NewDeadRecord(
                            record=record.to_cloudevent(),
                            error=describe(error),
                            offset=record.offset,
                        )
                    )
            pending = again
        return dead, retried

    async def _put_and_flush(self, records: Sequence[Event]) -> dict[str, BaseException]:
        """One put and one flush; the failures by event id."""
        failures: dict[str, BaseException] = {}
        try:
            outcomes = list(await call(self.plugin_task.put, records))
        except Exception as exc:
            outcomes = [exc] * len(records)
        if len(outcomes) != len(records):
            raise TaskFailed(f"put answered {len(outcomes)} outcomes for {len(records)} records")
        for record, outcome in zip(records, outcomes, strict=True):
            if outcome is not None:
                failures[record.id] = outcome
        written = [r for r in records if r.id not in failures]
        if written:
            try:
                await call(self.plugin_task.flush, {self.topic: self._flush_to})
            except RecordErrors as partial:
                ids = {r.id for r in written}
                failures.update((i, e) for i, e in partial.errors.items() if i in ids)
            except Exception as exc:
                failures.update((r.id, exc) for r in written)
        return failures

    async def _commit(
        self, offset: int, taken: int, dead: Sequence[NewDeadRecord], retried: int
    ) -> None:
        commit = Commit(
            positions={self.topic: offset},
            dead=tuple(dead),
            counts=TaskCounts(delivered=taken - len(dead), dead=len(dead), retried=retried),
        )
        held = await self.stored(
            "committing the position",
            self.setting.store.commit_task,
            self.lease,
            commit,
            self.setting.clock.now(),
        )
        if not held:
            raise LeaseLost(self.name)
        self.position = offset

    async def close(self) -> None:
        """Stop the plugin's task."""
        try:
            await call(self.plugin_task.stop)
        except Exception:
            log.exception("connector task %s: stop raised", self.name)
