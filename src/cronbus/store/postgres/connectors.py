"""Connectors in the PostgreSQL store: their definitions, task commands and task leases.

Round trips: a commit (``commit_task``) is one statement in one round trip; an
``append_from_source`` is two (lock the task under its fence and learn its topic; then append,
commit and notify, as :meth:`~.events.PostgresEvents.append` does); a command is two (lock the
connector and its tasks and read their states, for the state machine to decide in Python; then
change them). Commands lock the connector row, then its tasks; a holder's fenced change locks
its task row alone: no two of them lock in opposite orders.

Durability: creates, commands, deletes and appends (users are told they happened) wait for the
server's disk at commit. Leases, releases, failures and a sink's commits do not
(``synchronous_commit`` off): a server crash may lose the last moment of them, all together and
in commit order, which only makes a task take its records again from its last committed
positions (at-least-once, as for subscriptions).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ...connectors.records import (
    JSON,
    Commit,
    Connector,
    ConnectorLease,
    ConnectorSpec,
    ConnectorTask,
    DeadRecord,
    Direction,
    TaskCounts,
    Tolerance,
)
from ...connectors.states import HELD, TaskEvent, TaskState, sources, transition
from ...errors import (
    ConflictError,
    ConnectorExistsError,
    ConnectorNotFoundError,
    InvalidArgumentError,
    InvalidTransitionError,
)
from ...events.records import Appended, NewEvent
from ..connector_ports import CONNECTORS_CHANNEL
from ..fencing import SERVER_CLOCK, LeaseClock
from ..ports import EVENTS_CHANNEL
from . import connectors_sql as q
from . import events_sql
from .connection import Connected, Row
from .events import _append_params  # append's own parameters: one way to append
from .rows import arrays

_COMMANDS = frozenset({TaskEvent.PAUSE, TaskEvent.RESUME, TaskEvent.STOP, TaskEvent.RESTART})
"""The events a user commands; the others are the runtime's (through leases)."""
_KEEPS_ERROR = frozenset(transition(state, TaskEvent.FAIL) for state in sources(TaskEvent.FAIL))
"""The states that keep a task's error (failed): a command out of them clears it."""


class PostgresConnectors(Connected):
    """The connector roles (:class:`~cronbus.store.connector_ports.ConnectorStore`) of the
    PostgreSQL store."""

    lease_clock: LeaseClock = SERVER_CLOCK
    """Whose clock times task leases, as for run leases (:mod:`..fencing`): the server's; tests
    that move time by hand set ``"caller"``."""

    def _lease_now(self, now: float) -> float | None:
        """The ``clock`` parameter of lease statements: None lets the server read its own."""
        return None if self.lease_clock == SERVER_CLOCK else now

    # -- definitions and commands --------------------------------------------------------------
    async def create_connector(
        self, spec: ConnectorSpec, task_configs: Sequence[Mapping[str, JSON]], now: float
    ) -> tuple[Connector, bool]:
        """Create a connector with one ``unassigned`` task per config, decided by the insert:
        the same fingerprint returns the stored one unchanged, another raises
        :class:`~cronbus.errors.ConnectorExistsError`."""
        params = _create_params(spec, task_configs, now)
        # The winner of a race may be deleted before the loser reads it: then insert again.
        while True:
            async with self._db.transaction() as tx:
                creating = await tx.queue(q.CREATE_CONNECTOR, params)
                rows = await tx.rows(q.GET_CONNECTOR, (spec.name,))
                created = bool(_count(await creating.fetchone()))
                if created:
                    tx.nudges.add(CONNECTORS_CHANNEL)
            if not rows:
                continue
            connector, fingerprint = _connector(rows)
            if not created and fingerprint != spec.fingerprint():
                raise ConnectorExistsError(
                    f"connector {spec.name!r} exists with another kind or config; delete it "
                    "first to create it anew"
                )
            return connector, created

    async def get_connector(self, name: str) -> Connector:
        """One connector with its tasks, or :class:`~cronbus.errors.ConnectorNotFoundError`."""
        rows = await self._db.rows(q.GET_CONNECTOR, (name,))
        return _connector(_found(rows, name))[0]

    async def list_connectors(self, namespace: str | None = None) -> list[Connector]:
        """Every connector (of ``namespace``; None: of all) with its tasks, by name."""
        rows = await self._db.rows(q.LIST_CONNECTORS, {"namespace": namespace})
        groups: dict[str, list[Row]] = {}
        for row in rows:
            groups.setdefault(row[0], []).append(row)
        return [_connector(group)[0] for group in groups.values()]

    async def command_tasks(
        self, name: str, event: TaskEvent, now: float, task: int | None = None
    ) -> Connector:
        """Apply a command to every task of a connector (or to task ``task``) through the
        state machine; a task that leaves ``running`` is fenced (holder cleared, epoch
        bumped)."""
        if event not in _COMMANDS:
            raise InvalidArgumentError(
                f"{event!s} is not a command; use pause, resume, stop or restart", field="event"
            )
        async with self._db.transaction() as tx:
            locking = await tx.queue(q.LOCK_CONNECTOR, (name,))
            states = await tx.rows(q.LOCK_TASKS, (name,))
            if await locking.fetchone() is None:
                raise ConnectorNotFoundError(f"no connector named {name!r}")
            changes = _command_rows(name, states, TaskEvent(event), task)
            if changes:
                await tx.queue(
                    q.COMMAND, {**arrays(_COMMAND_COLUMNS, changes), "name": name, "now": now}
                )
                tx.nudges.add(CONNECTORS_CHANNEL)
            reading = await tx.queue(q.GET_CONNECTOR, (name,))
        return _connector(await reading.fetchall())[0]

    async def delete_connector(self, name: str) -> None:
        """Delete a connector with its tasks and dead records; its holders are fenced (their
        next renewal or commit finds no task)."""
        async with self._db.transaction() as tx:
            await tx.queue(q.LOCK_CONNECTOR, (name,))
            await tx.queue(q.LOCK_TASKS, (name,))
            if not await tx.rows(q.DELETE_CONNECTOR, {"name": name}):
                raise ConnectorNotFoundError(f"no connector named {name!r}")
            tx.nudges.add(CONNECTORS_CHANNEL)

    async def list_dead_records(
        self, name: str, limit: int = 100, before: int | None = None
    ) -> list[DeadRecord]:
        """A connector's dead records, newest first (ids below ``before`` when given)."""
        params = {"name": name, "limit": limit, "before": before}
        rows = _found(await self._db.rows(q.LIST_DEAD, params), name)
        return [_dead_record(row) for row in rows if row[0] is not None]

    # -- leases ----------------------------------------------------------------------------------
    async def acquire_connector_tasks(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[ConnectorLease]:
        """Renew ``holder``'s leases (all of them, even beyond ``limit``) and take unassigned
        or expired tasks up to ``limit`` in all, in one statement."""
        params = {
            "holder": holder,
            "now": now,
            "lease": lease_seconds,
            "limit": limit,
            "clock": self._lease_now(now),
        }
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(q.ACQUIRE, params)
        leases = [
            ConnectorLease(
                connector=connector, task=index, holder=holder, epoch=epoch, expires_at=expires
            )
            for connector, index, epoch, expires in rows
        ]
        return sorted(leases, key=lambda lease: (lease.connector, lease.task))

    async def release_connector_tasks(self, leases: Sequence[ConnectorLease], now: float) -> None:
        """Give tasks still held by ``leases`` back (``running`` → ``unassigned``) and wake
        the workers that look for tasks."""
        if not leases:
            return
        rows = [(lease.connector, lease.task, lease.holder, lease.epoch) for lease in leases]
        params = {**arrays(_LEASE_COLUMNS, rows), "now": now}
        async with self._db.transaction(durable=False) as tx:
            if await tx.rows(q.RELEASE, params):
                tx.nudges.add(CONNECTORS_CHANNEL)

    async def fail_connector_task(self, lease: ConnectorLease, error: str, now: float) -> bool:
        """``running`` → ``failed`` with ``error``, if the lease still holds."""
        async with self._db.transaction(durable=False) as tx:
            failing = await tx.queue(q.FAIL, {**_held(lease), "error": error, "now": now})
        return await failing.fetchone() is not None

    async def append_from_source(
        self, lease: ConnectorLease, events: Sequence[NewEvent], commit: Commit, now: float
    ) -> list[Appended] | None:
        """Append ``events`` to the connector's topic and apply ``commit`` in one transaction,
        if the lease still holds (None, nothing written, otherwise).

        The task row stays locked from the fence to the commit, so no command, takeover or
        delete comes between; the append is :meth:`~.events.PostgresEvents.append`'s own SQL.
        """
        if not events:
            async with self._db.transaction() as tx:
                committing = await tx.queue(q.COMMIT, _commit_params(lease, commit, now))
            return [] if _count(await committing.fetchone()) else None
        async with self._db.transaction() as tx:
            where = await tx.rows(q.LOCK_HELD, _held(lease))
            if not where:
                return None
            topic, namespace = where[0]
            await tx.queue(
                events_sql.LOCK_TOPIC, {"topic": topic, "namespace": namespace, "now": now}
            )
            append = {**_append_params(topic, events, now), "namespace": namespace}
            appending = await tx.queue(events_sql.APPEND, append)
            await tx.queue(q.COMMIT, _commit_params(lease, commit, now, topic, namespace))
            tx.nudges.add(EVENTS_CHANNEL)
        rows = await appending.fetchall()
        owner = rows[0][2]
        if owner != namespace:
            raise ConflictError(f"topic {topic!r} belongs to namespace {owner!r}")
        return [
            Appended(id=event.id, offset=offset, created=created)
            for event, (offset, created, _) in zip(events, rows, strict=True)
        ]

    async def commit_task(self, lease: ConnectorLease, commit: Commit, now: float) -> bool:
        """Apply ``commit`` in one statement, if the lease still holds."""
        async with self._db.transaction(durable=False) as tx:
            committing = await tx.queue(q.COMMIT, _commit_params(lease, commit, now))
        return bool(_count(await committing.fetchone()))


# -- parameters ----------------------------------------------------------------------------------
def _create_params(
    spec: ConnectorSpec, task_configs: Sequence[Mapping[str, JSON]], now: float
) -> dict[str, Any]:
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "kind": spec.kind,
        "direction": spec.direction.value,
        "topic": spec.topic,
        "config": Jsonb(dict(spec.config)),
        "tolerance": spec.tolerance.value,
        "max_tasks": spec.max_tasks,
        "fingerprint": spec.fingerprint(),
        "configs": [json.dumps(dict(config)) for config in task_configs],
        "now": now,
    }


def _command_rows(
    name: str, states: Sequence[Row], event: TaskEvent, task: int | None
) -> list[Row]:
    """``COMMAND``'s rows: the tasks ``event`` applies to (all of them, or task ``task``),
    each with its new state, whether it keeps its holder, its epoch bump (it leaves
    ``running``, or restarts) and whether its error is cleared (it is kept only while
    ``failed``). Tasks the event is not allowed for are skipped, unless named."""
    if task is not None and task not in {index for index, _ in states}:
        raise InvalidArgumentError(f"connector {name!r} has no task {task}", field="task")
    allowed = sources(event)
    rows: list[Row] = []
    for index, state in states:
        old = TaskState(state)
        if task is not None and index != task:
            continue
        if old not in allowed and task is None:
            continue
        try:
            new = transition(old, event)
        except InvalidTransitionError as exc:
            raise InvalidTransitionError(f"connector {name!r} task {index}: {exc}") from None
        bump = old in HELD or event is TaskEvent.RESTART
        rows.append((index, new.value, new in HELD, int(bump), new not in _KEEPS_ERROR))
    return rows


def _held(lease: ConnectorLease) -> dict[str, Any]:
    """The fence: the lease's task, holder and epoch."""
    return {
        "connector": lease.connector,
        "task": lease.task,
        "holder": lease.holder,
        "epoch": lease.epoch,
    }


def _commit_params(
    lease: ConnectorLease,
    commit: Commit,
    now: float,
    topic: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """``COMMIT``'s parameters; with ``topic``, it applies only if the topic is the
    connector's namespace's (as the append that precedes it)."""
    dead = [(d.partition, d.offset, json.dumps(dict(d.record)), d.error) for d in commit.dead]
    return {
        **_held(lease),
        **arrays(_DEAD_COLUMNS, dead),
        "positions": Jsonb(dict(commit.positions)),
        "delivered": commit.counts.delivered,
        "dead": commit.counts.dead,
        "retried": commit.counts.retried,
        "topic": topic,
        "namespace": namespace,
        "now": now,
    }


# -- rows ----------------------------------------------------------------------------------------
def _count(row: Row | None) -> int:
    return int(row[0]) if row else 0


def _found(rows: list[Row], name: str) -> list[Row]:
    if not rows:
        raise ConnectorNotFoundError(f"no connector named {name!r}")
    return rows


def _connector(rows: Sequence[Row]) -> tuple[Connector, str]:
    """A connector from its rows of ``GET_CONNECTOR`` (one per task), with its stored
    fingerprint (jsonb may not give the config back byte for byte)."""
    head = rows[0]
    name, namespace, kind, direction, topic, config, tolerance, max_tasks = head[:8]
    fingerprint, created_at, updated_at = head[8:11]
    spec = ConnectorSpec(
        name=name,
        kind=kind,
        direction=Direction(direction),
        topic=topic,
        config=config,
        tolerance=Tolerance(tolerance),
        max_tasks=max_tasks,
        namespace=namespace,
    )
    tasks = tuple(_task(name, row[11:]) for row in rows if row[11] is not None)
    connector = Connector(spec=spec, tasks=tasks, created_at=created_at, updated_at=updated_at)
    return connector, fingerprint


def _task(connector: str, row: Row) -> ConnectorTask:
    index, config, state, holder, expires, epoch, error, positions = row[:8]
    delivered, dead, retried, updated_at = row[8:12]
    return ConnectorTask(
        connector=connector,
        index=index,
        config=config,
        state=TaskState(state),
        holder=holder,
        lease_expires_at=expires,
        epoch=epoch,
        error=error,
        counts=TaskCounts(delivered=delivered, dead=dead, retried=retried),
        positions=positions,
        updated_at=updated_at,
    )


def _dead_record(row: Row) -> DeadRecord:
    record_id, connector, task, record, error, partition, offset, created_at = row
    return DeadRecord(
        id=record_id,
        connector=connector,
        task=task,
        record=record,
        error=error,
        partition=partition,
        offset=offset,
        created_at=created_at,
    )


_COMMAND_COLUMNS = ("task", "state", "keep", "bump", "clear")
_LEASE_COLUMNS = ("connector", "task", "holder", "epoch")
_DEAD_COLUMNS = ("partition", "offset", "record", "error")
