"""Runs in the PostgreSQL store: created, cancelled, requeued and read."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...errors import (
    RunNotFoundError,
    StoreError,
)
from ...model import (
    Attempt,
    Deferred,
    NewRun,
    Run,
    RunFilter,
)
from ...states import RunEvent, RunState, sources, sql_match
from ..logic import NO_RUNS_SINCE, Ended, cancel_state, cancels_children, wakeups
from ..rows import attempt_from_row, run_from_row
from . import fanout_sql as fq
from . import listing
from . import sql as q
from .children import cancel_children
from .connection import Connected
from .fanout import children_ended
from .inserts import Inserting, insert_runs
from .jobs import after_triggers, runs_ended
from .requeue import requeue

_QUEUED = sql_match("r.state", sources(RunEvent.CLAIM))
_SCHEDULED = sql_match("state", sources(RunEvent.DUE))
# A loose index scan: each step seeks the next queue name in runs_ready, so the cost grows with
# the number of queues, not of runs (PostgreSQL has no skip scan for SELECT DISTINCT). Scheduled
# runs already due are found through runs_due; a claim promotes them, so there are few.
READY_QUEUES = f"""
WITH RECURSIVE ready(queue) AS (
    (SELECT r.queue FROM runs r WHERE {_QUEUED} AND r.namespace = %(namespace)s
     ORDER BY r.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT r.queue FROM runs r
            WHERE {_QUEUED} AND r.namespace = %(namespace)s AND r.queue > ready.queue
            ORDER BY r.queue LIMIT 1)
    FROM ready WHERE ready.queue IS NOT NULL
)
SELECT queue FROM ready WHERE queue IS NOT NULL
UNION
SELECT queue FROM runs WHERE {_SCHEDULED} AND eta <= %(now)s AND namespace = %(namespace)s
"""
NEXT_ETA_ANY = f"""
SELECT least(
    (SELECT min(eta) FROM runs WHERE {_SCHEDULED} AND namespace = %(namespace)s),
    ({q.FULL_WINDOW_ENDS}))
"""


class PostgresRuns(Connected):
    """The runs role (:class:`~cronbus.store.ports.Runs`) of the PostgreSQL store."""

    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs in one transaction (one round trip); a known key returns its run."""
        if not runs:
            return []
        async with self._db.transaction() as tx:
            inserting = await insert_runs(tx, runs, now)
            tx.nudges.update(wakeups(RunState.QUEUED))
        return await self._deferred(inserting, runs)

    async def _deferred(self, inserting: Inserting, runs: Sequence[NewRun]) -> list[Deferred]:
        rows = await inserting.fetchall()
        out = []
        for run, (created, run_id) in zip(runs, rows, strict=True):
            if run_id is None:
                # Another transaction committed this key after our statement's snapshot.
                run_id = await self._existing_run(run)
            out.append(Deferred(id=run_id, created=created))
        return out

    async def _existing_run(self, run: NewRun) -> int:
        params = {
            "namespace": run.namespace,
            "key": run.idempotency_key,
            "job_id": run.job_id,
            "fire_at": run.fire_at,
        }
        row = await self._db.one(q.RUN_BY_KEY_OR_FIRE, params)
        if row is None or row[0] is None:
            what = run.idempotency_key or f"job {run.job_id} at {run.fire_at}"
            raise StoreError(f"the existing run of {what!r} could not be read")
        return int(row[0])

    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a waiting run at once, or ask a running one to stop; a waiting parent takes
        its children with it (locked first: see :mod:`.fanout_sql`)."""
        async with self._db.transaction() as tx:
            locking = await tx.queue(fq.LOCK_WAITING_CHILDREN, {"parent": run_id})
            reading = await tx.queue(q.RUN_STATE, (run_id,))
            locked = await locking.fetchall()
            rows = await reading.fetchall()
            if not rows:
                raise RunNotFoundError(f"no run has id {run_id}")
            state, job_id, parent_id, child_index, key = rows[0]
            old = RunState(state)
            new = cancel_state(run_id, old)
            if new is not old:
                finished_at = now if new.terminal else None
                params = {"new": new.value, "old": old.value, "id": run_id, "now": now}
                await tx.queue(q.SET_STATE, {**params, "finished_at": finished_at})
            tx.nudges.update(wakeups(new, key))
            ended: list[Ended] = []
            if new.terminal and parent_id is not None:
                ended.append(
                    Ended(run_id=run_id, state=new, parent_id=parent_id, child_index=child_index)
                )
            if cancels_children(old):
                ended += await cancel_children(tx, run_id, locked, now)
            await children_ended(tx, ended, now)
            if new.terminal and job_id is not None:
                ending = await after_triggers(tx, [job_id])
                await runs_ended(tx, ending, [], now)
        return new

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead (or cancelled, when named) runs again, with a fresh retry budget; a
        fan-out parent is revived with its failed children instead (see :mod:`.requeue`)."""
        async with self._db.transaction() as tx:
            ids = await requeue(tx, run_ids, now)
            if ids:
                tx.nudges.update(wakeups(RunState.QUEUED))
        return ids

    async def get_run(self, run_id: int) -> Run:
        """One run by id."""
        row = await self._db.one(q.GET_RUN, (run_id,))
        if row is None:
            raise RunNotFoundError(f"no run has id {run_id}")
        return run_from_row(row)

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id."""
        return [run_from_row(row) for row in await self._db.rows(q.GET_RUNS, (list(run_ids),))]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Runs matching ``filter``, newest first (see :mod:`.listing`)."""
        if filter.limit <= 0:
            return []
        if filter.namespace is not None:
            namespaces = [filter.namespace]
        else:
            namespaces = [row[0] for row in await self._db.rows(q.RUN_NAMESPACES)]
            if not namespaces:
                return []
        bounds: dict[str, int] | None = None
        if filter.created_after is not None:
            since = {"spaces": namespaces, "since": filter.created_after}
            found = await self._db.rows(listing.SINCE_BOUNDS, since)
            bounds = {name: int(bound) for name, bound in found}
            namespaces = [name for name in namespaces if bounds[name] != NO_RUNS_SINCE]
            if not namespaces:
                return []
        query, params = listing.listing_query(filter, namespaces, bounds)
        # A listing with a creation time is planned for its bounds (a generic plan, made for
        # any bound, may read whole ranges).
        prepare = None if bounds is None else False
        rows = await self._db.rows(query, params, prepare=prepare)
        return [run_from_row(row) for row in rows]

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""
        return [attempt_from_row(row) for row in await self._db.rows(q.LIST_ATTEMPTS, (run_id,))]

    async def count_runs(self, namespace: str | None = None) -> dict[RunState, int]:
        """How many runs (of ``namespace``; None: of all) are in each state."""
        if namespace is None:
            rows = await self._db.rows(listing.COUNT_RUNS)
        else:
            rows = await self._db.rows(listing.COUNT_NAMESPACE_RUNS, (namespace,))
        return {RunState(state): count for state, count in rows}

    async def runs_per_minute(
        self, namespace: str | None, since: float, until: float
    ) -> list[tuple[float, str, int]]:
        """Runs that ended in ``[since, until)``, per minute and terminal state."""
        spaces = None if namespace is None else [namespace]
        params = {"spaces": spaces, "since": since, "until": until}
        rows = await self._db.rows(listing.PER_MINUTE, params)
        return [(float(minute), state, count) for minute, state, count in rows]

    async def delete_runs(self, run_ids: Sequence[int], now: float) -> list[int]:
        """Delete the ended runs among ``run_ids``, with their payloads and attempts."""
        if not run_ids:
            return []
        async with self._db.transaction() as tx:
            rows = await tx.rows(listing.DELETE_RUNS, {"ids": list(run_ids)})
        return [row[0] for row in rows]

    async def next_eta(
        self, queues: Sequence[str] | None, namespace: str = "default"
    ) -> float | None:
        """When the next scheduled run of ``namespace`` in ``queues`` (None: any) is due, or
        the earliest full rate window of the namespace ends, whichever comes first."""
        # Windows count in wall-clock time (no caller's time here): one that ended already is
        # no reason to wake.
        windows = {"prefix": f"{namespace}:", "now": time.time()}
        if queues is None:
            row = await self._db.one(NEXT_ETA_ANY, {"namespace": namespace, **windows})
        else:
            params = {"namespace": namespace, "queues": list(queues), **windows}
            row = await self._db.one(q.NEXT_ETA, params)
        return None if row is None or row[0] is None else float(row[0])

    async def ready_queues(self, now: float, namespace: str = "default") -> list[str]:
        """The queues holding runs of ``namespace`` a claim could take at ``now``, by name."""
        rows = await self._db.rows(READY_QUEUES, {"now": now, "namespace": namespace})
        return sorted(row[0] for row in rows)
