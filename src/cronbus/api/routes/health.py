"""``/v1/health`` (the process answers) and ``/v1/ready`` (its store is reachable and
migrated): no token needed, for load balancers and orchestrators."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request

from ..._version import __version__
from ...services import Services
from ..problems import responses
from ..state import api_state

router = APIRouter(tags=["health"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """The process answers."""

    status: str = "ok"
    version: str = __version__


@dataclass(frozen=True, slots=True, kw_only=True)
class Readiness:
    """The store is reachable and its schema is the one this cronbus needs."""

    status: str = "ready"
    schema_version: int


@router.get("/health", summary="Is the process alive")
async def health() -> Health:
    """Always ``{"status": "ok"}`` while the process serves requests."""
    return Health()


@router.get(
    "/ready", summary="Is the store reachable and migrated", responses=responses(503, common=False)
)
async def ready(request: Request) -> Readiness:
    """``{"status": "ready"}`` when the store answers and its schema is up to date; a 503
    problem otherwise (the store is down, or ``cronbus migrate`` is pending)."""
    return Readiness(schema_version=await Services(api_state(request).app).health.ready())
