"""Connectors in the SQLite store: their definitions, task commands, task leases and commits.

Durability: what users are told has happened (a create, a command, a delete) commits at the
store's ``synchronous`` level, and so does :func:`append_from_source`, which appends events
users will read, like a publish. A worker's bookkeeping (leases, a sink's commits) commits
relaxed, like a dispatcher's: a commit lost in a power cut only moves a sink back to positions it
had already passed, and delivery is at-least-once.

Choices the contract leaves open:

- The fence is the lease's holder and epoch on a ``running`` task. A holder whose lease ran out
  but was not taken over still passes (and renews it, epoch unchanged), as with subscriptions.
- Positions are merged in Python inside the transaction, not with ``json_patch``: a partition's
  new position replaces the stored one whole, even when both are JSON objects.
- A task's error says why it failed, so it is kept only while the task is ``failed``: every
  command that changes the task (none leads to ``failed``) clears it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from ...connectors.records import (
    JSON,
    Commit,
    Connector,
    ConnectorLease,
    ConnectorSpec,
    DeadRecord,
)
from ...connectors.states import HELD, TaskEvent, TaskState, transition
from ...errors import (
    ConnectorExistsError,
    ConnectorNotFoundError,
    InvalidArgumentError,
    InvalidTransitionError,
)
from ...events.records import Appended, NewEvent
from ..connector_ports import CONNECTORS_CHANNEL
from ..ports import EVENTS_CHANNEL
from . import connectors_sql as q
from .connection import Connected, Inline
from .events import append_events

_COMMANDS = frozenset({TaskEvent.PAUSE, TaskEvent.RESUME, TaskEvent.STOP, TaskEvent.RESTART})
_INLINE_BATCH = 16
"""Appends of at most this many events may run on the event loop's thread."""


def no_connector(name: str) -> ConnectorNotFoundError:
    """The error for an unknown connector name."""
    return ConnectorNotFoundError(f"no connector named {name!r}")


def get_connector(conn: sqlite3.Connection, name: str) -> Connector:
    """One connector with its tasks."""
    found = q.connectors_from_rows(conn.execute(q.GET_CONNECTOR, (name,)).fetchall())
    if not found:
        raise no_connector(name)
    return found[0]


def create_connector(
    conn: sqlite3.Connection,
    spec: ConnectorSpec,
    task_configs: Sequence[Mapping[str, JSON]],
    now: float,
) -> tuple[Connector, bool]:
    """Insert the connector and its tasks; the insert decides between concurrent creates (the
    write lock is held from the insert to the read that follows)."""
    if not conn.execute(q.CREATE_CONNECTOR, q.connector_params(spec, now)).rowcount:
        (fingerprint,) = conn.execute(q.FINGERPRINT, (spec.name,)).fetchone()
        if fingerprint != spec.fingerprint():
            raise ConnectorExistsError(
                f"connector {spec.name!r} exists with another kind or config: delete it first,"
                " or create it under another name"
            )
        return get_connector(conn, spec.name), False
    conn.executemany(q.INSERT_TASK, q.task_params(spec.name, task_configs, now))
    return get_connector(conn, spec.name), True


def command_tasks(
    conn: sqlite3.Connection, name: str, event: TaskEvent, now: float, task: int | None
) -> Connector:
    """Apply a command to every task (skipping those it does not apply to) or to one."""
    states = {index: TaskState(state) for index, state in conn.execute(q.TASK_STATES, (name,))}
    if not states and conn.execute(q.CONNECTOR_EXISTS, (name,)).fetchone() is None:
        raise no_connector(name)
    if task is not None and task not in states:
        raise InvalidArgumentError(f"connector {name!r} has no task {task}", field="task")
    changes = []
    for index, state in states.items():
        if task is not None and index != task:
            continue
        try:
            after = transition(state, event)
        except InvalidTransitionError as exc:
            if task is not None:
                raise InvalidTransitionError(f"connector {name!r} task {index}: {exc}") from None
            continue
        changes.append(_command_params(name, index, state, after, event, now))
    conn.executemany(q.COMMAND_TASK, changes)
    if changes:
        conn.execute(q.TOUCH_CONNECTOR, (now, name))
    return get_connector(conn, name)


def _command_params(
    name: str, index: int, before: TaskState, after: TaskState, event: TaskEvent, now: float
) -> dict[str, Any]:
    held = after in HELD
    bump = (before in HELD and not held) or event is TaskEvent.RESTART
    return {
        "connector": name,
        "task": index,
        "state": after.value,
        "held": int(held),
        "bump": int(bump),
        "now": now,
    }


def delete_connector(conn: sqlite3.Connection, name: str) -> None:
    """Delete a connector, its tasks (positions and leases with them) and its dead records."""
    if not conn.execute(q.DELETE_CONNECTOR, (name,)).rowcount:
        raise no_connector(name)
    conn.execute(q.DELETE_TASKS, (name,))
    conn.execute(q.DELETE_DEAD, (name,))


def list_dead_records(
    conn: sqlite3.Connection, name: str, limit: int, before: int | None
) -> list[DeadRecord]:
    """A connector's dead records, newest first."""
    if conn.execute(q.CONNECTOR_EXISTS, (name,)).fetchone() is None:
        raise no_connector(name)
    params = {"name": name, "limit": limit, "before": before}
    return [q.dead_from_row(row) for row in conn.execute(q.LIST_DEAD, params)]


def acquire_tasks(
    conn: sqlite3.Connection, holder: str, now: float, expires: float, limit: int
) -> list[ConnectorLease]:
    """Renew every lease of ``holder``, then take tasks while below ``limit``."""
    held = conn.execute(q.RENEW_TASKS, {"holder": holder, "expires": expires}).fetchall()
    room = limit - len(held)
    if room > 0:
        params = {"holder": holder, "now": now, "expires": expires, "limit": room}
        held.extend(conn.execute(q.TAKE_TASKS, params).fetchall())
    return [
        ConnectorLease(connector=name, task=task, holder=holder, epoch=epoch, expires_at=expires)
        for name, task, epoch in sorted(held)
    ]


def _lease_params(lease: ConnectorLease, now: float) -> dict[str, Any]:
    return {
        "connector": lease.connector,
        "task": lease.task,
        "holder": lease.holder,
        "epoch": lease.epoch,
        "now": now,
    }


def fail_task(conn: sqlite3.Connection, lease: ConnectorLease, error: str, now: float) -> bool:
    """``running`` → ``failed`` with ``error``, if the lease holds."""
    return bool(conn.execute(q.FAIL_TASK, {**_lease_params(lease, now), "error": error}).rowcount)


def commit_task(
    conn: sqlite3.Connection, lease: ConnectorLease, commit: Commit, now: float
) -> bool:
    """Merge positions, add counts and dead records, if the lease holds."""
    fence = conn.execute(q.FENCE, _lease_params(lease, now)).fetchone()
    if fence is None:
        return False
    _apply(conn, lease, fence[2], commit, now)
    return True


def append_from_source(
    conn: sqlite3.Connection,
    lease: ConnectorLease,
    events: Sequence[NewEvent],
    commit: Commit,
    now: float,
) -> list[Appended] | None:
    """Append events to the connector's topic and apply ``commit``, if the lease holds (a
    topic of another namespace raises, which rolls the whole transaction back)."""
    fence = conn.execute(q.FENCE, _lease_params(lease, now)).fetchone()
    if fence is None:
        return None
    topic, namespace, positions = fence
    appended = append_events(conn, topic, events, now, namespace) if events else []
    _apply(conn, lease, positions, commit, now)
    return appended


def _apply(
    conn: sqlite3.Connection, lease: ConnectorLease, stored: str, commit: Commit, now: float
) -> None:
    counts = commit.counts
    params = {
        "connector": lease.connector,
        "task": lease.task,
        "positions": q.merged(stored, commit.positions),
        "delivered": counts.delivered,
        "dead": counts.dead,
        "retried": counts.retried,
        "now": now,
    }
    conn.execute(q.APPLY_COMMIT, params)
    conn.executemany(q.INSERT_DEAD, q.dead_params(lease.connector, lease.task, commit.dead, now))


class SqliteConnectors(Connected):
    """The connector roles (:class:`~cronbus.store.connector_ports.ConnectorStore`) of the
    SQLite store."""

    async def create_connector(
        self, spec: ConnectorSpec, task_configs: Sequence[Mapping[str, JSON]], now: float
    ) -> tuple[Connector, bool]:
        """Create a connector with one unassigned task per config; the same fingerprint again
        is a no-op (``False``), another raises :class:`~cronbus.errors.ConnectorExistsError`."""
        connector, created = await self._transact(
            create_connector, spec, task_configs, now, wake=True, inline="write"
        )
        if created:
            await self.notify([CONNECTORS_CHANNEL])
        return connector, created

    async def get_connector(self, name: str) -> Connector:
        """One connector with its tasks, or :class:`~cronbus.errors.ConnectorNotFoundError`."""
        return await self._call(get_connector, self._db, name, inline="read")

    async def list_connectors(self, namespace: str | None = None) -> list[Connector]:
        """Every connector (of ``namespace``) with its tasks, by name."""
        rows = await self._rows(q.LIST_CONNECTORS, {"namespace": namespace})
        return q.connectors_from_rows(rows)

    async def command_tasks(
        self, name: str, event: TaskEvent, now: float, task: int | None = None
    ) -> Connector:
        """Pause, resume, stop or restart every task of a connector, or task ``task``."""
        if event not in _COMMANDS:
            raise InvalidArgumentError(
                f"{event.value!r} is not a task command: use pause, resume, stop or restart",
                field="event",
            )
        connector = await self._transact(
            command_tasks, name, event, now, task, wake=True, inline="write"
        )
        await self.notify([CONNECTORS_CHANNEL])
        return connector

    async def delete_connector(self, name: str) -> None:
        """Delete a connector with its tasks, positions and dead records."""
        await self._transact(delete_connector, name, wake=True, inline="write")
        await self.notify([CONNECTORS_CHANNEL])

    async def list_dead_records(
        self, name: str, limit: int = 100, before: int | None = None
    ) -> list[DeadRecord]:
        """A connector's dead records, newest first (ids below ``before`` when given)."""
        return await self._call(list_dead_records, self._db, name, limit, before)

    async def acquire_connector_tasks(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[ConnectorLease]:
        """Renew ``holder``'s leases and take tasks up to ``limit`` in all, oldest first."""
        expires = now + lease_seconds
        return await self._transact(
            acquire_tasks, holder, now, expires, limit, durable=False, inline="write"
        )

    async def release_connector_tasks(self, leases: Sequence[ConnectorLease], now: float) -> None:
        """Give tasks back: each still held by its lease goes ``unassigned``."""
        if not leases:
            return
        rows = [_lease_params(lease, now) for lease in leases]
        await self._transact(_release, rows, durable=False, inline="write")

    async def fail_connector_task(self, lease: ConnectorLease, error: str, now: float) -> bool:
        """``running`` → ``failed`` with ``error``; False if the lease no longer holds."""
        return await self._transact(fail_task, lease, error, now, durable=False, inline="write")

    async def append_from_source(
        self, lease: ConnectorLease, events: Sequence[NewEvent], commit: Commit, now: float
    ) -> list[Appended] | None:
        """Append events to the connector's topic and apply ``commit`` in one durable
        transaction; None (nothing written) if the lease no longer holds."""
        quick: Inline = "write" if len(events) <= _INLINE_BATCH else ""
        appended = await self._transact(
            append_from_source, lease, events, commit, now, wake=True, inline=quick
        )
        if appended is not None and any(a.created for a in appended):
            await self.notify([EVENTS_CHANNEL])
        return appended

    async def commit_task(self, lease: ConnectorLease, commit: Commit, now: float) -> bool:
        """Apply ``commit`` if the lease still holds; False (nothing done) otherwise."""
        return await self._transact(commit_task, lease, commit, now, durable=False, inline="write")


def _release(conn: sqlite3.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    conn.executemany(q.RELEASE_TASK, rows)
