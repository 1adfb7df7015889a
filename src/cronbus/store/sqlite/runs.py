"""Runs in the SQLite store: created, cancelled, requeued and read."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...errors import RunNotFoundError
from ...model import Attempt, Deferred, NewRun, Run, RunFilter
from ...states import RunEvent, RunState, sources, sql_match
from ..logic import Ended, cancel_state, cancels_children, wakeups
from ..ports import RUNS_CHANNEL
from ..rows import attempt_from_row, run_from_row
from . import dist_sql as dq
from . import listing
from . import sql as q
from .connection import Connected, Inline
from .endings import runs_ended
from .fanout import cancel_children, insert_runs
from .limits import full_window_end
from .requeue import requeue

_INLINE_BATCH = 16
"""Defers of at most this many runs may run on the event loop's thread (see ``_call``)."""

_QUEUED = sql_match("state", sources(RunEvent.CLAIM))
_SCHEDULED = sql_match("state", sources(RunEvent.DUE))
# A loose index scan: each step seeks the next queue name in runs_ready, so the cost grows with
# the number of queues, not of runs. (SELECT DISTINCT walks every queued run unless ANALYZE has
# run; 100,000 queued runs took 11 ms against 70 us for this.) Scheduled runs already due are
# found through runs_due; a claim promotes them, so there are few.
READY_QUEUES = f"""
WITH RECURSIVE ready(queue) AS (
    SELECT (SELECT min(queue) FROM runs INDEXED BY runs_ready
            WHERE {_QUEUED} AND namespace = :namespace)
    UNION ALL
    SELECT (SELECT min(queue) FROM runs INDEXED BY runs_ready
            WHERE {_QUEUED} AND namespace = :namespace AND queue > ready.queue)
    FROM ready WHERE ready.queue IS NOT NULL
)
SELECT queue FROM ready WHERE queue IS NOT NULL
UNION
SELECT queue FROM runs INDEXED BY runs_due
WHERE {_SCHEDULED} AND eta <= :now AND namespace = :namespace
"""
NEXT_ETA_ANY = f"""
SELECT min(eta) FROM runs INDEXED BY runs_due WHERE {_SCHEDULED} AND namespace = ?
"""


def _cancel(conn: sqlite3.Connection, run_id: int, now: float, nudges: set[str]) -> RunState:
    row = conn.execute(q.RUN_STATE, (run_id,)).fetchone()
    if row is None:
        raise RunNotFoundError(f"no run has id {run_id}")
    old = RunState(row[0])
    new = cancel_state(run_id, old)
    if new is not old:
        finished = now if new.terminal else None
        conn.execute(q.SET_STATE, (new.value, now, finished, run_id, old.value))
    nudges.update(wakeups(new))
    children: list[Ended] = []
    if new.terminal and row[2] is not None:
        children.append(Ended(run_id=run_id, state=new, parent_id=row[2], child_index=row[3]))
    if cancels_children(old):
        children.extend(cancel_children(conn, run_id, now, nudges))
    job_runs = [run_id] if new.terminal and row[1] is not None else []
    runs_ended(conn, children, job_runs, now, nudges)
    return new


def _defer(conn: sqlite3.Connection, runs: Sequence[NewRun], now: float) -> list[Deferred]:
    """Insert runs; a fan-out parent that ended at once (no children) follows up."""
    dead: list[int] = []
    deferred = insert_runs(conn, runs, now, dead)
    if dead:
        runs_ended(conn, [], dead, now, set())
    return deferred


def _next_eta(
    conn: sqlite3.Connection, queues: Sequence[str] | None, namespace: str
) -> float | None:
    if queues is None:
        row = conn.execute(NEXT_ETA_ANY, (namespace,)).fetchone()
    else:
        params = {"namespace": namespace, "queues": json.dumps(list(queues))}
        row = conn.execute(q.NEXT_ETA, params).fetchone()
    due = None if row is None or row[0] is None else float(row[0])
    opens = full_window_end(conn, namespace)
    return min((t for t in (due, opens) if t is not None), default=None)


class SqliteRuns(Connected):
    """The runs role (:class:`~cronbus.store.ports.Runs`) of the SQLite store."""

    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs in one transaction; known idempotency keys return their run."""
        if not runs:
            return []
        quick: Inline = "write" if len(runs) <= _INLINE_BATCH else ""
        result = await self._transact(self._defer_waking, runs, now, inline=quick)
        await self._nudge(set(wakeups(RunState.QUEUED)))
        return result

    def _defer_waking(
        self, conn: sqlite3.Connection, runs: Sequence[NewRun], now: float
    ) -> list[Deferred]:
        """:func:`_defer`, then nudge the idle workers of other processes before the commit.

        A durable commit waits for the disk (an fsync, milliseconds); the workers wake up
        meanwhile instead of after it, and their claims queue for the write lock this
        transaction holds, so they read the new runs as soon as they are committed. The nudge
        after the commit still follows (a worker that looked before the commit, e.g. at its
        list of ready queues, looks again), and so does a rollback's: a nudge never makes work.
        """
        deferred = _defer(conn, runs, now)
        # Inside the write transaction: every listener registered by now is nudged (also the
        # registry that the nudge after the commit uses).
        self._read_wakeups(conn)
        targets = [address for address, chans in self._wakeups if RUNS_CHANNEL in chans]
        if targets:
            self._hub.send(targets, [RUNS_CHANNEL])
        return deferred

    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a waiting run at once, or ask a running one to stop."""
        nudges: set[str] = set()
        state = await self._transact(_cancel, run_id, now, nudges, wake=nudges, inline="write")
        await self._nudge(nudges)
        return state

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead (or cancelled, when named) runs again, with a fresh retry budget."""
        ids = await self._transact(requeue, run_ids, now, wake=True)
        if ids:
            await self._nudge(set(wakeups(RunState.QUEUED)))
        return ids

    async def get_run(self, run_id: int) -> Run:
        """One run by id."""
        row = await self._one(q.GET_RUN, (run_id,), inline="read")
        if row is None:
            raise RunNotFoundError(f"no run has id {run_id}")
        return run_from_row(row)

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id."""
        ids = json.dumps(list(run_ids))
        # A few runs (the awaited runs of handle.wait(), read at each wake-up) are read on the
        # event loop's thread when the connection is free: a thread hop costs more.
        quick: Inline = "read" if len(run_ids) <= _INLINE_BATCH else ""
        rows = await self._rows(q.GET_RUNS, (ids,), inline=quick)
        return [run_from_row(row) for row in rows]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Runs matching ``filter``, newest first (see :mod:`.listing`)."""
        if filter.limit <= 0:
            return []
        rows = await self._call(listing.list_runs, self._db, filter)
        return [run_from_row(row) for row in rows]

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""
        rows = await self._rows(q.LIST_ATTEMPTS, (run_id,))
        return [attempt_from_row(row) for row in rows]

    async def count_runs(self, namespace: str | None = None) -> dict[RunState, int]:
        """How many runs (of ``namespace``; None: of all) are in each state."""
        if namespace is None:
            rows = await self._rows(listing.COUNT_RUNS)
        else:
            rows = await self._rows(listing.COUNT_NAMESPACE_RUNS, (namespace,))
        return {RunState(state): count for state, count in rows}

    async def runs_per_minute(
        self, namespace: str | None, since: float, until: float
    ) -> list[tuple[float, str, int]]:
        """Runs that ended in ``[since, until)``, per minute and terminal state."""
        return await self._call(listing.per_minute, self._db, namespace, since, until)

    async def delete_runs(self, run_ids: Sequence[int], now: float) -> list[int]:
        """Delete the ended runs among ``run_ids``, with their payloads and attempts."""
        if not run_ids:
            return []
        return await self._transact(listing.delete_runs, run_ids)

    async def next_eta(
        self, queues: Sequence[str] | None, namespace: str = "default"
    ) -> float | None:
        """When the next scheduled run of ``namespace`` in ``queues`` (None: any) is due."""
        return await self._call(_next_eta, self._db, queues, namespace, inline="read")

    async def list_children(
        self, parent_id: int, after_index: int | None = None, limit: int = 100
    ) -> list[Run]:
        """A parent's children by ``child_index`` after ``after_index`` (keyset); the reduce
        run, which has no index, comes last, on the page that has room for it after the last
        child (a page that ends with it is the last)."""
        if limit <= 0:
            return []
        after = -1 if after_index is None else after_index
        rows = await self._rows(dq.LIST_CHILDREN, (parent_id, after, limit), inline="read")
        if len(rows) < limit:
            rows += await self._rows(dq.REDUCE_OF, (parent_id,), inline="read")
        return [run_from_row(row) for row in rows]

    async def ready_queues(self, now: float, namespace: str = "default") -> list[str]:
        """The queues holding runs of ``namespace`` a claim could take at ``now``, by name."""
        params = {"now": now, "namespace": namespace}
        rows = await self._rows(READY_QUEUES, params, inline="read")
        return sorted(row[0] for row in rows)
