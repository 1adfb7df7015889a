"""``/v1/stats`` (runs by state, runs per minute over a window) and ``/v1/audit`` (every
change: who, what, when)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Query, Request, Response

from ...admin_records import AuditEntry
from ...services.stats import MAX_WINDOW, Bucket
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from .common import router

stats = router("stats")
audit = router("audit")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCounts:
    """Runs of the namespace by state (every state, zeros too)."""

    counts: dict[str, int]
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PerMinute:
    """Runs that ended per minute over the window, oldest minute first."""

    window: int
    buckets: list[Bucket]


@stats.get("/stats", summary="Runs by state")
async def counts(services: Caller) -> RunCounts:
    """How many runs of the namespace are in each state (computed at most every few
    seconds)."""
    found = await services.stats.counts()
    by_name = {state.value: count for state, count in found.items()}
    return RunCounts(counts=by_name, total=sum(by_name.values()))


@stats.get("/stats/per-minute", summary="Runs ended per minute")
async def per_minute(
    services: Caller,
    window: Annotated[
        int, Query(ge=60, le=MAX_WINDOW, description="Seconds back from now (at most a week).")
    ] = 3600,
) -> PerMinute:
    """Runs that ended in each minute of the window, by terminal state."""
    return PerMinute(window=window, buckets=await services.stats.per_minute(window))


@audit.get("/audit", summary="The audit log", response_model=PageOut[AuditEntry])
async def list_audit(
    request: Request,
    response: Response,
    services: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Changes newest first: every one for an admin of every namespace, else those of the
    token's namespaces; a namespace asked for (query or header) narrows to it."""
    asked = "namespace" in request.query_params or "x-cronbus-namespace" in request.headers
    page = await services.audit.list(
        limit=limit, cursor=cursor, namespace=services.namespace if asked else None
    )
    return page_body(request, response, page)
