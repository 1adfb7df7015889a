"""``/v1/operations``: bulk actions (retry or cancel runs, requeue dead letters, replay
subscriptions) by ids or by filter, answered at once with 202 and the operation to poll."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import Request, Response
from pydantic import Field

from ...admin_records import Operation
from ...events.bus import OFFSET_LIMIT
from ...services.operations import KINDS
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import StrictBody
from .common import ID_LIMIT, OperationId, router

operations = router("operations")

ItemId = Annotated[int, Field(ge=1, le=ID_LIMIT)] | Annotated[str, Field(max_length=200)]


class OperationRequest(StrictBody):
    """A bulk action: its kind, and the ids it covers or a filter of what it covers."""

    kind: Annotated[str, Field(description="One of: " + ", ".join(KINDS) + ".")]
    ids: Sequence[ItemId] | None = None
    """Run ids (subscription names for ``subscriptions.replay``)."""
    filter: Mapping[str, Any] | None = None
    """What a listing would take: runs (states, task, queue, job, created_after,
    created_before), dead letters (kind, task, queue, subscription), or a topic's
    subscriptions (topic)."""
    delivery_ids: Sequence[Annotated[int, Field(ge=1, le=ID_LIMIT)]] = ()
    """Dead deliveries to requeue (``dead_letters.requeue``)."""
    offset: Annotated[int, Field(ge=1, le=OFFSET_LIMIT)] | None = None
    """Where a replay starts (``subscriptions.replay``: this or ``since``)."""
    since: float | None = None
    """Replay the events published since this time (epoch seconds)."""


@operations.post(
    "/operations",
    summary="Start a bulk action",
    status_code=202,
    responses=responses(404),
)
async def start(body: OperationRequest, response: Response, services: Caller) -> Operation:
    """Accepted at once (202): the items are handled in the background in batches; poll the
    operation at ``Location`` for its progress, or abort it."""
    op = await services.operations.start(
        body.kind,
        list(body.ids) if body.ids is not None else None,  # type: ignore[arg-type]
        dict(body.filter) if body.filter is not None else None,
        delivery_ids=list(body.delivery_ids),
        offset=body.offset,
        since=body.since,
    )
    response.headers["Location"] = f"/v1/operations/{op.id}"
    return op


@operations.get("/operations", summary="List operations", response_model=PageOut[Operation])
async def list_operations(
    request: Request,
    response: Response,
    services: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Operations of the namespace, newest first."""
    page = await services.operations.list(limit=limit, cursor=cursor)
    return page_body(request, response, page)


@operations.get("/operations/{operation_id}", summary="Show an operation", responses=responses(404))
async def get_operation(operation_id: OperationId, services: Caller) -> Operation:
    """An operation with its progress (``total``, ``done``, ``failed``) and state."""
    return await services.operations.get(operation_id)


@operations.post(
    "/operations/{operation_id}/abort", summary="Abort an operation", responses=responses(404)
)
async def abort(operation_id: OperationId, services: Caller) -> Operation:
    """Stop it: items not handled yet are left alone; one that ended is returned as it is."""
    return await services.operations.abort(operation_id)
