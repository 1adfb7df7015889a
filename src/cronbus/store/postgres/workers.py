"""The registry of workers in the PostgreSQL store."""

from __future__ import annotations

from ...errors import WorkerNotFoundError
from ...model import (
    WorkerInfo,
    WorkerState,
)
from ...states import ACTIVE, sql_in, sql_match
from .connection import Connected
from .rows import (
    worker_from_row,
)

UPSERT_WORKER = """
INSERT INTO workers (id, host, pid, queues, labels, concurrency, version, started_at,
                     heartbeat_at, state, namespace, tasks, drain_requested, lease_seconds)
VALUES (%s, %s, %s, %b::text[], %b::text[], %s, %s, %s, %s, %s, %s, %b::text[], %s, %s)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, labels = excluded.labels, concurrency = excluded.concurrency,
    version = excluded.version, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, state = excluded.state,
    namespace = excluded.namespace, tasks = excluded.tasks,
    drain_requested = excluded.drain_requested, lease_seconds = excluded.lease_seconds
"""
REQUEST_DRAIN = "UPDATE workers SET drain_requested = true WHERE id = %s RETURNING id"
SET_WORKER_STATE = "UPDATE workers SET state = %s, heartbeat_at = %s WHERE id = %s"
# A worker that still owns a run keeps its row until the reaper has taken the run back.
PRUNE_WORKERS = f"""
DELETE FROM workers w WHERE w.heartbeat_at < %s
AND NOT EXISTS (
    SELECT 1 FROM runs r WHERE r.lease_owner = w.id AND {sql_match("r.state", ACTIVE)}
)
RETURNING w.id
"""
_WORKERS = f"""
SELECT w.id, w.host, w.pid, w.queues, w.labels, w.concurrency, w.version, w.started_at,
    w.heartbeat_at, w.state,
    ARRAY(SELECT r.id FROM runs r
          WHERE r.lease_owner = w.id AND r.state IN {sql_in(ACTIVE)} ORDER BY r.id),
    w.namespace, w.tasks, w.drain_requested, w.lease_seconds
FROM workers w"""
LIST_WORKERS = f"""{_WORKERS}
WHERE %(namespace)s::text IS NULL OR w.namespace = %(namespace)s
ORDER BY w.started_at DESC
"""
GET_WORKER = f"{_WORKERS} WHERE w.id = %(id)s"


class PostgresWorkers(Connected):
    """The workers role (:class:`~cronbus.store.ports.Workers`) of the PostgreSQL store."""

    async def register_worker(self, worker: WorkerInfo) -> None:
        """Add or replace a worker in the registry."""
        row = (
            worker.id,
            worker.host,
            worker.pid,
            list(worker.queues),
            list(worker.labels),
            worker.concurrency,
            worker.version,
            worker.started_at,
            worker.heartbeat_at,
            worker.state.value,
            worker.namespace,
            list(worker.tasks),
            worker.drain_requested,
            worker.lease_seconds,
        )
        await self._db.execute(UPSERT_WORKER, row)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""
        await self._db.execute(SET_WORKER_STATE, (state.value, now, worker_id))

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the rows of workers silent since before ``silent_since`` and holding no run."""
        return [row[0] for row in await self._db.rows(PRUNE_WORKERS, (silent_since,))]

    async def list_workers(self, now: float, namespace: str | None = None) -> list[WorkerInfo]:
        """Registered workers (of ``namespace``), with their running runs; those silent for
        longer than their own lease are reported lost (:mod:`cronbus.liveness`)."""
        rows = await self._db.rows(LIST_WORKERS, {"namespace": namespace})
        return [worker_from_row(row, now) for row in rows]

    async def request_drain(self, worker_id: str, now: float) -> WorkerInfo:
        """Ask a worker to drain on its next heartbeat; its entry as it now stands."""
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(REQUEST_DRAIN, (worker_id,))
            if not rows:
                raise WorkerNotFoundError(f"no worker has id {worker_id!r}")
            (row,) = await tx.rows(GET_WORKER, {"id": worker_id})
        return worker_from_row(row, None)
