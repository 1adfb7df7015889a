"""What the web console reads from the SQLite store: queue depths, the scheduler's lag and each
job's latest runs (:class:`cronbus.store.ports.Overview`), each through an index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...errors import InvalidArgumentError
from ...model import QueueDepth
from ...states import RunState, sql_in
from ..ports import LIVE_STATES, queue_depths_from_rows
from .connection import Connected

_OTHERS = sql_in(state for state in LIVE_STATES if state is not RunState.QUEUED)
# Queued runs, the many, from runs_ready alone (it holds queue and eta); the other live states
# (few, or scheduled ones) through their ranges of runs_by_state.
QUEUE_DEPTHS = f"""
SELECT queue, 'queued', count(*), min(eta) FROM runs INDEXED BY runs_ready
WHERE namespace = :namespace AND state = 'queued' GROUP BY queue
UNION ALL
SELECT queue, state, count(*), min(eta) FROM runs INDEXED BY runs_by_state
WHERE namespace = :namespace AND state IN {_OTHERS}
GROUP BY queue, state
"""
# Through runs_fired (0010): the namespace's job runs by creation time, newest first.
FIRE_LAGS = """
SELECT created_at - fire_at FROM runs INDEXED BY runs_fired
WHERE namespace = ? AND job_id IS NOT NULL AND created_at >= ? AND fire_at IS NOT NULL
ORDER BY created_at DESC LIMIT ?
"""
JOB_RUNS = """
SELECT id, state FROM runs INDEXED BY runs_by_job
WHERE job_id = ? AND namespace = ? ORDER BY id DESC LIMIT ?
"""


def recent_job_runs(
    conn: sqlite3.Connection, namespace: str, job_ids: Sequence[int], per_job: int
) -> dict[int, list[tuple[int, RunState]]]:
    """Each job's newest runs: a range of runs_by_job read backwards per job, in one call."""
    return {
        job: [
            (run_id, RunState(state))
            for run_id, state in conn.execute(JOB_RUNS, (job, namespace, per_job))
        ]
        for job in dict.fromkeys(job_ids)
    }


class SqliteOverview(Connected):
    """The console's reads (see :class:`cronbus.store.ports.Overview`)."""

    async def queue_depths(self, namespace: str) -> list[QueueDepth]:
        """How many runs each queue holds in each live state, with the earliest eta."""
        return queue_depths_from_rows(await self._rows(QUEUE_DEPTHS, {"namespace": namespace}))

    async def fire_lags(self, namespace: str, since: float, limit: int = 1000) -> list[float]:
        """How late each job run created since ``since`` was created, newest first."""
        if limit <= 0:
            return []
        rows = await self._rows(FIRE_LAGS, (namespace, since, limit))
        return [float(lag) for (lag,) in rows]

    async def recent_job_runs(
        self, namespace: str, job_ids: Sequence[int], per_job: int
    ) -> dict[int, list[tuple[int, RunState]]]:
        """Each job's newest ``per_job`` runs, newest first."""
        if per_job < 0:
            raise InvalidArgumentError(f"per_job must be 0 or more, not {per_job}")
        if not job_ids:
            return {}
        return await self._call(recent_job_runs, self._db, namespace, job_ids, per_job)
