"""``/v1/runs``: list with filters, show with attempts (their logs), children and why it waits,
page through a fan-out parent's children, cancel, retry, purge finished runs (admin), and defer a
new run of a task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import Header, Query, Request, Response
from pydantic import Field

from ...model import Run
from ...observability.tracing import remote_parent
from ...services import DeferResult, RunDetail, RunQuery
from ...services.retention import PURGE_LIMIT, PurgeResult
from ...states import RunState
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import StrictBody
from .common import ID_LIMIT, RunId, router

runs = router("runs")


class DeferRequest(StrictBody):
    """A run to create: a task of the app with its arguments and options."""

    task: str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = Field(default_factory=dict)
    queue: str | None = None
    delay: float | None = None
    """Seconds from now (or give ``eta``)."""
    eta: float | None = None
    """When to run, epoch seconds (default now)."""
    priority: int | None = None
    idempotency_key: str | None = None
    """A second defer with this key returns the run the first created."""
    broadcast: bool | list[str] | None = None
    """A parent run with one child per live worker that knows the task (a list: only the
    workers carrying all these labels)."""
    shards: int | None = None
    """A parent run with this many children (1 to 10,000), each told its index."""


@runs.get("/runs", summary="List runs", response_model=PageOut[Run], responses=responses(404))
async def list_runs(
    request: Request,
    response: Response,
    services: Caller,
    state: Annotated[list[RunState] | None, Query(description="Runs in these states.")] = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
    queue: Annotated[str | None, Query(max_length=200)] = None,
    job: Annotated[str | None, Query(max_length=200, description="Runs of this job.")] = None,
    created_after: Annotated[float | None, Query(description="Epoch seconds.")] = None,
    created_before: Annotated[float | None, Query(description="Epoch seconds.")] = None,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Runs of the namespace, newest first, filtered."""
    query = RunQuery(
        states=tuple(state or ()),
        task=task,
        queue=queue,
        job=job,
        created_after=created_after,
        created_before=created_before,
    )
    page = await services.runs.list(query, limit=limit, cursor=cursor)
    return page_body(request, response, page)


@runs.post(
    "/runs",
    summary="Defer a run of a task",
    status_code=201,
    responses={
        **responses(404, 409),
        200: {"description": "The run the key made already", "model": DeferResult},
    },
)
async def defer(
    body: DeferRequest,
    response: Response,
    services: Caller,
    traceparent: Annotated[str | None, Header(max_length=200, include_in_schema=False)] = None,
    tracestate: Annotated[str | None, Header(max_length=600, include_in_schema=False)] = None,
) -> DeferResult:
    """Create a run (201), or return the run an equal ``idempotency_key`` made in this namespace
    (200).

    A W3C ``traceparent`` header (with the ``otel`` extra) makes the run's attempts continue
    the caller's trace."""
    with remote_parent(traceparent, tracestate):
        result = await services.runs.defer(
            body.task,
            list(body.args),
            dict(body.kwargs),
            queue=body.queue,
            delay=body.delay,
            eta=body.eta,
            priority=body.priority,
            idempotency_key=body.idempotency_key,
            broadcast=body.broadcast,
            shards=body.shards,
        )
    response.status_code = 201 if result.created else 200
    response.headers["Location"] = f"/v1/runs/{result.run.id}"
    return result


class PurgeRequest(StrictBody):
    """Finished runs to remove: those that ended at least ``older_than`` ago."""

    older_than: float | str
    """Seconds, or like ``"30m"``, ``"12h"``, ``"1d"``; 0: every finished run."""
    states: list[str] | None = None
    """Finished states only (succeeded, cancelled, dead, skipped); default all of them."""
    limit: int = PURGE_LIMIT
    """Runs removed at most by this request: repeat it while the answer is not ``done``."""


@runs.post(
    "/runs/purge",
    summary="Purge finished runs (admin)",
    responses=responses(403, 422),
)
async def purge_runs(body: PurgeRequest, services: Caller) -> PurgeResult:
    """Remove finished runs of the namespace (with their attempts and payloads) that ended at
    least ``older_than`` ago, in short batches; runs that are not finished, parents of live
    children and children of kept parents stay."""
    return await services.runs.purge(body.older_than, body.states, limit=body.limit)


@runs.get("/runs/{run_id}", summary="Show a run", responses=responses(404))
async def show_run(run_id: RunId, services: Caller) -> RunDetail:
    """A run with its attempts (errors and logs), its children, and why it may wait."""
    return await services.runs.show(run_id)


@runs.get(
    "/runs/{run_id}/children",
    summary="List a run's children",
    response_model=PageOut[Run],
    responses=responses(404),
)
async def list_children(
    request: Request,
    response: Response,
    run_id: RunId,
    services: Caller,
    after: Annotated[
        int | None,
        Query(
            ge=-1,
            le=ID_LIMIT,
            description="Children whose index is above this one (the first page: none).",
        ),
    ] = None,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """A fan-out parent's children by index (shard index, map item index or broadcast
    ordinal), its reduce run last; a run that is no parent has none."""
    page = await services.runs.children(run_id, after, limit=limit, cursor=cursor)
    return page_body(request, response, page)


@runs.post("/runs/{run_id}/cancel", summary="Cancel a run", responses=responses(404, 409))
async def cancel_run(run_id: RunId, services: Caller) -> Run:
    """Cancel a waiting run at once, or ask the worker of a running one to stop it."""
    return await services.runs.cancel(run_id)


@runs.post("/runs/{run_id}/retry", summary="Retry a run", responses=responses(404, 409))
async def retry_run(run_id: RunId, services: Caller) -> Run:
    """Queue a dead or cancelled run again, with a fresh retry budget."""
    return await services.runs.retry(run_id)
