"""Console section: the overview (being built)."""

from __future__ import annotations

from fastapi import Request, Response

from ..session import Console
from ..templates import page
from .common import console_router

router = console_router()


@router.get("/")
async def overview(request: Request, session: Console) -> Response:
    """The overview of the namespace."""
    return page(request, session, "overview.html", title="Overview", nav="overview")
