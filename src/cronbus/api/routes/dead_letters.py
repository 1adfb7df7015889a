"""``/v1/dead-letters``: dead runs and deliveries, requeued or purged by id or all at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import Query, Request, Response
from pydantic import Field

from ...services.views import DeadLetter, DeadLetterResult
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import StrictBody
from .common import ID_LIMIT, router

dead_letters = router("dead letters")

Id = Annotated[int, Field(ge=1, le=ID_LIMIT)]


class DeadLetterAction(StrictBody):
    """Which dead letters to requeue or purge: ids, or every one of a kind."""

    runs: Sequence[Id] = ()
    """Dead runs, by id."""
    deliveries: Sequence[Id] = ()
    """Dead deliveries, by id."""
    all_runs: bool = False
    """Every dead run of the namespace."""
    all_deliveries: bool = False
    """Every dead delivery of the namespace (of ``subscription`` if given)."""
    subscription: str | None = None


@dead_letters.get(
    "/dead-letters",
    summary="List dead letters",
    response_model=PageOut[DeadLetter],
    responses=responses(404),
)
async def list_dead_letters(
    request: Request,
    response: Response,
    services: Caller,
    kind: Annotated[
        Literal["runs", "deliveries", "all"] | None,
        Query(description="Dead runs only, dead deliveries only, or all (the default)."),
    ] = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
    queue: Annotated[str | None, Query(max_length=200)] = None,
    subscription: Annotated[str | None, Query(max_length=200)] = None,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Dead runs and dead deliveries of the namespace, newest first, with their last error."""
    page = await services.dead_letters.list(
        kind=kind,
        task=task,
        queue=queue,
        subscription=subscription,
        limit=limit,
        cursor=cursor,
    )
    return page_body(request, response, page)


@dead_letters.post(
    "/dead-letters/requeue", summary="Requeue dead letters", responses=responses(404)
)
async def requeue(body: DeadLetterAction, services: Caller) -> DeadLetterResult:
    """Push them again with a fresh attempt budget; ids that are not dead are refused, with
    why, in ``refused``."""
    return await services.dead_letters.requeue(
        list(body.runs),
        list(body.deliveries),
        all_runs=body.all_runs,
        all_deliveries=body.all_deliveries,
        subscription=body.subscription,
    )


@dead_letters.post("/dead-letters/purge", summary="Purge dead letters", responses=responses(404))
async def purge(body: DeadLetterAction, services: Caller) -> DeadLetterResult:
    """Delete them for good; ids that are not dead are refused, with why, in ``refused``."""
    return await services.dead_letters.purge(
        list(body.runs),
        list(body.deliveries),
        all_runs=body.all_runs,
        all_deliveries=body.all_deliveries,
        subscription=body.subscription,
    )
