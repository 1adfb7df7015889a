"""``/v1/workers``: list with the runs each holds, show one, drain one, and the tasks whose
queued runs no live worker knows."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query

from ...model import WorkerState
from ...services.views import WorkerView
from ..auth import Caller
from ..pagination import PageOut
from ..problems import responses
from .common import router

workers = router("workers")

WorkerId = Annotated[str, Path(min_length=1, max_length=200, description="A worker's id.")]


@workers.get("/workers", summary="List workers", response_model=PageOut[WorkerView])
async def list_workers(
    services: Caller,
    state: Annotated[
        list[WorkerState] | None, Query(description="Workers in these states.")
    ] = None,
    include_stopped: Annotated[bool, Query(description="Stopped workers too.")] = False,
) -> dict[str, Any]:
    """Workers of the namespace, newest first (one page: the registry is small)."""
    found = await services.workers.list(tuple(state or ()), include_stopped=include_stopped)
    return {"items": found, "next": None, "next_cursor": None}


@workers.get(
    "/workers/unknown-tasks",
    summary="List tasks no live worker knows",
    response_model=PageOut[str],
)
async def unknown_tasks(services: Caller) -> dict[str, Any]:
    """Tasks of queued runs of the namespace that no live worker knows, by name: those runs
    wait until a worker whose code registers the task starts (one page: a handful)."""
    # Declared before /workers/{worker_id}: the path is this listing, not a worker's id.
    found = await services.workers.unknown_tasks()
    return {"items": found, "next": None, "next_cursor": None}


@workers.get("/workers/{worker_id}", summary="Show a worker", responses=responses(404))
async def get_worker(worker_id: WorkerId, services: Caller) -> WorkerView:
    """One worker with the runs it holds."""
    return await services.workers.get(worker_id)


@workers.post("/workers/{worker_id}/drain", summary="Drain a worker", responses=responses(404, 409))
async def drain_worker(worker_id: WorkerId, services: Caller) -> WorkerView:
    """Ask the worker to stop claiming, finish what it holds and stop (on its next
    heartbeat)."""
    return await services.workers.drain(worker_id)
