"""Subscription definitions and events as the store takes them, checked at the edge.

A subscription's name, target, filter and delivery policy, and an event about to be stored, are
validated here once (by the rules of :mod:`cronbus.validation`), for ``app.subscriptions``,
``@app.subscribe``, ``app.publish`` and the command line alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import InvalidArgumentError
from ..observability.retention_policy import parse_age
from ..observability.tracing import capture as capture_trace
from ..serialization import check_json, encode_value
from ..validation import (
    check_identifier,
    check_int,
    check_seconds,
    invalid,
    shorten,
)
from .event import Event, validate_topic
from .filters import Filter
from .records import DeliveryPolicy, NewEvent, Origin, SubscriptionSpec

_COUNT_LIMIT = 10_000
"""The largest max_in_flight, max_attempts and circuit_failures a subscription may set."""


def to_new_event(event: Event, max_bytes: int | None = None) -> NewEvent:
    """The store's form of a checked event: its data encoded once, here, within ``max_bytes``
    of JSON (the app's ``max_payload_bytes``)."""
    if event.extensions or event.dataschema is not None:
        raise InvalidArgumentError(
            "events with CloudEvents extension attributes or a dataschema cannot be stored yet"
        )
    return NewEvent(
        id=event.id,
        type=event.type,
        source=event.source,
        subject=event.subject,
        time=event.time,
        datacontenttype=event.datacontenttype,
        data_json=encode_value(
            event.data, f"the data of event type {shorten(event.type, 60)}", max_bytes=max_bytes
        ),
        key=event.key,
        trace=capture_trace(),  # the publisher's span: each delivery's span continues it
    )


def check_name(name: str) -> str:
    """A subscription name: 1-200 letters, digits, ``.``, ``_``, ``-`` or ``:``."""
    return check_identifier(name, "subscription name")


def build_filter(
    types: Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    subject: str | Sequence[str] | None = None,
    data: Mapping[str, Any] | None = None,
    filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One filter spec from the keyword forms and a full spec; checked by compiling it."""
    spec: dict[str, Any] = dict(filter or {})
    for name, value in (("types", types), ("source", source), ("subject", subject)):
        if value is not None:
            spec[name] = [value] if isinstance(value, str) else list(value)
    if data is not None:
        spec["data"] = dict(data)
    # Filters are stored as JSON (jsonb on PostgreSQL, which refuses NUL): one pass first.
    check_json(spec, "the subscription's filter")
    return Filter.from_json(spec).to_json()


def build_policy(base: DeliveryPolicy | None = None, **options: Any) -> DeliveryPolicy:
    """A delivery policy with ``options`` changed; unknown or out-of-range ones are refused."""
    unknown = set(options) - set(DeliveryPolicy.__dataclass_fields__)
    if unknown:
        known = ", ".join(sorted(DeliveryPolicy.__dataclass_fields__))
        raise InvalidArgumentError(f"unknown delivery option(s) {sorted(unknown)} (known: {known})")
    for name in _AGES:
        if options.get(name) is not None:
            # An age as the edges take it ("7d", seconds, a timedelta), stored as seconds.
            options[name] = parse_age(options[name], name)
    policy = replace(base or DeliveryPolicy(), **options)
    _check_policy(policy)
    return policy


_AGES = ("keep_acked", "keep_dead")
"""The retention options of a subscription (:mod:`cronbus.observability.retention_policy`)."""


def _check_policy(policy: DeliveryPolicy) -> None:
    counts = {
        "max_in_flight": policy.max_in_flight,
        "max_attempts": policy.max_attempts,
        "circuit_failures": policy.circuit_failures,
    }
    for name, count in counts.items():
        check_int(count, name, 1, _COUNT_LIMIT)
    check_seconds(policy.timeout, "timeout", positive=True)
    for name, value in (
        ("backoff", policy.backoff),
        ("max_backoff", policy.max_backoff),
        ("circuit_probe", policy.circuit_probe),
    ):
        check_seconds(value, name)
    if policy.rate_limit is not None:
        rate = policy.rate_limit
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1e6:
            raise invalid(
                "rate_limit", "must be deliveries per second, above 0 and at most 1e6", rate
            )
    if not isinstance(policy.ordered, bool):
        raise invalid("ordered", "must be True or False", policy.ordered)
    for name in _AGES:
        if getattr(policy, name) is not None:
            parse_age(getattr(policy, name), name)


def handler_spec(
    name: str,
    topic: str,
    *,
    types: Sequence[str] | None,
    source: str | Sequence[str] | None,
    subject: str | Sequence[str] | None,
    data: Mapping[str, Any] | None,
    filter: Mapping[str, Any] | None,
    start: str,
    policy: Mapping[str, Any],
) -> SubscriptionSpec:
    """The stored form of an ``@app.subscribe`` handler."""
    if start not in ("latest", "earliest"):
        raise InvalidArgumentError(f"start must be 'latest' or 'earliest', not {start!r}")
    return SubscriptionSpec(
        name=check_name(name),
        topic=validate_topic(topic),
        target={"kind": "handler", "handler": name},
        filter=build_filter(types, source, subject, data, filter),
        policy=build_policy(**policy),
        origin=Origin.CODE,
        start=start,
    )
