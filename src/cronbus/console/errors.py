"""Errors on console pages answered as pages, not as the API's problem documents.

:class:`ConsoleRoute` wraps every console handler: a missing or invalid session becomes a
redirect to the login page (``HX-Redirect`` for htmx requests; the cookie of a session that
ended is deleted), and a cronbus error (not found,
forbidden, invalid input, conflict) a page that says what went wrong with the matching status.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute

from ..errors import (
    ConflictError,
    CronbusError,
    ForbiddenError,
    InvalidArgumentError,
    NotFoundError,
    RateLimitedError,
    StoreError,
    UnauthorizedError,
)
from .session import SESSION_COOKIE, LoginRequired, login_url

_STATUSES: tuple[tuple[type[CronbusError], int], ...] = (
    (NotFoundError, 404),
    (ConflictError, 409),
    (InvalidArgumentError, 400),
    (UnauthorizedError, 401),
    (ForbiddenError, 403),
    (RateLimitedError, 429),
    (StoreError, 503),
)


def status_of(error: CronbusError) -> int:
    """The HTTP status a cronbus error is shown with."""
    for kind, status in _STATUSES:
        if isinstance(error, kind):
            return status
    return 400


class ConsoleRoute(APIRoute):
    """A console route: session and cronbus errors are answered in HTML."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler of the route, answering login and cronbus errors as pages."""
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired as exc:
                target = login_url(exc.next_url)
                answer: Response
                if request.headers.get("hx-request") == "true":
                    answer = Response(status_code=204, headers={"HX-Redirect": target})
                else:
                    answer = RedirectResponse(target, status_code=303)
                if exc.clear:
                    # The session ended: its cookie would only be sent (and refused) again.
                    answer.delete_cookie(SESSION_COOKIE, path="/")
                return answer
            except CronbusError as exc:
                return error_page(request, exc)

        return route


def error_page(request: Request, error: CronbusError) -> HTMLResponse:
    """A page saying what went wrong (the session, when there is one, keeps the menu)."""
    from .templates import page

    session = getattr(request.state, "console_session", None)
    status = status_of(error)
    return page(
        request,
        session,
        "error.html",
        partial="_error.html",
        status=status,
        title=f"Error {status}",
        error=str(error),
        code=status,
    )
