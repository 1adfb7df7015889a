"""What the web console reads from the PostgreSQL store: queue depths, the scheduler's lag and
each job's latest runs (:class:`cronbus.store.ports.Overview`), each one statement over an index.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import InvalidArgumentError
from ...model import QueueDepth
from ...states import RunState, sql_in
from ..ports import LIVE_STATES, queue_depths_from_rows
from .connection import Connected

_OTHERS = sql_in(state for state in LIVE_STATES if state is not RunState.QUEUED)
# Queued runs, the many, through runs_ready (it holds queue and eta); the other live states
# (few, or scheduled ones) through their ranges of runs_by_state.
QUEUE_DEPTHS = f"""
SELECT queue, 'queued', count(*), min(eta) FROM runs
WHERE namespace = %(namespace)s AND state = 'queued' GROUP BY queue
UNION ALL
SELECT queue, state, count(*), min(eta) FROM runs
WHERE namespace = %(namespace)s AND state IN {_OTHERS} GROUP BY queue, state
"""
# Through runs_fired (0010): the namespace's job runs by creation time, newest first.
FIRE_LAGS = """
SELECT created_at - fire_at FROM runs
WHERE namespace = %s AND job_id IS NOT NULL AND created_at >= %s AND fire_at IS NOT NULL
ORDER BY created_at DESC LIMIT %s
"""
# Per job, a range of runs_by_job read backwards and stopped at per_job.
RECENT_JOB_RUNS = """
SELECT j.id, r.id, r.state
FROM unnest(%(jobs)s::bigint[]) AS j(id)
CROSS JOIN LATERAL (
    SELECT id, state FROM runs
    WHERE job_id = j.id AND namespace = %(namespace)s ORDER BY id DESC LIMIT %(per_job)s
) AS r
ORDER BY j.id, r.id DESC
"""


class PostgresOverview(Connected):
    """The console's reads (see :class:`cronbus.store.ports.Overview`)."""

    async def queue_depths(self, namespace: str) -> list[QueueDepth]:
        """How many runs each queue holds in each live state, with the earliest eta."""
        return queue_depths_from_rows(await self._db.rows(QUEUE_DEPTHS, {"namespace": namespace}))

    async def fire_lags(self, namespace: str, since: float, limit: int = 1000) -> list[float]:
        """How late each job run created since ``since`` was created, newest first."""
        if limit <= 0:
            return []
        rows = await self._db.rows(FIRE_LAGS, (namespace, since, limit))
        return [float(lag) for (lag,) in rows]

    async def recent_job_runs(
        self, namespace: str, job_ids: Sequence[int], per_job: int
    ) -> dict[int, list[tuple[int, RunState]]]:
        """Each job's newest ``per_job`` runs, newest first, in one statement."""
        if per_job < 0:
            raise InvalidArgumentError(f"per_job must be 0 or more, not {per_job}")
        found: dict[int, list[tuple[int, RunState]]] = {job: [] for job in job_ids}
        if not found:
            return found
        params = {"jobs": list(found), "namespace": namespace, "per_job": per_job}
        for job, run_id, state in await self._db.rows(RECENT_JOB_RUNS, params):
            found[job].append((run_id, RunState(state)))
        return found
