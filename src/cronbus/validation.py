"""One validation layer for everything a user can give cronbus, from Python or the command line.

Every edge (``defer``, ``publish``, ``jobs.add``, ``subscriptions.add``, the CLI, settings) checks
its input here, so the same value is accepted or refused the same way whatever the door and
whatever the store. The rules (docs/limits.md lists them):

- times are epoch seconds or aware datetimes between 1970-01-01 and 9999-12-31 UTC; durations
  are finite, not negative, and at most 100 years;
- text holds no NUL character and no lone surrogate (neither survives UTF-8, and PostgreSQL
  refuses NUL); names, types and keys hold no control character either;
- names, event types, keys and CloudEvents attributes follow a grammar and a length bound;
- topics whose name starts with ``cronbus.`` are written by cronbus alone.

Each error names the field and shows at most :data:`SHOWN` characters of the value, through
:func:`shorten`, so a 100,000-character value cannot flood a log line or a terminal.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from .errors import InvalidArgumentError

SHOWN = 80
"""The most characters of a bad value an error message shows."""
MIN_TIME = 0.0
"""1970-01-01T00:00:00Z, the earliest time cronbus accepts (epoch seconds)."""
MAX_TIME = 253_402_300_799.0
"""9999-12-31T23:59:59Z, the latest time cronbus accepts (epoch seconds)."""
MAX_SECONDS = 100 * 365.25 * 86_400
"""The longest duration (delay, timeout, jitter, grace...): 100 years, in seconds."""
NAME_LENGTH = 200
"""Task, job, queue, topic and subscription names, event types and ids: at most this long."""
KEY_LENGTH = 500
"""Idempotency keys and ordering keys: at most this many characters. PostgreSQL indexes them,
and a B-tree entry holds at most 2,704 bytes: 500 four-byte characters stay under it."""
TEXT_LENGTH = 1_000
"""Event subjects and sources: at most this many characters."""
PRIORITY_LIMIT = 1_000_000
"""Priorities lie between ``-PRIORITY_LIMIT`` and ``PRIORITY_LIMIT``."""
RETRIES_LIMIT = 10_000
"""A task retries at most this many times (so a run gets at most 10,001 attempts)."""
RESERVED_PREFIX = "cronbus."
"""Topics under this prefix (``cronbus.runs``) are published by cronbus itself."""

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL and lone surrogates: the characters no store keeps as text."""
_SPACE = re.compile(r"\s")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]+", re.ASCII)
_QUEUE = re.compile(r"[A-Za-z0-9_.-]{1,100}", re.ASCII)
_TOPIC = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", re.ASCII)
_EVENT_ID = re.compile(r"[\x21-\x7e]{1,200}", re.ASCII)

# RFC 3986, appendix A, for a URI-reference (an absolute URI or a relative reference).
_PCT = r"%[0-9A-Fa-f]{2}"
_UNRESERVED_SUB = r"A-Za-z0-9\-._~!$&'()*+,;="
_PCHAR = rf"(?:[{_UNRESERVED_SUB}:@]|{_PCT})"
_PCHAR_NC = rf"(?:[{_UNRESERVED_SUB}@]|{_PCT})"  # no colon: the first segment of a relative path
_AUTHORITY = (
    rf"(?:(?:[{_UNRESERVED_SUB}:]|{_PCT})*@)?"  # userinfo
    rf"(?:\[[0-9A-Fa-f:.vV{_UNRESERVED_SUB}]+\]|(?:[{_UNRESERVED_SUB}]|{_PCT})*)"  # host
    r"(?::[0-9]*)?"  # port
)
_TAIL = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.-]*:"
    rf"(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_PCHAR}+{_ABEMPTY})?|{_PCHAR}+{_ABEMPTY}|){_TAIL}",
    re.ASCII,
)
_RELATIVE = re.compile(
    rf"(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_PCHAR}+{_ABEMPTY})?|{_PCHAR_NC}+{_ABEMPTY}|){_TAIL}",
    re.ASCII,
)


def shorten(value: object, limit: int = SHOWN) -> str:
    """``value`` as an error message shows it: its repr, cut to at most ``limit`` characters.

    Only the start of a long string is ever copied, so showing a 200 MB value costs nothing.
    """
    if isinstance(value, str | bytes):
        text = repr(value[:limit])
    else:
        try:
            text = repr(value)
        except Exception:  # a user object whose repr fails must not hide the real error
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def invalid(field: str, rule: str, value: object) -> InvalidArgumentError:
    """The one-line error for a value that breaks a rule: ``FIELD RULE, got VALUE``."""
    return InvalidArgumentError(f"{field} {rule}, got {shorten(value)}")


def storable(text: str) -> bool:
    """True when ``text`` holds neither NUL nor a lone surrogate, so every store keeps it."""
    return UNSTORABLE.search(text) is None


def unstorable_reason(text: str) -> str | None:
    """Why ``text`` cannot be stored (a NUL, a lone surrogate), or None when it can."""
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    at = found.start()
    what = "a NUL character" if char == "\x00" else f"a lone surrogate ({char!r})"
    return f"holds {what} at index {at}"


def check_text(
    value: object,
    field: str,
    *,
    max_length: int,
    spaces: bool = True,
    optional: bool = False,
) -> Any:
    """A string of 1 to ``max_length`` printable characters (no NUL, surrogate or control
    character); with ``spaces=False`` no whitespace either. ``optional`` lets None through."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise invalid(field, "must be a non-empty string", value)
    if len(value) > max_length:
        raise invalid(
            field, f"must be at most {max_length} characters (it has {len(value)})", value
        )
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        raise invalid(field, f"must not hold control or unprintable characters ({bad!r})", value)
    if not spaces and _SPACE.search(value):
        raise invalid(field, "must not hold whitespace", value)
    return value


def check_label(value: object, field: str) -> str:
    """A task or job name: 1 to 200 printable characters without whitespace.

    Any script is allowed because default names are Python's qualified names
    (``billing.send_invoice``, ``tests.<locals>.task``, ``envoi_reçu``).
    """
    text: str = check_text(value, field, max_length=NAME_LENGTH, spaces=False)
    return text


def check_identifier(value: object, field: str) -> str:
    """A subscription name: 1 to 200 ASCII letters, digits, ``_``, ``.``, ``:`` or ``-``."""
    if not isinstance(value, str) or len(value) > NAME_LENGTH or not _IDENTIFIER.fullmatch(value):
        raise invalid(field, "must be 1 to 200 ASCII letters, digits, '_', '.', ':' or '-'", value)
    return value


def check_queue(value: object, field: str = "queue name") -> str:
    """A queue name: 1 to 100 ASCII letters, digits, ``_``, ``.`` or ``-``."""
    if not isinstance(value, str) or not _QUEUE.fullmatch(value):
        raise invalid(field, "must be 1 to 100 ASCII letters, digits, '_', '.' or '-'", value)
    return value


def check_topic(value: object, field: str = "topic", *, publish: bool = False) -> str:
    """A topic name: 1 to 200 ASCII letters, digits, ``.``, ``_`` or ``-``, starting with a
    letter or digit. With ``publish``, topics under ``cronbus.`` are refused: they are
    cronbus's own (``cronbus.runs``); reading and subscribing to them is fine."""
    if not isinstance(value, str) or not _TOPIC.fullmatch(value):
        raise InvalidArgumentError(
            f"invalid {field} name {shorten(value)}: use 1 to 200 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit"
        )
    if publish and value.startswith(RESERVED_PREFIX):
        raise invalid(field, f"under {RESERVED_PREFIX!r} is written by cronbus alone", value)
    return value


def check_key(value: object, field: str) -> str | None:
    """An idempotency or ordering key, or None: 1 to 500 printable characters."""
    key: str | None = check_text(value, field, max_length=KEY_LENGTH, optional=True)
    return key


def check_event_type(value: object, field: str = "event type") -> str:
    """A CloudEvents ``type``: 1 to 200 printable characters without whitespace."""
    text: str = check_text(value, field, max_length=NAME_LENGTH, spaces=False)
    return text


def check_event_id(value: object, field: str = "event id") -> str:
    """A CloudEvents ``id``: 1 to 200 visible ASCII characters (``!`` to ``~``, no spaces).

    Ids travel in an HTTP header (``webhook-id``) and a unique index, hence visible ASCII.
    """
    if not isinstance(value, str) or not _EVENT_ID.fullmatch(value):
        raise invalid(field, "must be 1 to 200 visible ASCII characters (no spaces)", value)
    return value


def check_uri_reference(value: object, field: str, *, optional: bool = False) -> Any:
    """A non-empty URI reference per RFC 3986 (``https://x/y``, ``urn:a:b``, ``/orders``,
    ``cronbus``), at most 1,000 characters; non-ASCII characters must be percent-encoded."""
    if value is None and optional:
        return None
    text = check_text(value, field, max_length=TEXT_LENGTH, spaces=False)
    if not (_URI.fullmatch(text) or _RELATIVE.fullmatch(text)):
        raise invalid(
            field,
            "must be a URI reference (RFC 3986), like 'https://example.com/orders', "
            "'urn:shop:orders' or '/orders'",
            text,
        )
    return text


def check_int(value: object, field: str, low: int, high: int) -> int:
    """A whole number between ``low`` and ``high`` (bool is refused: it is never meant)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, "must be a whole number", value)
    if not low <= value <= high:
        raise invalid(field, f"must be between {low} and {high}", value)
    return value


def check_priority(value: object, field: str = "priority") -> int:
    """A priority: a whole number between -1,000,000 and 1,000,000; higher runs first."""
    return check_int(value, field, -PRIORITY_LIMIT, PRIORITY_LIMIT)


def check_seconds(
    value: object,
    field: str,
    *,
    positive: bool = False,
    maximum: float = MAX_SECONDS,
) -> float:
    """A finite duration in seconds, zero or more (more than zero with ``positive``), at most
    ``maximum`` (100 years unless said)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(field, "must be a number of seconds", value)
    if not math.isfinite(value):
        raise invalid(field, "must be a finite number of seconds", value)
    if value < 0 or (positive and value == 0):
        raise invalid(
            field,
            "must be more than zero seconds" if positive else "must be zero or more seconds",
            value,
        )
    if value > maximum:
        raise invalid(field, f"must be at most {maximum:.0f} seconds ({_span(maximum)})", value)
    return float(value)


def check_time(value: object, field: str) -> float:
    """An instant, as epoch seconds or an aware datetime, between 1970-01-01 and 9999-12-31
    UTC; returns epoch seconds."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise invalid(
                field,
                "must be an aware datetime (timezone-aware, like datetime.now(timezone.utc)), "
                "not a naive one, which is ambiguous",
                value,
            )
        try:
            seconds = value.timestamp()
        except (OverflowError, ValueError):
            raise invalid(field, "must be between 1970-01-01 and 9999-12-31 UTC", value) from None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(field, "must be epoch seconds or an aware datetime", value)
    else:
        seconds = float(value)
    return check_epoch(seconds, field)


def check_epoch(seconds: float, field: str) -> float:
    """Epoch seconds between 1970-01-01 and 9999-12-31 UTC (so every store and every
    ``datetime`` can hold them)."""
    if not math.isfinite(seconds):
        raise invalid(field, "must be finite epoch seconds or an aware datetime", seconds)
    if not MIN_TIME <= seconds <= MAX_TIME:
        raise invalid(
            field,
            f"must be between 1970-01-01 and 9999-12-31 UTC (epoch seconds {MIN_TIME:.0f} to "
            f"{MAX_TIME:.0f})",
            seconds,
        )
    return seconds


def _span(seconds: float) -> str:
    years = seconds / (365.25 * 86_400)
    if years >= 1:
        return f"{years:g} years"
    return f"{seconds / 86_400:g} days"


_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}", re.ASCII)
DEFAULT_NAMESPACE = "default"
"""The namespace of an app, job, run, topic or subscription created without one."""


def check_namespace(value: object, field: str = "namespace") -> str:
    """A namespace name: 1 to 63 lower-case ASCII letters, digits, ``_``, ``.`` or ``-``,
    starting with a letter or digit (so it fits a URL path segment and a topic name)."""
    if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
        raise InvalidArgumentError(
            f"{field} must be 1 to 63 lower-case ASCII letters, digits, '_', '.' or '-', "
            f"starting with a letter or digit, got {shorten(value)}",
            field=field,
        )
    return value
