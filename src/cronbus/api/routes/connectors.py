"""``/v1/connectors``: create (idempotent), read with each task's lag, pause, resume, stop,
restart, delete, and each connector's dead records. Configs are shown masked by the service
(secrets, header values, URL credentials and query values)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Body, Request, Response

from ...connectors.records import DeadRecord
from ...services.connectors import ConnectorView
from ...services.pages import decode_cursor, page_of
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import StrictBody
from .common import ConnectorName as Name
from .common import router

connectors = router("connectors")

DEAD_CURSOR = "b"
"""The key of a dead-records cursor: the listing goes on below this record id (the client
builds one from ``before``)."""


class ConnectorCreate(StrictBody):
    """A new connector: its name, its kind (a built-in or one the app registers), its config
    (a JSON object naming the ``topic``, checked by the kind), what a record that fails for
    good does, and how many tasks it may be split into."""

    # name, kind and max_tasks are checked by the service, so a refusal reads the same through
    # the API as on the store.
    name: str
    """1 to 200 ASCII letters, digits, ``_``, ``.``, ``:`` or ``-``."""
    kind: str
    """``sql-source``, ``file-source``, ``file-sink``, ``http-sink``, ``postgres-sink`` or the
    app's own."""
    config: dict[str, Any]
    tolerance: Literal["none", "all"] = "none"
    """``none``: a bad record fails the task; ``all``: it goes to the dead records."""
    max_tasks: int = 1
    """Tasks at most (1 to 100)."""


class Restart(StrictBody):
    """Which task to restart (none given: every task)."""

    task: int | None = None
    """The task's index (checked by the service, so a refusal reads as on the store)."""


@connectors.get(
    "/connectors",
    summary="List connectors",
    response_model=PageOut[ConnectorView],
    responses=responses(404),
)
async def list_connectors(services: Caller) -> dict[str, Any]:
    """Connectors of the namespace by name, each with its tasks and their lag (one page:
    connectors are few)."""
    found = await services.connectors.list()
    return {"items": found, "next": None, "next_cursor": None}


@connectors.post(
    "/connectors",
    summary="Create a connector",
    status_code=201,
    responses={
        200: {"model": ConnectorView, "description": "The same definition existed: no change"},
        **responses(404, 409),
    },
)
async def create_connector(
    body: ConnectorCreate, response: Response, services: Caller
) -> ConnectorView:
    """A new connector, validated by its kind and split into tasks (201); the same definition
    again changes nothing (200), another under the same name is a conflict (409)."""
    view = await services.connectors.create(
        body.name, body.kind, body.config, tolerance=body.tolerance, max_tasks=body.max_tasks
    )
    if not view.created:
        response.status_code = 200
    response.headers["Location"] = f"/v1/connectors/{view.connector.name}"
    return view


@connectors.get("/connectors/{name}", summary="Show a connector", responses=responses(404))
async def get_connector(name: Name, services: Caller) -> ConnectorView:
    """A connector with each task's state, worker, positions, lag and per-record outcomes."""
    return await services.connectors.get(name)


@connectors.delete(
    "/connectors/{name}", summary="Delete a connector", status_code=204, responses=responses(404)
)
async def delete_connector(name: Name, services: Caller) -> Response:
    """Delete a connector with its tasks, positions and dead records (a worker running one of
    its tasks stops it at its next lease renewal)."""
    await services.connectors.remove(name)
    return Response(status_code=204)


@connectors.post("/connectors/{name}/pause", summary="Pause a connector", responses=responses(404))
async def pause_connector(name: Name, services: Caller) -> ConnectorView:
    """Pause every task (they keep their positions)."""
    return await services.connectors.pause(name)


@connectors.post(
    "/connectors/{name}/resume", summary="Resume a connector", responses=responses(404)
)
async def resume_connector(name: Name, services: Caller) -> ConnectorView:
    """Resume paused or stopped tasks."""
    return await services.connectors.resume(name)


@connectors.post("/connectors/{name}/stop", summary="Stop a connector", responses=responses(404))
async def stop_connector(name: Name, services: Caller) -> ConnectorView:
    """Stop every task until resumed (they keep their positions)."""
    return await services.connectors.stop(name)


@connectors.post(
    "/connectors/{name}/restart", summary="Restart a connector", responses=responses(404, 409)
)
async def restart_connector(
    name: Name, services: Caller, body: Annotated[Restart | None, Body()] = None
) -> ConnectorView:
    """Restart every task, or the one ``task`` names: failed ones run again, running ones
    start afresh from their committed positions on whichever worker takes them."""
    task = None if body is None else body.task
    return await services.connectors.restart(name, task)


@connectors.get(
    "/connectors/{name}/dead-records",
    summary="List a connector's dead records",
    response_model=PageOut[DeadRecord],
    responses=responses(404),
)
async def list_dead_records(
    request: Request,
    response: Response,
    name: Name,
    services: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Records that failed for good (tolerance ``all``), newest first, each with its error
    and the record as it was."""
    before = None if cursor is None else decode_cursor(cursor, {DEAD_CURSOR: int})[DEAD_CURSOR]
    found = await services.connectors.dead_records(name, limit + 1, before)
    page = page_of(found, limit, lambda record: {DEAD_CURSOR: record.id})
    return page_body(request, response, page)
