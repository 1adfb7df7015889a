"""Events: immutable CloudEvents 1.0 records, built and checked once where they enter cronbus.

An :class:`Event` carries the CloudEvents context attributes (``id``, ``source``, ``type``,
``subject``, ``time``, ``datacontenttype``, ``dataschema``), its JSON ``data``, any CloudEvents
extension attributes, and what the bus adds: the ``topic`` and ``offset`` it was appended at, an
ordering ``key`` and ``published_at``. Build one with :func:`make_event` (from Python) or
:meth:`Event.from_cloudevent` (from a structured-mode CloudEvents JSON document); both refuse bad
input with a message that says what to fix. The plain constructor trusts its arguments: it is
what stores use to rebuild events they wrote themselves.

Times are epoch seconds (``float``) like every time in cronbus; the CloudEvents form writes them
in RFC 3339 (UTC, microseconds), so a round trip through JSON gives back the same event.
"""

from __future__ import annotations

import os
import re
import time as _time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from ..errors import InvalidArgumentError
from ..serialization import check_json
from ..validation import (
    NAME_LENGTH,
    TEXT_LENGTH,
    check_event_id,
    check_event_type,
    check_key,
    check_text,
    check_time,
    check_topic,
    check_uri_reference,
    invalid,
    shorten,
)

JSON = Any
"""A value that ``json.dumps`` accepts and ``json.loads`` gives back."""

ExtensionValue = str | int | bool
"""The JSON types a CloudEvents extension attribute may take."""

SPECVERSION = "1.0"
DEFAULT_SOURCE = "cronbus"
DEFAULT_CONTENT_TYPE = "application/json"

_EXTENSION_NAME = re.compile(r"[a-z0-9]+")
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)

# The attributes cronbus reads itself; every other top-level member is an extension.
_CONTEXT = frozenset(
    {"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"}
)
_OURS = frozenset({"topic", "offset", "partitionkey", "publishedat"})
_DATA = frozenset({"data", "data_base64"})
_RESERVED = _CONTEXT | _OURS | _DATA


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One immutable event: CloudEvents 1.0 attributes plus where the bus appended it.

    ``topic``, ``offset`` and ``published_at`` are None until the event is appended to a topic
    (see :meth:`appended`). ``data`` is any JSON value; it is not copied, so do not change it
    after publishing.
    """

    specversion: ClassVar[str] = SPECVERSION

    id: str
    source: str
    type: str
    time: float
    subject: str | None = None
    datacontenttype: str = DEFAULT_CONTENT_TYPE
    dataschema: str | None = None
    data: JSON = None
    extensions: Mapping[str, ExtensionValue] = field(default_factory=dict)
    key: str | None = None
    topic: str | None = None
    offset: int | None = None
    published_at: float | None = None

    def appended(self, *, topic: str, offset: int, published_at: float) -> Event:
        """A copy of this event as stored at ``offset`` of ``topic`` at ``published_at``."""
        return replace(self, topic=validate_topic(topic), offset=offset, published_at=published_at)

    def to_cloudevent(self) -> dict[str, Any]:
        """The structured-mode CloudEvents JSON document of this event.

        ``data`` is written as JSON (omitted when None) and ``time`` in RFC 3339. The bus's
        own attributes travel as extensions: ``topic``, ``offset``, ``partitionkey`` (the
        CloudEvents partitioning extension, for ``key``) and ``publishedat``.
        """
        doc: dict[str, Any] = {
            "specversion": SPECVERSION,
            "id": self.id,
            "source": self.source,
            "type": self.type,
        }
        optional: dict[str, Any] = {
            "subject": self.subject,
            "time": format_time(self.time),
            "datacontenttype": self.datacontenttype,
            "dataschema": self.dataschema,
            **self.extensions,
            "topic": self.topic,
            "offset": self.offset,
            "partitionkey": self.key,
            "publishedat": _format_optional_time(self.published_at),
            "data": self.data,
        }
        doc.update((name, value) for name, value in optional.items() if value is not None)
        return doc

    @classmethod
    def from_cloudevent(cls, doc: Mapping[str, Any], *, now: float | None = None) -> Event:
        """Parse and check a structured-mode CloudEvents 1.0 JSON document.

        Unknown members are kept as :attr:`extensions`. An event without ``time`` gets ``now``
        (default: the current time). Raises :class:`~cronbus.errors.InvalidArgumentError`
        naming the first attribute that is wrong.
        """
        if not isinstance(doc, Mapping):
            raise InvalidArgumentError(f"a CloudEvent is a JSON object, not {type(doc).__name__}")
        if doc.get("specversion") != SPECVERSION:
            raise invalid(
                "CloudEvent specversion", f"must be {SPECVERSION!r}", doc.get("specversion")
            )
        if "data_base64" in doc:
            raise InvalidArgumentError(
                "CloudEvent data_base64 is not supported: cronbus events carry JSON data"
            )
        event = make_event(
            _attr(doc, "type"),
            doc.get("data"),
            source=_attr(doc, "source"),
            subject=_optional_attr(doc, "subject"),
            id=_attr(doc, "id"),
            key=_optional_attr(doc, "partitionkey"),
            time=_parse_doc_time(doc, "time", now),
            datacontenttype=_optional_attr(doc, "datacontenttype") or DEFAULT_CONTENT_TYPE,
            dataschema=_optional_attr(doc, "dataschema"),
            extensions={k: v for k, v in doc.items() if k not in _RESERVED},
        )
        return _with_position(event, doc)


def make_event(
    type: str,
    data: JSON = None,
    *,
    source: str = DEFAULT_SOURCE,
    subject: str | None = None,
    id: str | None = None,
    key: str | None = None,
    time: float | datetime | None = None,
    datacontenttype: str = DEFAULT_CONTENT_TYPE,
    dataschema: str | None = None,
    extensions: Mapping[str, ExtensionValue] | None = None,
) -> Event:
    """Build a checked, not yet appended :class:`Event`.

    ``id`` defaults to a new time-ordered UUID (:func:`new_event_id`); ``time`` to now, given as
    epoch seconds or an aware datetime. ``data`` must be JSON
    (:class:`~cronbus.errors.SerializationError` otherwise, as for task arguments); anything
    else wrong raises :class:`~cronbus.errors.InvalidArgumentError`.
    """
    event = Event(
        id=new_event_id() if id is None else check_event_id(id),
        source=check_uri_reference(source, "event source"),
        type=check_event_type(type),
        subject=check_text(subject, "event subject", max_length=TEXT_LENGTH, optional=True),
        time=_epoch(time),
        datacontenttype=check_text(
            datacontenttype, "event datacontenttype", max_length=NAME_LENGTH
        ),
        dataschema=check_uri_reference(dataschema, "event dataschema", optional=True),
        data=data,
        extensions=_check_extensions(extensions or {}),
        key=check_key(key, "event key"),
    )
    # The attributes first: the data's errors name the event by its (now checked) type.
    check_json(data, f"the data of event type {shorten(type, 60)}")
    return event


def validate_topic(name: str) -> str:
    """Return ``name`` if it is a valid topic name, else raise ``InvalidArgumentError``.

    A topic name is 1 to 200 characters of letters, digits, ``.``, ``_`` and ``-``, starting
    with a letter or digit, so it is safe in URLs, logs and CLI arguments.
    """
    return check_topic(name)


def new_event_id() -> str:
    """A new UUID version 7 (RFC 9562) as text: unique, and ordered by creation time.

    Time order keeps the store's unique index on event ids append-mostly, unlike uuid4.
    """
    millis = _time.time_ns() // 1_000_000
    value = (millis & (1 << 48) - 1) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def format_time(epoch: float) -> str:
    """``epoch`` seconds as an RFC 3339 UTC timestamp, e.g. ``2024-05-01T12:00:00.25Z``."""
    text = datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="microseconds")
    # Trailing zeros of the fraction say nothing; dropping them keeps the text short.
    whole, _, fraction = text.removesuffix("+00:00").partition(".")
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


def parse_time(text: str) -> float:
    """An RFC 3339 timestamp as epoch seconds; digits past microseconds are dropped."""
    match = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidArgumentError(
            f"{shorten(text)} is not an RFC 3339 timestamp such as '2024-05-01T12:00:00Z'"
        )
    day, clock, fraction, offset = match.groups()
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        return datetime.fromisoformat(f"{day}T{clock}{(fraction or '')[:7]}{offset}").timestamp()
    except ValueError as exc:
        raise InvalidArgumentError(f"{shorten(text)} is not a valid time: {exc}") from None


def _format_optional_time(epoch: float | None) -> str | None:
    return None if epoch is None else format_time(epoch)


def _epoch(value: float | datetime | None) -> float:
    if value is None:
        return _time.time()
    return check_time(value, "event time")


def _check_extensions(extensions: Mapping[str, Any]) -> dict[str, ExtensionValue]:
    for name, value in extensions.items():
        if not isinstance(name, str) or not _EXTENSION_NAME.fullmatch(name) or len(name) > 20:
            raise InvalidArgumentError(
                f"CloudEvent extension name {shorten(name)} must be 1 to 20 lower-case letters "
                "and digits"
            )
        if name in _RESERVED:
            raise InvalidArgumentError(f"{name!r} is a CloudEvent attribute, not an extension")
        if not isinstance(value, str | int | bool):
            raise InvalidArgumentError(
                f"CloudEvent extension {shorten(name)} must be a string, integer or boolean, "
                f"not {type(value).__name__}"
            )
        if isinstance(value, str):
            check_text(value, f"CloudEvent extension {name}", max_length=TEXT_LENGTH)
    return dict(extensions)


def _attr(doc: Mapping[str, Any], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(f"CloudEvent {name}", "must be a non-empty string", value)
    return value


def _optional_attr(doc: Mapping[str, Any], name: str) -> str | None:
    return None if doc.get(name) is None else _attr(doc, name)


def _parse_doc_time(doc: Mapping[str, Any], name: str, now: float | None) -> float | None:
    value = doc.get(name)
    if value is None:
        return now
    try:
        return parse_time(value)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"CloudEvent {name}: {exc}") from None


def _with_position(event: Event, doc: Mapping[str, Any]) -> Event:
    """Carry over where a delivered event was appended, when the document says so."""
    topic: Any = doc.get("topic")
    offset: Any = doc.get("offset")
    if topic is None and offset is None:
        return event
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgumentError(
            f"CloudEvent offset must be a non-negative integer, not {shorten(offset)}"
        )
    published_at = _parse_doc_time(doc, "publishedat", None)
    return replace(event, topic=validate_topic(topic), offset=offset, published_at=published_at)
