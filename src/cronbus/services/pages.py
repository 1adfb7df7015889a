"""Pages of a listing: keyset cursors, never an offset.

A cursor is the base64url text of a small JSON object holding the sort key of the last item
shown (``{"b": 812}``: the listing goes on below id 812), so the next page is an index range
scan that costs the same deep in the listing as at its start. Cursors are opaque to callers:
they pass back what they were given, and anything else is refused with ``field="cursor"``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import InvalidArgumentError
from ..validation import shorten

T = TypeVar("T")
DEFAULT_LIMIT = 50
"""Items per page when the caller does not say."""
MAX_LIMIT = 250
"""The most items one page holds."""
_MAX_CURSOR = 1_000
"""The longest cursor accepted, in characters (ours are a few dozen)."""
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Page(Generic[T]):
    """One page of a listing, and the cursor of the next one (``None``: this is the last)."""

    items: list[T] = field(default_factory=list)
    next: str | None = None


def check_limit(limit: object) -> int:
    """A page size: a whole number from 1 to 250 (``field="limit"``)."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArgumentError(
            f"limit must be a whole number, got {shorten(limit)}", field="limit"
        )
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(
            f"limit must be between 1 and {MAX_LIMIT}, got {limit}", field="limit"
        )
    return limit


def encode_cursor(position: Mapping[str, Any]) -> str:
    """The opaque cursor of a position in a listing (a small JSON object)."""
    text = json.dumps(dict(position), separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: object, fields: Mapping[str, type]) -> dict[str, Any]:
    """The position a cursor holds, checked: every key of ``fields`` present with a value of
    its type (``int`` a signed 64-bit whole number, not a bool; ``float`` takes ints too;
    ``str`` non-empty), nothing
    else. Anything else is :class:`~cronbus.errors.InvalidArgumentError` with
    ``field="cursor"``."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR:
        raise _bad(cursor)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        position = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        raise _bad(cursor) from None
    if not isinstance(position, dict) or set(position) != set(fields):
        raise _bad(cursor)
    for key, kind in fields.items():
        if not _fits(position[key], kind):
            raise _bad(cursor)
    return position


def _fits(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float) and abs(value) < 1e300
    if kind is str:
        return isinstance(value, str) and bool(value) and len(value) <= _MAX_CURSOR
    if kind is int:
        # Ids and offsets are signed 64-bit in both stores: a bigger one reaches no row and
        # would overflow the store's parameter.
        return isinstance(value, int) and _INT64[0] <= value <= _INT64[1]
    return isinstance(value, kind)


def _bad(cursor: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"cursor {shorten(cursor)} is not a cursor of this listing: pass back the 'next' value "
        "of the previous page unchanged",
        field="cursor",
    )


def page_of(found: Sequence[T], limit: int, position: Callable[[T], Mapping[str, Any]]) -> Page[T]:
    """A page from up to ``limit + 1`` items read: the extra one only says that a next page
    exists, and the cursor points after the last item shown."""
    items = list(found[:limit])
    more = len(found) > limit and bool(items)
    return Page(items=items, next=encode_cursor(position(items[-1])) if more else None)


def after_key(
    items: Sequence[T], key: Callable[[T], Any], after: Any, newest_first: bool = True
) -> list[T]:
    """Items past ``after`` in a listing sorted by ``key`` (for listings the store gives
    whole, like jobs by name): ``None`` starts at the beginning."""
    if after is None:
        return list(items)
    if newest_first:
        return [item for item in items if key(item) < after]
    return [item for item in items if key(item) > after]
