"""The registry of workers in the PostgreSQL store."""

from __future__ import annotations

from ...errors import WorkerNotFoundError
from ...model import (
    WorkerInfo,
    WorkerState,
)
from . import sql as q
from .connection import Connected
from .rows import (
    worker_from_row,
)


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
        await self._db.execute(q.UPSERT_WORKER, row)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""
        await self._db.execute(q.SET_WORKER_STATE, (state.value, now, worker_id))

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the rows of workers silent since before ``silent_since`` and holding no run."""
        return [row[0] for row in await self._db.rows(q.PRUNE_WORKERS, (silent_since,))]

    async def list_workers(
        self, now: float, lease_seconds: float, namespace: str | None = None
    ) -> list[WorkerInfo]:
        """Registered workers (of ``namespace``), with their running runs; silent ones are
        reported lost."""
        rows = await self._db.rows(q.LIST_WORKERS, {"namespace": namespace})
        return [worker_from_row(row, now - lease_seconds) for row in rows]

    async def request_drain(self, worker_id: str, now: float) -> WorkerInfo:
        """Ask a worker to drain on its next heartbeat; its entry as it now stands."""
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(q.REQUEST_DRAIN, (worker_id,))
            if not rows:
                raise WorkerNotFoundError(f"no worker has id {worker_id!r}")
            (row,) = await tx.rows(q.GET_WORKER, {"id": worker_id})
        return worker_from_row(row, None)
