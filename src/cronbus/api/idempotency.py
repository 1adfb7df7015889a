"""``Idempotency-Key`` on every POST: a retried request gets the first one's answer.

A key is scoped by token and route (method and path). The first request with a key claims it in
the store (atomically: of concurrent claims one wins) and stores its answer when it ends; a
repeat with the same body gets that answer again (``Idempotent-Replayed: true``), a repeat with
another body, or while the first is still running, gets 409. An answer of 5xx is not kept (the
claim is released), so a retry may run the request again. Records are trimmed after
``CRONBUS_API_IDEMPOTENCY_TTL`` seconds.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ..errors import ConflictError, CronbusError, InvalidArgumentError
from ..services import RequestsService, Services
from ..validation import shorten
from .auth import authenticate
from .problems import cronbus_problem, http_problem, validation_problem
from .state import ApiState, api_state

log = logging.getLogger("cronbus.api")
HEADER = "Idempotency-Key"
_KEY = re.compile(r"[\x21-\x7e]{1,255}", re.ASCII)
_KEPT_HEADERS = ("content-type", "location")
TRIM_EVERY = 300.0
"""Seconds between two trims of old idempotency records (done by a request that finds it due)."""

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class IdempotentRoute(APIRoute):
    """A route whose POST requests honour ``Idempotency-Key``."""

    def get_route_handler(self) -> Handler:
        """The route's handler, wrapped for POST requests that carry a key."""
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            key = request.headers.get(HEADER)
            if request.method != "POST" or key is None:
                return await handler(request)
            return await answer_once(request, handler, key)

        return route


def check_key(key: str) -> str:
    """An idempotency key: 1 to 255 printable ASCII characters (a UUID is typical)."""
    if not _KEY.fullmatch(key):
        raise InvalidArgumentError(
            f"{HEADER} must be 1 to 255 printable ASCII characters without spaces, got "
            f"{shorten(key)}",
            field=HEADER,
        )
    return key


def fingerprint(request: Request, body: bytes) -> str:
    """What makes two requests the same request: path, query, namespace header and body."""
    digest = hashlib.sha256()
    for part in (
        request.url.path.encode(),
        request.url.query.encode(),
        (request.headers.get("x-cronbus-namespace") or "").encode(),
        body,
    ):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


async def answer_once(request: Request, handler: Handler, key: str) -> Response:
    """Answer a POST with a key: the stored answer of the first request, or run it now."""
    check_key(key)
    access = await authenticate(request)
    state = api_state(request)
    requests = Services(state.app, access).requests
    now = state.app.clock.now()
    await _trim(state, requests, now)
    body_hash = fingerprint(request, await request.body())
    route = f"{request.method} {request.url.path}"
    stored = await requests.claim(route, key, body_hash)
    if stored is not None:
        if stored.body_hash != body_hash:
            raise ConflictError(
                f"{HEADER} {key!r} was used with another request to {request.url.path}; "
                "use a new key for a new request"
            )
        if stored.in_progress:
            raise ConflictError(
                f"the request with {HEADER} {key!r} is still in progress; retry later"
            )
        return replay(stored.status, stored.response)
    try:
        response = await _run(request, handler)
    except BaseException:
        await requests.release(route, key)
        raise
    if response.status_code >= 500:
        await requests.release(route, key)
        return response
    await requests.finish(route, key, response.status_code, _kept(response))
    return response


async def _run(request: Request, handler: Handler) -> Response:
    """The handler's answer, its refusals included as problems (so they are kept too)."""
    try:
        return await handler(request)
    except CronbusError as exc:
        return cronbus_problem(exc, request.url.path)
    except RequestValidationError as exc:
        return validation_problem(exc, request.url.path)
    except HTTPException as exc:
        return http_problem(exc, request.url.path)


def _kept(response: Response) -> dict[str, Any]:
    body = bytes(response.body).decode("utf-8", "replace")
    headers = {k: response.headers[k] for k in _KEPT_HEADERS if k in response.headers}
    return {"body": body, "headers": headers}


def replay(status: int, stored: Any) -> Response:
    """The stored answer of a request, again."""
    body = stored.get("body", "") if isinstance(stored, dict) else ""
    headers = dict(stored.get("headers", {})) if isinstance(stored, dict) else {}
    headers["Idempotent-Replayed"] = "true"
    media_type = headers.pop("content-type", None)
    return Response(content=body, status_code=status, headers=headers, media_type=media_type)


async def _trim(state: ApiState, requests: RequestsService, now: float) -> None:
    if now - state.trimmed_at < TRIM_EVERY:
        return
    state.trimmed_at = now
    try:
        trimmed = await requests.trim(now - state.settings.idempotency_ttl)
    except CronbusError:
        log.warning("trimming idempotency records failed; trying again later", exc_info=True)
        return
    if trimmed:
        log.info("trimmed %d idempotency records", trimmed)
