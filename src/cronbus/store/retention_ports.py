"""Retention, as the store provides it: finished runs read oldest first, and small deleting
transactions that each say how long they held their locks.

The rules (which run is due to go: its state, its task's keep) are decided by
:mod:`cronbus.observability.retention_policy`; the store only reads candidates and deletes what
it is handed, re-checking in the deleting transaction that each is still finished, unchanged
since it was read (same ``finished_at``), no parent of a live child and no child of a parent
that is kept. A run requeued, revived or re-finished between the read and the delete stays.

Each delete is one short transaction of at most the rows given (callers pass a few hundred), so
other writers wait at most one batch: on SQLite the database lock, on PostgreSQL row locks
taken with ``SKIP LOCKED`` (a row someone else holds is left for the next pass, never waited
for), and the dead tuples a batch leaves stay within autovacuum's reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..events.states import DeliveryState
from ..states import RunState

__all__ = ["FinishedRun", "Purged", "RetentionStore"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedRun:
    """A finished run as retention reads it."""

    id: int
    finished_at: float
    state: RunState
    task: str
    held: bool
    """True when it must stay whatever its age: a parent with a live child, or a child whose
    parent is still kept (a family goes parent first, then its children)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Purged:
    """What one deleting transaction did."""

    removed: int
    """Rows removed (runs, deliveries, events) or, for :meth:`RetentionStore.reclaim_space`,
    pages given back to the file system."""
    seconds: float
    """How long the transaction held its locks, from its first statement to its commit."""
    last: int | None = None
    """For :meth:`RetentionStore.purge_events`: the offset the next batch starts after (the
    events it read and kept, needed by a live delivery, are not read again); None when the
    topic has nothing more to remove."""


class RetentionStore(Protocol):
    """Reading and deleting finished work in small batches (see the module's docstring)."""

    async def run_namespaces(self) -> list[str]:
        """The namespaces that have runs, by name (registered or not: an app may defer into a
        namespace nobody created), found through an index without reading the runs."""
        ...

    async def finished_runs(
        self,
        namespace: str,
        before: float,
        after: tuple[float, int] | None,
        limit: int,
        states: Sequence[RunState] | None = None,
    ) -> list[FinishedRun]:
        """Finished runs of ``namespace`` that ended at or before ``before``, oldest end
        first (then by id), after the ``(finished_at, id)`` position ``after``; at most
        ``limit``. ``states`` narrows them to some terminal states (None: all)."""
        ...

    async def purge_runs(self, runs: Sequence[FinishedRun]) -> Purged:
        """Delete ``runs`` (with their attempts, payloads and fan-out counters) in one
        transaction, each only if it is still finished at the same ``finished_at`` and not
        held (see :attr:`FinishedRun.held`)."""
        ...

    async def purge_deliveries(
        self, subscription_id: int, state: DeliveryState, before: float, limit: int
    ) -> Purged:
        """Delete at most ``limit`` deliveries of a subscription in ``state`` (acked or dead)
        last changed at or before ``before``, with their attempts, oldest first."""
        ...

    async def purge_events(self, topic: str, after: int, cut: int, limit: int) -> Purged:
        """Read at most ``limit`` events of ``topic`` in the offsets ``(after, cut]`` (the cut
        of an age is :meth:`~cronbus.store.ports.Events.offset_at`), oldest first, and delete
        those that no live delivery needs and every subscription of the topic has passed (at
        or below its cursor, paused ones included); :attr:`Purged.last` says where to go on."""
        ...

    async def reclaim_space(self, pages: int) -> Purged:
        """Give back to the file system at most ``pages`` pages that deletes freed (SQLite's
        incremental vacuum); PostgreSQL leaves it to autovacuum and returns 0."""
        ...
