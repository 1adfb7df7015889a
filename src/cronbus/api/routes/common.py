"""What the routers share: their route class, id path parameters, the problems they answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.convertors import Convertor, register_url_convertor

from ..idempotency import IdempotentRoute
from ..problems import responses

ID_LIMIT = 2**63 - 1
"""Ids are signed 64-bit integers in every store."""

RunId = Annotated[int, Path(ge=1, le=ID_LIMIT, description="A run's id.")]
DeliveryId = Annotated[int, Path(ge=1, le=ID_LIMIT, description="A delivery's id.")]
OperationId = Annotated[int, Path(ge=1, le=ID_LIMIT, description="An operation's id.")]
Name = Annotated[str, Path(min_length=1, max_length=200)]
SubscriptionName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,200}$", description="A subscription's name.")
]
ConnectorName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,200}$", description="A connector's name.")
]
JOB_ACTIONS = ("next", "pause", "resume", "trigger")
"""The sub-resources of a job: ``/jobs/{name}/next`` and so on."""


class JobNameConvertor(Convertor[str]):
    """A job name in a path: it may hold ``/`` (names are any printable text) but not end in
    ``/next``, ``/pause``, ``/resume`` or ``/trigger``, so ``PATCH /jobs/x/next`` is a method
    that ``/jobs/x/next`` does not allow (405), not a change of a job named ``x/next`` (such a
    name is reached by the job listing only)."""

    regex = r"[^/]+(?:/(?!(?:" + "|".join(JOB_ACTIONS) + r")$)[^/]+)*"

    def convert(self, value: str) -> str:
        """The name, as it is."""
        return value

    def to_string(self, value: str) -> str:
        """The name, as it is."""
        return value


register_url_convertor("job", JobNameConvertor())


def router(tag: str, **extra: Any) -> APIRouter:
    """A router whose POSTs honour ``Idempotency-Key`` and whose endpoints document the
    problems every authenticated endpoint may answer."""
    return APIRouter(tags=[tag], route_class=IdempotentRoute, responses=responses(), **extra)
