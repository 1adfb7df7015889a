"""The HTTP side of :class:`~cronbus.client.RemoteServices`: requests to a cronbus API, answers
turned back into records, and problem details (RFC 9457) back into the cronbus error tree.

The status decides the exception class (404 :class:`~cronbus.errors.NotFoundError`, 409
:class:`~cronbus.errors.ConflictError`, 422 :class:`~cronbus.errors.InvalidArgumentError` with
the field the problem names, 401, 403, 429 with its ``Retry-After``), and the problem's
``detail`` is the message, so a front end that maps the local services' errors maps these the
same way, with the same words.
"""

from __future__ import annotations

import asyncio
import dataclasses
import types
import typing
import uuid
from collections import abc
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import httpx
from pydantic import TypeAdapter, ValidationError

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

T = TypeVar("T")
NAMESPACE_HEADER = "X-Cronbus-Namespace"
IDEMPOTENCY_HEADER = "Idempotency-Key"
TIMEOUT_SECONDS = 30.0
"""How long one request may take: a long poll of events waits less than this."""
RATE_RETRIES = 3
"""Times a request refused with 429 is sent again, after the ``Retry-After`` it was given."""
MAX_RATE_WAIT = 10.0
"""The longest ``Retry-After`` waited for; a longer one is reported as the error it is."""


class ServerUnreachableError(StoreError):
    """The cronbus API server could not be reached, or did not answer in time."""


class Transport:
    """One HTTP client to one cronbus API, for one token and one namespace."""

    def __init__(
        self,
        url: str,
        token: str | None,
        namespace: str | None,
        *,
        timeout: float = TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base = url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise InvalidArgumentError(
                f"the API URL must start with http:// or https://, got {base[:80]!r}", field="url"
            )
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token.strip()}"
        if namespace is not None:
            headers[NAMESPACE_HEADER] = namespace
        self.url = base
        self._client = httpx.AsyncClient(
            base_url=base, headers=headers, timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET ``path`` and return the decoded JSON body."""
        return await self.request("GET", path, params=params)

    async def post(
        self, path: str, body: Any = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        """POST ``body`` as JSON (with a fresh ``Idempotency-Key``, so a resend after a 429 is
        the same request) and return the decoded JSON body."""
        return await self.request("POST", path, params=params, body=body)

    async def patch(self, path: str, body: Any) -> Any:
        """PATCH ``path`` with ``body`` as JSON."""
        return await self.request("PATCH", path, body=body)

    async def delete(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """DELETE ``path``; None when the answer has no body."""
        return await self.request("DELETE", path, params=params)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """Send one request; answer the JSON body, or raise the error its problem names."""
        headers = {IDEMPOTENCY_HEADER: str(uuid.uuid4())} if method == "POST" else {}
        query = _query(params)
        for attempt in range(RATE_RETRIES + 1):
            try:
                response = await self._client.request(
                    method,
                    path,
                    params=query,
                    json=body if method in ("POST", "PATCH", "PUT") else None,
                    headers=headers,
                )
            except httpx.TimeoutException:
                raise ServerUnreachableError(
                    f"the cronbus API at {self.url} did not answer {method} {path} in time"
                ) from None
            except httpx.HTTPError as exc:
                raise ServerUnreachableError(
                    f"cannot reach the cronbus API at {self.url}: {_reason(exc)}"
                ) from None
            wait = _retry_after(response)
            if response.status_code == 429 and attempt < RATE_RETRIES and wait <= MAX_RATE_WAIT:
                await asyncio.sleep(wait)  # the server said when it admits us again
                continue
            return _answer(response, method, path)
        raise AssertionError("unreachable")  # pragma: no cover


def decode(kind: type[T], value: Any) -> T:
    """``value`` (decoded JSON) as a ``kind`` record (a dataclass the services return)."""
    return cast(T, _checked(kind, value))


def decode_list(kind: type[T], value: Any) -> list[T]:
    """``value`` (a decoded JSON array) as a list of ``kind`` records."""
    return cast(list[T], _checked(list[kind], value))  # type: ignore[valid-type]


def _checked(kind: Any, value: Any) -> Any:
    try:
        return _tupled(_adapter(kind).validate_python(value))
    except ValidationError as exc:
        # The server speaks another version of the API: say so, not pydantic's page of text.
        name = getattr(kind, "__name__", str(kind))
        raise CronbusError(
            f"the server's answer is not a {name} this cronbus understands: "
            f"{exc.errors()[0].get('msg', exc)} (is the server the same cronbus version?)"
        ) from None


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}
_SEQUENCE_FIELDS: dict[type, frozenset[str]] = {}


def _tupled(value: Any) -> Any:
    """``value`` with each ``Sequence``-typed field of its records a tuple, as the stores give
    them (pydantic gives lists), so a remote record equals the local one; records nested in
    records and lists are done too."""
    if isinstance(value, list):
        items = [_tupled(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    sequences = _sequence_fields(type(value))
    changes = {}
    for item in dataclasses.fields(value):
        old = getattr(value, item.name)
        new = _tupled(old)
        if item.name in sequences and isinstance(new, list):
            new = tuple(new)
        if new is not old:
            changes[item.name] = new
    return dataclasses.replace(value, **changes) if changes else value


def _sequence_fields(kind: type) -> frozenset[str]:
    """The fields of a record type annotated ``Sequence[...]`` (possibly ``| None``)."""
    found = _SEQUENCE_FIELDS.get(kind)
    if found is None:
        hints = typing.get_type_hints(kind)
        found = frozenset(name for name, hint in hints.items() if _is_sequence(hint))
        _SEQUENCE_FIELDS[kind] = found
    return found


def _is_sequence(hint: Any) -> bool:
    if typing.get_origin(hint) is abc.Sequence:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_is_sequence(arg) for arg in typing.get_args(hint))
    return False


def _adapter(kind: Any) -> TypeAdapter[Any]:
    found = _ADAPTERS.get(kind)
    if found is None:
        found = _ADAPTERS[kind] = TypeAdapter(kind)
    return found


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, str | int | float | bool | None]]:
    """Query parameters without the None ones; a list or tuple repeats its key."""
    query: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in (params or {}).items():
        values = value if isinstance(value, list | tuple) else [value]
        for one in values:
            if one is None:
                continue
            if isinstance(one, bool):
                one = "true" if one else "false"
            query.append((key, str(one)))
    return query


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


def _answer(response: httpx.Response, method: str, path: str) -> Any:
    if response.is_success:
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise CronbusError(
                f"the server's answer to {method} {path} is not JSON (is --url a cronbus API?)"
            ) from None
    raise problem_error(response, method, path)


def problem_error(response: httpx.Response, method: str, path: str) -> CronbusError:
    """The cronbus error a problem answer stands for."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    detail = body.get("detail")
    message = detail if isinstance(detail, str) and detail else None
    if message is None:
        message = f"{method} {path} answered HTTP {status} {response.reason_phrase}".strip()
        if status == 404:
            message += " (is --url a cronbus API of this version?)"
    if status == 404:
        return NotFoundError(message)
    if status == 409:
        return ConflictError(message)
    if status in (400, 413, 422):
        return InvalidArgumentError(message, field=_field(body))
    if status == 401:
        return UnauthorizedError(f"unauthorized: {message}")
    if status == 403:
        return ForbiddenError(f"forbidden: {message}")
    if status == 429:
        return RateLimitedError(f"rate limited: {message}", _retry_after(response))
    if status >= 500:
        return StoreError(f"the server failed: {message} (HTTP {status})")
    return CronbusError(message)


def _field(body: Mapping[str, Any]) -> str | None:
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        field = errors[0].get("field")
        return field if isinstance(field, str) else None
    return None
