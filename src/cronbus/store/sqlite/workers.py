"""The registry of workers in the SQLite store."""

from __future__ import annotations

import json
import sqlite3

from ...model import WorkerInfo, WorkerState
from ..logic import worker_state
from . import sql as q
from .connection import Connected
from .rows import Row, execute, fetch_all


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
        await self._transact(execute, q.UPSERT_WORKER, row, durable=False)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""
        params = (state.value, now, worker_id)
        await self._transact(execute, q.SET_WORKER_STATE, params, durable=False)

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the rows of workers silent since before ``silent_since`` and holding no run."""
        rows = await self._transact(fetch_all, q.PRUNE_WORKERS, (silent_since,), durable=False)
        return [row[0] for row in rows]

    async def list_workers(self, now: float, lease_seconds: float) -> list[WorkerInfo]:
        """Registered workers, with their running runs; silent ones are reported lost."""
        rows, running = await self._call(_workers_and_runs, self._db)
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


def _workers_and_runs(conn: sqlite3.Connection) -> tuple[list[Row], list[Row]]:
    """The registry's rows, and (owner, run id) of every run held, read together."""
    return conn.execute(q.LIST_WORKERS).fetchall(), conn.execute(q.RUNNING_BY_OWNER).fetchall()
