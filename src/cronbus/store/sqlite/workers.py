"""The registry of workers in the SQLite store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...errors import WorkerNotFoundError
from ...liveness import reported_state
from ...model import WorkerInfo, WorkerState
from . import dist_sql as dq
from . import sql as q
from .connection import Connected
from .routing import live_workers
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
            worker.namespace,
            json.dumps(list(worker.tasks)),
            int(worker.drain_requested),
            worker.lease_seconds,
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

    async def list_workers(self, now: float, namespace: str | None = None) -> list[WorkerInfo]:
        """Registered workers (of ``namespace``), with their running runs; those silent for
        longer than their own lease are reported lost (:mod:`cronbus.liveness`)."""
        rows, running = await self._call(_workers_and_runs, self._db, namespace)
        by_owner: dict[str, list[int]] = {}
        for owner, run_id in running:
            by_owner.setdefault(owner, []).append(run_id)
        return [_worker(row, by_owner.get(row[0], ()), now) for row in rows]

    async def unknown_tasks(self, now: float, namespace: str = "default") -> list[str]:
        """Tasks of queued runs of ``namespace`` that no live worker knows, by name."""
        return await self._call(_unknown_tasks, self._db, now, namespace, inline="read")

    async def request_drain(self, worker_id: str, now: float) -> WorkerInfo:
        """Ask a worker to drain on its next heartbeat; its entry as it now stands."""
        row, running = await self._transact(_request_drain, worker_id, durable=False)
        return _worker(row, running, None)


def _worker(row: Row, running: Sequence[int], now: float | None) -> WorkerInfo:
    """A registry row of ``LIST_WORKERS``, with the runs it holds, its state as reported at
    ``now`` (lost when silent for longer than its own lease, :mod:`cronbus.liveness`; None:
    its state as stored)."""
    state = WorkerState(row[9])
    if now is not None:
        state = reported_state(state, row[8], row[13], now)
    return WorkerInfo(
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
        running=tuple(sorted(running)),
        namespace=row[10],
        tasks=tuple(json.loads(row[11])),
        drain_requested=bool(row[12]),
        lease_seconds=row[13],
    )


def _request_drain(conn: sqlite3.Connection, worker_id: str) -> tuple[Row, list[int]]:
    if conn.execute(q.REQUEST_DRAIN, (worker_id,)).rowcount == 0:
        raise WorkerNotFoundError(f"no worker has id {worker_id!r}")
    row = conn.execute(q.GET_WORKER, (worker_id,)).fetchone()
    running = [r[0] for r in conn.execute(q.WORKER_RUNS, (worker_id,))]
    return row, running


def _workers_and_runs(
    conn: sqlite3.Connection, namespace: str | None
) -> tuple[list[Row], list[Row]]:
    """The registry's rows, and (owner, run id) of every run held, read together."""
    if namespace is None:
        workers = conn.execute(q.LIST_WORKERS).fetchall()
    else:
        workers = conn.execute(q.LIST_NAMESPACE_WORKERS, (namespace,)).fetchall()
    return workers, conn.execute(q.RUNNING_BY_OWNER).fetchall()


def _unknown_tasks(conn: sqlite3.Connection, now: float, namespace: str) -> list[str]:
    """The namespace's tasks no live worker knows, then those of them with queued runs: the
    queued runs are read only when some task of the namespace is unknown."""
    known: set[str] = set()
    for worker in live_workers(conn, now, [namespace]):
        known |= worker.tasks
    params = {"namespace": namespace}
    unknown = [row[0] for row in conn.execute(dq.RUN_TASKS, params) if row[0] not in known]
    if not unknown:
        return []
    params = {"namespace": namespace, "tasks": json.dumps(unknown)}
    return sorted(row[0] for row in conn.execute(dq.QUEUED_TASKS, params))
