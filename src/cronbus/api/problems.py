"""Every error the API answers, as an RFC 9457 problem details document.

``application/problem+json`` with ``type``, ``title``, ``status``, ``detail``, ``instance`` and,
for a 422, ``errors: [{field, message}]`` naming each input at fault. The cronbus error tree maps
mechanically (:data:`STATUSES`); FastAPI's request validation errors, Starlette's HTTP errors
(unknown routes, methods) and anything unexpected (a 500, logged) answer in the same shape.
"""

from __future__ import annotations

import http
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ..errors import (
    ConfigurationError,
    ConflictError,
    CronbusError,
    ForbiddenError,
    InvalidArgumentError,
    NotFoundError,
    RateLimitedError,
    StoreError,
    UnauthorizedError,
)
from ..serialization import MAX_DEPTH, TOO_DEEP
from ..validation import shorten

log = logging.getLogger("cronbus.api")
MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:cronbus:problem:"
"""Problem types are URNs (``urn:cronbus:problem:not-found``): stable names, not pages."""

STATUSES: tuple[tuple[type[CronbusError], int, str], ...] = (
    (NotFoundError, 404, "not-found"),
    (ConflictError, 409, "conflict"),
    (InvalidArgumentError, 422, "invalid-argument"),
    (UnauthorizedError, 401, "unauthorized"),
    (ForbiddenError, 403, "forbidden"),
    (RateLimitedError, 429, "rate-limited"),
    # An option refused while a definition is built (a job's misfire, say) is bad input too.
    (ConfigurationError, 422, "invalid-argument"),
    (StoreError, 503, "store-unavailable"),
)
"""The cronbus error tree, mapped to statuses: the first matching class wins."""


class FieldProblem(BaseModel):
    """One input at fault: where it is (``limit``, ``options.cron``, ``events[2].type``)."""

    field: str
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem details document."""

    type: str = Field(description="A URN naming the kind of problem.")
    title: str = Field(description="The HTTP status phrase.")
    status: int
    detail: str | None = None
    instance: str | None = Field(default=None, description="The path of the request.")
    errors: list[FieldProblem] | None = Field(
        default=None, description="The inputs at fault (422 only)."
    )


class ProblemResponse(JSONResponse):
    """A problem document, sent as ``application/problem+json``."""

    media_type = MEDIA_TYPE


def problem(
    status: int,
    slug: str,
    detail: str | None,
    *,
    instance: str | None = None,
    errors: Sequence[FieldProblem] | None = None,
    headers: Mapping[str, str] | None = None,
) -> ProblemResponse:
    """A problem response of ``status``."""
    body = Problem(
        type=TYPE_PREFIX + slug,
        title=_phrase(status),
        status=status,
        detail=detail,
        instance=instance,
        errors=list(errors) if errors is not None else None,
    )
    return ProblemResponse(
        body.model_dump(exclude_none=True), status_code=status, headers=dict(headers or {})
    )


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def cronbus_problem(exc: CronbusError, instance: str | None = None) -> ProblemResponse:
    """The answer to an error the service layer raised."""
    status, slug = 500, "internal"
    for kind, code, name in STATUSES:
        if isinstance(exc, kind):
            status, slug = code, name
            break
    detail = str(exc) or None
    headers: dict[str, str] = {}
    errors: list[FieldProblem] | None = None
    if status == 422:
        field = getattr(exc, "field", None) or "body"
        errors = [FieldProblem(field=field, message=detail or "invalid")]
    if isinstance(exc, UnauthorizedError):
        headers["WWW-Authenticate"] = 'Bearer realm="cronbus"'
    if isinstance(exc, RateLimitedError):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    if status >= 500:
        log.warning("store error answering %s: %s", instance, exc, exc_info=exc)
        headers["Retry-After"] = "5"
    return problem(status, slug, detail, instance=instance, errors=errors, headers=headers)


def validation_problem(exc: RequestValidationError, instance: str | None = None) -> ProblemResponse:
    """FastAPI's refusal of a request that does not fit its schema: 422 naming each field
    (once: the complaints of each member of a union about one field are joined)."""
    found: dict[str, list[str]] = {}
    for error in exc.errors():
        messages = found.setdefault(field_name(error.get("loc", ())), [])
        message = str(error.get("msg", "")) or "invalid"
        if message not in messages:
            messages.append(message)
    errors = [FieldProblem(field=f, message=" or ".join(m)) for f, m in found.items()]
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors[:5]) or "invalid request"
    return problem(422, "invalid-argument", shorten(detail, 1000), instance=instance, errors=errors)


_TYPE_TAGS = frozenset(
    {"str", "int", "float", "bool", "bytes", "dict", "list", "tuple", "set", "none"}
    | {"timedelta", "datetime", "decimal", "uuid", "url", "json"}
)
"""The tags pydantic gives union members of these types. Not ``date`` and ``time``: no request
union has such a member, and ``time`` is a field (an event's), which must not be cut off."""


def _is_type_tag(part: str) -> bool:
    """True for the parts of a pydantic location that name a member of a union, not a field:
    ``float``, ``timedelta``, ``function-after[...]``, ``Misfire`` (field names are
    snake_case)."""
    return part in _TYPE_TAGS or "[" in part or "-" in part or part[:1].isupper()


def field_name(loc: Sequence[Any]) -> str:
    """A pydantic error location as a field name: ``("body", "events", 2, "type")`` is
    ``events[2].type``, ``("query", "limit")`` is ``limit``, ``("body", "every", "float")``
    is ``every``; a body that is not JSON is ``body``."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        where = parts.pop(0)
        if where == "body" and (not parts or isinstance(parts[0], int)):
            return "body"  # the body as a whole (an int here is a JSON syntax error's position)
    name = ""
    if parts and loc and loc[0] in ("query", "path", "header", "cookie"):
        name = str(parts.pop(0))  # a parameter's name, hyphens and all
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        elif _is_type_tag(str(part)):
            break  # what follows is about one member of a union, not a field
        else:
            name += ("." if name else "") + str(part)
    return name or "body"


def http_problem(exc: HTTPException, instance: str | None = None) -> ProblemResponse:
    """Starlette's own errors (no such route, method not allowed) as problems."""
    detail: str | None = exc.detail if isinstance(exc.detail, str) else None
    if exc.status_code == 400:
        # FastAPI's answer to a body it cannot read (bytes that are not UTF-8 JSON): bad input
        # like any other, so a 422 naming the body.
        message = "the body is not JSON text (UTF-8)"
        if isinstance(exc.__cause__, RecursionError):
            # Python's decoder recursed past its limit (~1000 levels): JSON, but far deeper
            # than any value cronbus takes, so say that rather than "not JSON".
            message = f"the body {TOO_DEEP}: a value nests at most {MAX_DEPTH} levels"
        return problem(
            422,
            "invalid-argument",
            message,
            instance=instance,
            errors=[FieldProblem(field="body", message=message)],
        )
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no such endpoint: {instance}"
    elif exc.status_code == 405 and detail == "Method Not Allowed":
        allowed = (exc.headers or {}).get("Allow")
        detail = "method not allowed" + (f" (allowed: {allowed})" if allowed else "")
    slug = {404: "not-found", 405: "method-not-allowed", 413: "body-too-large"}.get(
        exc.status_code, "http-error"
    )
    return problem(exc.status_code, slug, detail, instance=instance, headers=exc.headers)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at the request's path (each tried in turn,
    so routers included in routers are asked too)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


def install(api: FastAPI) -> None:
    """Answer every error ``api`` meets as a problem document."""

    async def on_cronbus(request: Request, exc: Exception) -> ProblemResponse:
        assert isinstance(exc, CronbusError)
        return cronbus_problem(exc, request.url.path)

    async def on_validation(request: Request, exc: Exception) -> ProblemResponse:
        assert isinstance(exc, RequestValidationError)
        return validation_problem(exc, request.url.path)

    async def on_http(request: Request, exc: Exception) -> ProblemResponse:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            # Starlette names the methods of the first route that matched the path only; a
            # path served by several routes (GET, PATCH, DELETE /jobs/x) allows them all.
            allowed = ", ".join(allowed_methods(request))
            exc = HTTPException(405, exc.detail, headers={**(exc.headers or {}), "Allow": allowed})
        return http_problem(exc, request.url.path)

    async def on_unexpected(request: Request, exc: Exception) -> ProblemResponse:
        # A bug: no input a user can type should get here (the tests show none does).
        log.error(
            "unexpected error answering %s %s", request.method, request.url.path, exc_info=exc
        )
        return problem(500, "internal", "internal error; see the server's log", instance=None)

    api.add_exception_handler(CronbusError, on_cronbus)
    api.add_exception_handler(RequestValidationError, on_validation)
    api.add_exception_handler(HTTPException, on_http)
    api.add_exception_handler(Exception, on_unexpected)


_REF = {"$ref": "#/components/schemas/Problem"}
_DESCRIPTIONS = {
    401: "No token, or a token not valid",
    403: "The token's scope or namespaces do not allow this",
    404: "No such resource",
    409: "The change clashes with what is stored",
    413: "The request body is too large",
    422: "An input is not valid; `errors` names each field",
    429: "Too many requests for this token, or failed token lookups from this address; see "
    "Retry-After",
    503: "The store is not reachable or not migrated",
}
COMMON = (401, 403, 413, 422, 429)
"""Problems every authenticated endpoint may answer."""


def responses(*statuses: int, common: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the common problems (unless not ``common``) plus ``statuses`` (404,
    409...), each a problem document (the schema is added by :func:`add_schemas`)."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, "Error"),
            "content": {MEDIA_TYPE: {"schema": _REF}},
        }
        for status in (*(COMMON if common else ()), *statuses)
    }


def add_schemas(document: dict[str, Any]) -> dict[str, Any]:
    """Put the problem schemas among an OpenAPI document's components."""
    schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    found = document.setdefault("components", {}).setdefault("schemas", {})
    found.update(schema.pop("$defs", {}))
    found["Problem"] = schema
    return document
