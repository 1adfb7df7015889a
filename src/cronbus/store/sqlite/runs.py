"""Runs in the SQLite store: created, cancelled, requeued and read."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import RunNotFoundError
from ...model import Attempt, Deferred, NewRun, Run, RunFilter
from ...states import RunEvent, RunState, sources, sql_match
from ..logic import cancel_state, wakeups
from ..rows import attempt_from_row, run_from_row
from . import listing
from . import sql as q
from .connection import Connected, Inline
from .jobs import jobs_runs_ended
from .rows import fetch_all, insert_runs

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
    if new.terminal and row[1] is not None:
        jobs_runs_ended(conn, [run_id], now, nudges)
    return new


class SqliteRuns(Connected):
    """The runs role (:class:`~cronbus.store.ports.Runs`) of the SQLite store."""

    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs in one transaction; known idempotency keys return their run."""
        if not runs:
            return []
        quick: Inline = "write" if len(runs) <= _INLINE_BATCH else ""
        result = await self._transact(insert_runs, runs, now, wake=True, inline=quick)
        await self._nudge(set(wakeups(RunState.QUEUED)))
        return result

    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a waiting run at once, or ask a running one to stop."""
        nudges: set[str] = set()
        state = await self._transact(_cancel, run_id, now, nudges, wake=nudges, inline="write")
        await self._nudge(nudges)
        return state

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead (or cancelled, when named) runs again, with a fresh retry budget."""
        params: dict[str, Any] = {"now": now}
        if run_ids is None:
            sql = q.REQUEUE_ALL_DEAD
        else:
            sql, params["ids"] = q.REQUEUE_IDS, json.dumps(list(run_ids))
        ids = sorted(r[0] for r in await self._transact(fetch_all, sql, params, wake=True))
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
        rows = await self._rows(q.GET_RUNS, (ids,))
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
        if queues is None:
            row = await self._one(NEXT_ETA_ANY, (namespace,), inline="read")
        else:
            params = (namespace, json.dumps(list(queues)))
            row = await self._one(q.NEXT_ETA, params, inline="read")
        return None if row is None or row[0] is None else float(row[0])

    async def ready_queues(self, now: float, namespace: str = "default") -> list[str]:
        """The queues holding runs of ``namespace`` a claim could take at ``now``, by name."""
        params = {"now": now, "namespace": namespace}
        rows = await self._rows(READY_QUEUES, params, inline="read")
        return sorted(row[0] for row in rows)
