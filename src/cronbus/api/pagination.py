"""Pages of a listing over HTTP: ``limit`` and ``cursor`` in, ``items`` and a ``next`` link out.

The service gives a :class:`~cronbus.services.Page` whose ``next`` is an opaque cursor; the API
turns it into the link of the next page (the request's own path and query with that cursor),
in the body and in a ``Link: <...>; rel="next"`` header, so a client walks a listing by
following links without building URLs.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Query, Request, Response
from pydantic import AfterValidator, BaseModel, Field

from ..errors import InvalidArgumentError
from ..services.pages import DEFAULT_LIMIT, MAX_LIMIT, Page

T = TypeVar("T")

Limit = Annotated[
    int, Query(ge=1, le=MAX_LIMIT, description=f"Items per page (at most {MAX_LIMIT}).")
]
ID_LIMIT = 2**63 - 1


def check_cursor(cursor: str | None) -> str | None:
    """Refuse, as the edge, a cursor holding a number no store column can (a cursor is opaque,
    but a user can type one): the service reads the rest of it."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        position = json.loads(raw)
    except ValueError:
        return cursor  # not ours at all: the service says so
    values = position.values() if isinstance(position, dict) else ()
    if any(isinstance(v, int) and not -ID_LIMIT <= v <= ID_LIMIT for v in values):
        raise InvalidArgumentError(
            "cursor is not a cursor of this listing: pass back the 'next' value of the previous "
            "page unchanged",
            field="cursor",
        )
    return cursor


Cursor = Annotated[
    str | None,
    AfterValidator(check_cursor),
    Query(
        max_length=1000,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Where the page starts: the cursor of the previous page's `next` link.",
    ),
]
LIMIT_DEFAULT = DEFAULT_LIMIT


class PageOut(BaseModel, Generic[T]):
    """One page of a listing."""

    items: list[T]
    next: str | None = Field(
        default=None, description="The link to the next page; null on the last page."
    )
    next_cursor: str | None = Field(
        default=None, description="The cursor of the next page (the `cursor` of `next`)."
    )


def page_body(request: Request, response: Response, page: Page[Any]) -> dict[str, Any]:
    """The body of a page (``items``, ``next``), with the ``Link`` header set on ``response``."""
    link = None
    if page.next is not None:
        link = next_link(request, page.next)
        response.headers["Link"] = f'<{link}>; rel="next"'
    return {"items": page.items, "next": link, "next_cursor": page.next}


def next_link(request: Request, cursor: str) -> str:
    """The request's path and query with ``cursor`` set: the link of the next page."""
    url = request.url.include_query_params(cursor=cursor)
    return f"{url.path}?{url.query}"
