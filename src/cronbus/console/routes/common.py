"""What every console section uses: its router, and the redirect that ends a change."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter
from fastapi.responses import RedirectResponse

from ..errors import ConsoleRoute


def console_router() -> APIRouter:
    """A router whose handlers answer errors and missing sessions in HTML."""
    return APIRouter(route_class=ConsoleRoute)


def done(where: str, notice: str) -> RedirectResponse:
    """After a change: back to ``where`` (a path of this server) saying what was done."""
    parts = urlsplit(where)
    path = parts.path if parts.path.startswith("/") and not parts.netloc else "/"
    query = parts.query + ("&" if parts.query else "") + urlencode({"notice": notice})
    return RedirectResponse(f"{path}?{query}", status_code=303)


def safe_next(value: str | None, default: str = "/") -> str:
    """A path to go back to, refusing anything that leaves this server."""
    if not value:
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/") or value.startswith("//"):
        return default
    return value
