"""Pages of a listing as the API sends them (``items``, ``next`` link, ``next_cursor``), back
into the services' :class:`~cronbus.services.pages.Page` whose ``next`` is the cursor."""

from __future__ import annotations

from typing import Any, TypeVar

from ..errors import CronbusError
from ..services.pages import Page
from .http import decode_list

T = TypeVar("T")


def page(kind: type[T], body: Any) -> Page[T]:
    """A page of ``kind`` records from a page body."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise CronbusError("the server's answer is not a page of items (is --url a cronbus API?)")
    items = decode_list(kind, body["items"])
    cursor = body.get("next_cursor")
    return Page(items=items, next=cursor if isinstance(cursor, str) else None)
