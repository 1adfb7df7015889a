"""Who is looking at the console: the server-side session the cookie names, as a
:class:`Session`.

The login form takes an API token and opens a console session
(:class:`~cronbus.services.ConsoleSessionsService`): the cookie holds only the session's random
id (HttpOnly, SameSite=Lax, ``Secure`` when the request came over HTTPS, directly or as a
trusted proxy says, and Max-Age the session's lifetime), never the token. Every request turns
the id back into the token's :class:`~cronbus.services.Access`. Lookups are cached for
:data:`AUTH_TTL` seconds per process, so twenty open tabs refreshing together cost one lookup,
not twenty; a cached lookup is never used past the session's idle or expiry deadline, logout
drops it at once in this process, and a revoked token (or a logout in another API process)
stops working within that time. A session id that names no live session counts as a failed
lookup of the client's address (:class:`~cronbus.api.ratelimit.FailureLimiter`).

Changes are POSTs that must carry the session's CSRF token (a hidden form field, or the
``X-CSRF-Token`` header htmx sends) and, when the browser says where it comes from, an
``Origin`` of this server. With those, SameSite=Lax (not Strict) costs nothing: it lets a link
to a console page from a chat or an alert e-mail open logged in, and no GET changes anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated
from urllib.parse import quote, urlsplit

from fastapi import Depends, Request

from ..admin_records import DEFAULT_NAMESPACE
from ..errors import ForbiddenError, UnauthorizedError
from ..services import Access, Scope, Services
from ..services.console_sessions import SessionGrant, hash_session
from ..store.admin_ports import TOUCH_EVERY
from ..validation import check_namespace
from .cache import shared

if TYPE_CHECKING:
    from ..api.state import ApiState

SESSION_COOKIE = "cronbus_session"
LEGACY_COOKIE = "cronbus_token"
"""Where consoles before server-side sessions kept the raw token: deleted at login and logout."""
NAMESPACE_COOKIE = "cronbus_ns"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
AUTH_TTL = 5.0
"""Seconds a session's lookup is reused by later requests of this process."""
_CACHE_MAX = 1024
_cache: dict[str, tuple[float, SessionGrant]] = {}


class LoginRequired(Exception):
    """The request has no valid session: answered with a redirect to the login page (and,
    with ``clear``, the cookie of the session that ended is deleted, so it is not sent again)."""

    def __init__(self, next_url: str, reason: str = "", *, clear: bool = False) -> None:
        super().__init__(reason or "log in first")
        self.next_url = next_url
        self.reason = reason
        self.clear = clear


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


def csrf_for(session_id: str) -> str:
    """The CSRF token of a session: derived from its id, so nothing more is stored, and a new
    login has a new one."""
    return hmac.new(session_id.encode(), b"cronbus-console-csrf", hashlib.sha256).hexdigest()[:32]


def _state(request: Request) -> ApiState:
    from ..api.state import api_state

    return api_state(request)


async def grant_of(request: Request, session_id: str) -> SessionGrant:
    """The live session ``session_id`` names, from the cache when it was looked up lately;
    UnauthorizedError when it ended."""
    state = _state(request)
    key = hash_session(session_id)
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and now - hit[0] < AUTH_TTL and _reusable(hit[1], state.app.clock.now()):
        return hit[1]
    idle = state.settings.console_idle_seconds
    grant = await Services(state.app).console_sessions.resume(session_id, idle)
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = (now, grant)
    return grant


def _reusable(grant: SessionGrant, now: float) -> bool:
    """True while a cached grant says what a lookup would: the session has not ended, and a
    lookup would not note it as used (so cached requests still count against the idle spell).
    The app's clock decides this, the process's monotonic clock the cache's own age."""
    return now < grant.ends_at and now - grant.record.last_seen_at < TOUCH_EVERY


def forget(session_id: str) -> None:
    """Drop a session's cached lookup (at logout)."""
    _cache.pop(hash_session(session_id), None)


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
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        raise LoginRequired(_next_url(request))
    state = _state(request)
    address = state.clients.address(request)
    state.failures.check(address, session_id)
    try:
        grant = await grant_of(request, session_id)
    except UnauthorizedError as exc:
        state.failures.failed(address, session_id)
        raise LoginRequired(_next_url(request), str(exc), clear=True) from None
    state.failures.succeeded(session_id)
    access = grant.access
    app = state.app
    namespaces = await _namespaces(Services(app, access), access)
    asked = request.query_params.get("ns") or request.cookies.get(NAMESPACE_COOKIE)
    namespace = _choose(asked, namespaces, access)
    session = Session(
        services=Services(app, access, namespace),
        csrf=csrf_for(session_id),
        namespaces=namespaces,
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
