"""Who is calling: the Bearer token of a request as an :class:`~cronbus.services.Access`, and
the namespace the request acts in, together as the :class:`~cronbus.services.Services` a handler
calls.

A request without a token, or with one that is unknown, revoked or expired, is refused with 401
(``WWW-Authenticate: Bearer``) and counts as a failure of its client address; an address out of
failures is refused with 429 before its token is looked up, unless that token was good in this
process before (:class:`~.ratelimit.FailureLimiter`). A known token then takes one request from
its rate (429 beyond it). The namespace is the ``namespace`` query parameter, else the
``X-Cronbus-Namespace`` header, else the token's only namespace, else ``default``. Whether the
token may act there is the services' to say (403).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..admin_records import DEFAULT_NAMESPACE
from ..errors import UnauthorizedError
from ..services import Access, Services
from .state import api_state

NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
"""The namespace grammar (:func:`cronbus.services.access.check_namespace`), for the schema."""
MAX_TOKEN_LENGTH = 200
"""Our tokens are about 60 characters; anything much longer is not one (and is not hashed)."""

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="A cronbus API token (`cronbus tokens create`): `Authorization: Bearer cb_...`.",
)


async def authenticate(request: Request) -> Access:
    """The caller of ``request`` (once per request), after taking one request from its rate."""
    found: Access | None = getattr(request.state, "access", None)
    if found is not None:
        return found
    state = api_state(request)
    address = state.clients.address(request)
    header = request.headers.get("authorization") or ""
    token = header.strip().partition(" ")[2].strip() or None
    state.failures.check(address, token)
    try:
        access = await _lookup(request, header)
    except UnauthorizedError:
        state.failures.failed(address, token)
        raise
    if token is not None:  # always, once a lookup succeeded
        state.failures.succeeded(token)
    state.limiter.admit(access.token_id or access.actor)
    request.state.access = access
    return access


async def _lookup(request: Request, header: str) -> Access:
    """The access of the ``Authorization`` header's token; UnauthorizedError if none."""
    if not header:
        raise UnauthorizedError(
            "this endpoint needs a token: send 'Authorization: Bearer TOKEN' "
            "(create one with `cronbus tokens create`)"
        )
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise UnauthorizedError("the Authorization header must be 'Bearer TOKEN'")
    if len(token) > MAX_TOKEN_LENGTH:
        raise UnauthorizedError("the token is not valid")
    return await Services(api_state(request).app).tokens.authenticate(token)


async def current_access(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Access:
    """The caller, as a dependency (``credentials`` only puts the scheme in the OpenAPI
    document: :func:`authenticate` reads the header itself, to answer in problem form)."""
    return await authenticate(request)


def choose_namespace(access: Access, query: str | None, header: str | None) -> str:
    """The namespace a request acts in: the query parameter, else the header, else the token's
    only namespace, else ``default``."""
    asked = query if query is not None else header
    if asked is not None:
        return asked
    if access.namespaces is not None and len(access.namespaces) == 1:
        return next(iter(access.namespaces))
    return DEFAULT_NAMESPACE


async def services(
    request: Request,
    access: Annotated[Access, Depends(current_access)],
    namespace: Annotated[
        str | None,
        Query(
            pattern=NAMESPACE_PATTERN,
            description="The namespace to act in (default: the X-Cronbus-Namespace header, "
            "else the token's only namespace, else `default`).",
        ),
    ] = None,
    x_cronbus_namespace: Annotated[
        str | None,
        Header(
            pattern=NAMESPACE_PATTERN,
            description="The namespace to act in, when the query does not say.",
        ),
    ] = None,
) -> Services:
    """The services for the caller in the chosen namespace."""
    chosen = choose_namespace(access, namespace, x_cronbus_namespace)
    return Services(api_state(request).app, access, chosen)


Caller = Annotated[Services, Depends(services)]
"""A handler parameter: the caller's services in the chosen namespace."""
