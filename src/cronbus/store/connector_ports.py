"""The store's connector roles: definitions and task commands, and the task leases the
connector runtime runs on (fenced by an epoch, like subscriptions' pushers).

Both backends implement :class:`ConnectorStore`; the contract tests
(``tests/contract/test_connectors_store.py``) run unchanged against each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..connectors.records import (
    JSON,
    Commit,
    Connector,
    ConnectorLease,
    ConnectorSpec,
    DeadRecord,
)
from ..connectors.states import TaskEvent
from ..events.records import Appended, NewEvent

CONNECTORS_CHANNEL = "cronbus_connectors"
"""The wake-up channel told when a connector is created or its tasks change state, so idle
workers look for tasks at once (polling stays the safety net)."""


class Connectors(Protocol):
    """Connector definitions and the commands on their tasks."""

    async def create_connector(
        self, spec: ConnectorSpec, task_configs: Sequence[Mapping[str, JSON]], now: float
    ) -> tuple[Connector, bool]:
        """Create a connector with one ``unassigned`` task per config (indexes 0, 1, …).

        Decided by the insert (no race between two creates): a connector of that name with
        the same :meth:`~ConnectorSpec.fingerprint` is returned unchanged with ``False``; one
        with another raises :class:`~cronbus.errors.ConnectorExistsError` and changes nothing.
        Returns the connector and whether it was created.
        """

    async def get_connector(self, name: str) -> Connector:
        """One connector with its tasks, or :class:`~cronbus.errors.ConnectorNotFoundError`."""

    async def list_connectors(self, namespace: str | None = None) -> list[Connector]:
        """Every connector (of ``namespace``; None: of all) with its tasks, by name."""

    async def command_tasks(
        self, name: str, event: TaskEvent, now: float, task: int | None = None
    ) -> Connector:
        """Apply ``pause``, ``resume``, ``stop`` or ``restart`` to every task of a connector
        (or to task ``task``), through the state machine.

        A task for which the event is not allowed keeps its state (resuming a running task
        does nothing); naming one such task raises
        :class:`~cronbus.errors.InvalidTransitionError`. A task that leaves ``running`` loses
        its holder and its epoch is bumped, so the old holder is fenced from its next commit;
        ``restart`` also clears the task's error. Raises
        :class:`~cronbus.errors.ConnectorNotFoundError` for an unknown connector, and
        :class:`~cronbus.errors.InvalidArgumentError` for an unknown task index or an event
        that is not a command (``assign``, ``lose``, ``fail``).
        """

    async def delete_connector(self, name: str) -> None:
        """Delete a connector with its tasks, positions and dead records (its holders are
        fenced: their next renewal or commit finds nothing)."""

    async def list_dead_records(
        self, name: str, limit: int = 100, before: int | None = None
    ) -> list[DeadRecord]:
        """A connector's dead records, newest first (ids below ``before`` when given)."""


class ConnectorLeases(Protocol):
    """Task leases: which worker runs which connector task, fenced by the task's epoch."""

    async def acquire_connector_tasks(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[ConnectorLease]:
        """Renew ``holder``'s leases and take tasks up to ``limit`` in all, oldest first.

        A task is taken when it is ``unassigned``, or ``running`` with a lease that ran out
        (its holder is lost: ``lose`` then ``assign``). Taking bumps the epoch. Returns every
        lease ``holder`` now has (a task paused, stopped, restarted or deleted since is no
        longer among them: its worker stops it).
        """

    async def release_connector_tasks(self, leases: Sequence[ConnectorLease], now: float) -> None:
        """Give tasks back (a worker stopping): each still held by the lease goes ``running``
        → ``unassigned`` so another worker takes it at once."""

    async def fail_connector_task(self, lease: ConnectorLease, error: str, now: float) -> bool:
        """Record that the task failed (``running`` → ``failed``) and why; False (nothing
        done) if the lease no longer holds."""

    async def append_from_source(
        self, lease: ConnectorLease, events: Sequence[NewEvent], commit: Commit, now: float
    ) -> list[Appended] | None:
        """Append a source task's events to its connector's topic (in the connector's
        namespace) and apply ``commit`` (positions, dead records, counts), in **one**
        transaction: None, and nothing written, if the lease no longer holds.

        Appending follows :meth:`~cronbus.store.ports.Events.append` (an id already in the
        topic is stored once: ``created=False``); subscribers of the topic are woken as for
        any append.
        """

    async def commit_task(self, lease: ConnectorLease, commit: Commit, now: float) -> bool:
        """Apply ``commit`` (positions merged partition by partition, dead records added,
        counts added) in one transaction, if the lease still holds; False (nothing done)
        otherwise."""


class ConnectorStore(Connectors, ConnectorLeases, Protocol):
    """What every store provides for connectors."""
