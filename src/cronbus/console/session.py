"""Who is looking at the console: the token in the session cookie, as a :class:`Session`.

The login form takes an API token and puts it in an HttpOnly, SameSite=Strict cookie; every
request turns it back into an :class:`~cronbus.services.Access`. Token lookups are cached for
:data:`AUTH_TTL` seconds per process, so twenty open tabs refreshing together cost one lookup,
not twenty (a revoked token stops working within that time). Changes are POSTs that must carry
the session's CSRF token (a hidden form field, or the ``X-CSRF-Token`` header htmx sends) and,
when the browser says where it comes from, an ``Origin`` of this server.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import Depends, Request

from ..admin_records import DEFAULT_NAMESPACE
from ..errors import ForbiddenError, UnauthorizedError
from ..services import Access, Scope, Services
from ..validation import check_namespace
from .cache import shared

TOKEN_COOKIE = "cronbus_token"
NAMESPACE_COOKIE = "cronbus_ns"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
AUTH_TTL = 5.0
"""Seconds a token's lookup is reused by later requests of this process."""
_CACHE_MAX = 1024
_cache: dict[str, tuple[float, Access]] = {}


class LoginRequired(Exception):
    """The request has no valid session: answered with a redirect to the login page."""

    def __init__(self, next_url: str, reason: str = "") -> None:
        super().__init__(reason or "log in first")
        self.next_url = next_url
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in tab: its services (token access, chosen namespace) and what it may do."""

    services: Services
    csrf: str
    namespaces: tuple[str, ...]
    """The namespaces the switcher offers (the token's own; every known one for ``*``)."""

    @property
    def access(self) -> Access:
        """The token's access."""
        return self.services.access

    @property
    def namespace(self) -> str:
        """The namespace the console acts in."""
        return self.services.namespace

    @property
    def can_write(self) -> bool:
        """True when the token may change resources of the namespace (buttons are shown)."""
        return self.access.allows(Scope.WRITE, self.namespace)

    @property
    def is_admin(self) -> bool:
        """True when the token may manage tokens and namespaces."""
        return self.access.allows(Scope.ADMIN)

    @property
    def sees_payloads(self) -> bool:
        """True when the token may read run arguments and results."""
        return self.access.payloads


def csrf_for(token: str) -> str:
    """The CSRF token of a session: derived from its API token, so nothing is stored."""
    return hmac.new(token.encode(), b"cronbus-console-csrf", hashlib.sha256).hexdigest()[:32]


async def access_of(services: Services, token: str) -> Access:
    """The access ``token`` grants, from the cache when it was looked up lately."""
    key = hashlib.sha256(token.encode()).hexdigest()
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and now - hit[0] < AUTH_TTL:
        return hit[1]
    access = await services.tokens.authenticate(token)
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = (now, access)
    return access


def forget(token: str) -> None:
    """Drop a token's cached lookup (at logout)."""
    _cache.pop(hashlib.sha256(token.encode()).hexdigest(), None)


def _next_url(request: Request) -> str:
    path = request.url.path
    if request.url.query:
        path += "?" + request.url.query
    return path


async def current_session(request: Request) -> Session:
    """The request's session; :class:`LoginRequired` when it has none that is valid."""
    found: Session | None = getattr(request.state, "console_session", None)
    if found is not None:
        return found
    from ..api.state import api_state

    app = api_state(request).app
    token = request.cookies.get(TOKEN_COOKIE)
    if not token:
        raise LoginRequired(_next_url(request))
    try:
        access = await access_of(Services(app), token)
    except UnauthorizedError as exc:
        raise LoginRequired(_next_url(request), str(exc)) from None
    namespaces = await _namespaces(Services(app, access), access)
    asked = request.query_params.get("ns") or request.cookies.get(NAMESPACE_COOKIE)
    namespace = _choose(asked, namespaces, access)
    session = Session(
        services=Services(app, access, namespace), csrf=csrf_for(token), namespaces=namespaces
    )
    if request.method == "POST":
        await _check_post(request, session)
    request.state.console_session = session
    return session


async def _namespaces(services: Services, access: Access) -> tuple[str, ...]:
    if access.namespaces is not None:
        return tuple(sorted(access.namespaces))
    names = {DEFAULT_NAMESPACE}
    # Every page lists them for the switcher: shared like the token lookup, so twenty tabs
    # refreshing together read them once.
    key = ("namespaces", id(services.context.store), access.token_id or access.actor)
    with contextlib.suppress(ForbiddenError):
        found = await shared(key, AUTH_TTL, services.namespaces.list)
        names.update(n.name for n in found)
    return tuple(sorted(names))


def _choose(asked: str | None, namespaces: tuple[str, ...], access: Access) -> str:
    if asked:
        try:
            chosen = check_namespace(asked)
        except Exception:
            chosen = None
        if chosen is not None and access.sees(chosen):
            return chosen
    if DEFAULT_NAMESPACE in namespaces or not namespaces:
        return DEFAULT_NAMESPACE
    return namespaces[0]


async def _check_post(request: Request, session: Session) -> None:
    """Refuse a POST from another site: its Origin must be this server, and it must carry
    the session's CSRF token."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            raise ForbiddenError("this change came from another site: refused")
    sent = request.headers.get(CSRF_HEADER)
    if sent is None:
        form = await request.form()
        value = form.get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    if sent is None or not hmac.compare_digest(sent, session.csrf):
        raise ForbiddenError("the form is stale or came from elsewhere: reload the page")


def login_url(next_url: str) -> str:
    """The login page, coming back to ``next_url`` afterwards."""
    return "/login?next=" + quote(next_url, safe="/")


Console = Annotated[Session, Depends(current_session)]
"""A page handler parameter: the logged-in session (or a redirect to the login page)."""
