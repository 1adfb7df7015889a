"""Logging in and out with an API token, and switching namespace."""

from __future__ import annotations

from typing import Annotated

from fastapi import Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from ...errors import UnauthorizedError
from ...services import Scope, Services
from ...validation import check_namespace
from ..session import NAMESPACE_COOKIE, TOKEN_COOKIE, Console, access_of, forget
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
    """Check the token; on success keep it in the session cookie and go on to ``next``."""
    from ...api.state import api_state

    token = token.strip()
    try:
        await access_of(Services(api_state(request).app), token)
    except UnauthorizedError as exc:
        return page(
            request,
            None,
            "login.html",
            status=401,
            title="Log in",
            next=safe_next(next),
            error=str(exc),
        )
    response = RedirectResponse(safe_next(next), status_code=303)
    response.set_cookie(
        TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/", max_age=_YEAR
    )
    return response


@router.post("/logout")
async def logout(request: Request, session: Console) -> Response:
    """Forget the session's token in this browser."""
    token = request.cookies.get(TOKEN_COOKIE)
    if token:
        forget(token)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(TOKEN_COOKIE, path="/")
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
