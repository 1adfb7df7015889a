"""What the routers share: their route class, id path parameters, the problems they answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from ..idempotency import IdempotentRoute
from ..problems import responses

ID_LIMIT = 2**63 - 1
"""Ids are signed 64-bit integers in every store."""

RunId = Annotated[int, Path(ge=1, le=ID_LIMIT, description="A run's id.")]
DeliveryId = Annotated[int, Path(ge=1, le=ID_LIMIT, description="A delivery's id.")]
OperationId = Annotated[int, Path(ge=1, le=ID_LIMIT, description="An operation's id.")]
Name = Annotated[str, Path(min_length=1, max_length=200)]


def router(tag: str, **extra: Any) -> APIRouter:
    """A router whose POSTs honour ``Idempotency-Key`` and whose endpoints document the
    problems every authenticated endpoint may answer."""
    return APIRouter(tags=[tag], route_class=IdempotentRoute, responses=responses(), **extra)
