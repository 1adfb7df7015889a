"""The registry of workers in the SQLite store."""

from __future__ import annotations

import json

from ...model import WorkerInfo, WorkerState
from ..logic import worker_state
from . import sql as q
from .connection import Connected
from .rows import Row


class SqliteWorkers(Connected):
    """The workers role (:class:`~cronbus.store.ports.Workers`) of the SQLite store."""

    async def register_worker(self, worker: WorkerInfo) -> None:
        """Add or replace a worker in the registry."""
        row = (
            worker.id,
            worker.host,
            worker.pid,
            json.dumps(list(worker.queues)),
            json.dumps(list(worker.labels)),
            worker.concurrency,
            worker.version,
            worker.started_at,
            worker.heartbeat_at,
            worker.state.value,
        )

        def register() -> None:
            with self._write(durable=False) as conn:
                conn.execute(q.UPSERT_WORKER, row)

        await self._call(register)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""

        def update() -> None:
            with self._write(durable=False) as conn:
                conn.execute(q.SET_WORKER_STATE, (state.value, now, worker_id))

        await self._call(update)

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the rows of workers silent since before ``silent_since`` and holding no run."""

        def prune() -> list[str]:
            with self._write(durable=False) as conn:
                return [row[0] for row in conn.execute(q.PRUNE_WORKERS, (silent_since,))]

        return await self._call(prune)

    async def list_workers(self, now: float, lease_seconds: float) -> list[WorkerInfo]:
        """Registered workers, with their running runs; silent ones are reported lost."""

        def read() -> tuple[list[Row], list[Row]]:
            return (
                self._db.execute(q.LIST_WORKERS).fetchall(),
                self._db.execute(q.RUNNING_BY_OWNER).fetchall(),
            )

        rows, running = await self._call(read)
        by_owner: dict[str, list[int]] = {}
        for owner, run_id in running:
            by_owner.setdefault(owner, []).append(run_id)
        workers = []
        for row in rows:
            state = worker_state(WorkerState(row[9]), row[8], now - lease_seconds)
            workers.append(
                WorkerInfo(
                    id=row[0],
                    host=row[1],
                    pid=row[2],
                    queues=tuple(json.loads(row[3])),
                    labels=tuple(json.loads(row[4])),
                    concurrency=row[5],
                    version=row[6],
                    started_at=row[7],
                    heartbeat_at=row[8],
                    state=state,
                    running=tuple(sorted(by_owner.get(row[0], ()))),
                )
            )
        return workers
