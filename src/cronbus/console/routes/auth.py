"""Logging in and out with an API token, and switching namespace."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from ...errors import RateLimitedError, UnauthorizedError
from ...services import Scope, Services
from ...validation import check_namespace
from ..session import (
    LEGACY_COOKIE,
    NAMESPACE_COOKIE,
    SESSION_COOKIE,
    Console,
    forget,
)
from ..templates import page
from .common import console_router, safe_next

router = console_router()
_YEAR = 365 * 86_400


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = "/") -> Response:
    """The login page: one field for an API token."""
    return page(request, None, "login.html", title="Log in", next=safe_next(next), error="")


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request, token: Annotated[str, Form()] = "", next: Annotated[str, Form()] = "/"
) -> Response:
    """Check the token; on success open a session, keep its id in the cookie and go on to
    ``next``. A failed login counts against the client's address (429 once it has none left)."""
    from ...api.state import api_state

    state = api_state(request)
    settings = state.settings
    token = token.strip()
    address = state.clients.address(request)
    try:
        state.failures.check(address, token or None)
        session_id, grant = await Services(state.app).console_sessions.open(
            token, settings.console_lifetime_seconds, settings.console_idle_seconds
        )
    except UnauthorizedError as exc:
        state.failures.failed(address, token or None)
        return _refused(request, next, 401, str(exc))
    except RateLimitedError as exc:
        refused = _refused(request, next, 429, str(exc))
        refused.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return refused
    state.failures.succeeded(token)
    response = RedirectResponse(safe_next(next), status_code=303)
    # The cookie lives as long as the session can (its lifetime, bounded by the token's
    # expiry); the server ends it sooner when it idles, at logout or at revocation.
    lifetime = grant.record.expires_at - grant.record.created_at
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        httponly=True,
        samesite="lax",
        secure=state.clients.https(request),
        path="/",
        max_age=max(1, round(lifetime)),
    )
    response.delete_cookie(LEGACY_COOKIE, path="/")
    return response


def _refused(request: Request, next: str, status: int, error: str) -> HTMLResponse:
    return page(
        request,
        None,
        "login.html",
        status=status,
        title="Log in",
        next=safe_next(next),
        error=error,
    )


@router.post("/logout")
async def logout(request: Request, session: Console) -> Response:
    """End the session on the server (a copy of the cookie stops working too) and drop its
    cookie in this browser."""
    from ...api.state import api_state

    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        forget(session_id)
        await Services(api_state(request).app).console_sessions.close(session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(LEGACY_COOKIE, path="/")
    return response


@router.post("/namespace")
async def switch_namespace(
    request: Request,
    session: Console,
    namespace: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/",
) -> Response:
    """Act in another of the token's namespaces from now on."""
    namespace = check_namespace(namespace)
    session.access.require(Scope.READ, namespace)
    response = RedirectResponse(safe_next(next), status_code=303)
    response.set_cookie(NAMESPACE_COOKIE, namespace, samesite="strict", path="/", max_age=_YEAR)
    return response
