"""Building rules and destinations from user input, checked once at the edge.

The same builders serve the app's code (``app.alerts.add``, ``@app.alert``), the services and
the CLI, so a rule is refused with the same message whichever door it came through::

    from cronbus.observability.alerts import chat, email, webhook

    app.alerts.add("queue-depth", queue="emails", threshold=100,
                   to=[webhook("https://ops.example.com/hook", secret="whsec_..."),
                       email("oncall@example.com"), chat("https://hooks.slack.com/...")])
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...errors import InvalidArgumentError
from ...events.signing import decode_secrets
from ...events.targets import check_url
from ...validation import (
    DEFAULT_NAMESPACE,
    MAX_SECONDS,
    check_identifier,
    check_label,
    check_queue,
    check_text,
    shorten,
)
from .records import AlertRule, Check, Destination, DestinationKind, RuleKind

_ADDRESS = re.compile(r"[^@\s,<>]+@[^@\s,<>]+")
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([dhms]))", re.ASCII)
_UNITS = {"d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
MAX_COUNT = 1_000
"""job-failures: the longest streak a rule may ask for."""

# Which parameters each kind takes; "threshold"/"count" are required where marked.
_TAKES: dict[RuleKind, tuple[str, ...]] = {
    RuleKind.JOB_FAILURES: ("count", "job"),
    RuleKind.DEAD_RUNS: ("threshold", "task", "queue"),
    RuleKind.QUEUE_DEPTH: ("threshold", "queue"),
    RuleKind.QUEUE_AGE: ("threshold", "queue"),
    RuleKind.SCHEDULER_LAG: ("threshold",),
    RuleKind.SUBSCRIPTION_FAILING: ("subscription",),
    RuleKind.CIRCUIT_OPEN: ("subscription",),
    RuleKind.WORKER_LOST: ("worker",),
    RuleKind.QUEUE_UNSERVED: ("queue",),
    RuleKind.CUSTOM: (),
}
_NEEDS_THRESHOLD = (RuleKind.QUEUE_DEPTH, RuleKind.QUEUE_AGE, RuleKind.SCHEDULER_LAG)
_SECONDS_THRESHOLD = (RuleKind.QUEUE_AGE, RuleKind.SCHEDULER_LAG)


def parse_duration(value: object, field: str) -> float:
    """Seconds from a number or a text like ``90``, ``1.5``, ``30s``, ``15m``, ``12h``,
    ``1d`` or ``1h30m``; refused when negative, not finite or over a century."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{field} must be a number of seconds or like 15m, 12h, 1d")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise InvalidArgumentError(
                    f"{field} must be a number of seconds or like 30s, 15m, 12h, 1d or 1h30m, "
                    f"got {shorten(value)}",
                    field=field,
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise InvalidArgumentError(
            f"{field} must be a number of seconds or like 15m, 12h, 1d, got {shorten(value)}",
            field=field,
        )
    if not 0 <= seconds <= MAX_SECONDS:  # also refuses NaN
        raise InvalidArgumentError(
            f"{field} must be from 0 to {MAX_SECONDS:.0f} seconds, got {shorten(value)}",
            field=field,
        )
    return seconds


# -- destinations --------------------------------------------------------------------------
def webhook(url: str, *, secret: str | Sequence[str] | None = None) -> Destination:
    """A webhook destination: notices POSTed as JSON, signed with ``secret`` (``whsec_...``,
    or several during a rotation) as Standard Webhooks define it, like event deliveries."""
    secrets = [secret] if isinstance(secret, str) else list(secret or ())
    if secrets:
        decode_secrets(secrets)
    return Destination(kind=DestinationKind.WEBHOOK, url=check_url(url), secrets=tuple(secrets))


def chat(url: str) -> Destination:
    """A chat destination: a Slack-compatible incoming webhook, sent ``{"text": ...}``."""
    return Destination(kind=DestinationKind.CHAT, url=check_url(url))


def email(
    to: str | Sequence[str],
    *,
    host: str | None = None,
    port: int | None = None,
    sender: str | None = None,
    username: str | None = None,
    password: str | None = None,
    starttls: bool | None = None,
) -> Destination:
    """An email destination: notices sent over SMTP to ``to``. The server and sender left
    None come from ``CRONBUS_SMTP_HOST``, ``_PORT``, ``_FROM``, ``_USER``, ``_PASSWORD`` and
    ``_STARTTLS`` when the notice is sent."""
    listed = [to] if isinstance(to, str) else list(to)
    addresses = [address.strip() for item in listed for address in str(item).split(",")]
    addresses = [a for a in addresses if a]
    if not addresses:
        raise InvalidArgumentError("an email destination needs at least one address", field="to")
    for address in [*addresses, *([sender] if sender is not None else [])]:
        if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
            raise InvalidArgumentError(
                f"not an email address: {shorten(address)} (like ops@example.com)", field="to"
            )
    if host is not None:
        check_text(host, "SMTP host", max_length=255, spaces=False)
    if port is not None and (isinstance(port, bool) or not 1 <= int(port) <= 65_535):
        raise InvalidArgumentError(f"SMTP port must be 1 to 65535, got {shorten(port)}")
    return Destination(
        kind=DestinationKind.EMAIL,
        to=tuple(addresses),
        host=host,
        port=None if port is None else int(port),
        sender=sender,
        username=username,
        password=password,
        starttls=starttls,
    )


# -- rules ---------------------------------------------------------------------------------
def rule_kind(value: object) -> RuleKind:
    """A rule kind from its name, or an error listing the kinds."""
    try:
        return RuleKind(str(value).strip().lower())
    except ValueError:
        known = ", ".join(k.value for k in RuleKind if k is not RuleKind.CUSTOM)
        raise InvalidArgumentError(
            f"unknown alert rule kind {shorten(value)} (known: {known})", field="kind"
        ) from None


def build_rule(
    kind: str | RuleKind,
    *,
    name: str | None = None,
    to: Sequence[Destination] = (),
    repeat: float | str = 3600.0,
    namespace: str = DEFAULT_NAMESPACE,
    source: str = "store",
    check: Check | None = None,
    created_at: float | None = None,
    **params: Any,
) -> AlertRule:
    """A checked :class:`~.records.AlertRule`. ``params`` are the kind's: ``threshold``,
    ``count``, ``job``, ``queue``, ``task``, ``subscription``, ``worker`` (None: not given).
    The default name is the kind and its scope (``queue-depth-emails``)."""
    chosen = rule_kind(kind)
    given = {k: v for k, v in params.items() if v is not None}
    for key in given:
        if key not in _TAKES[chosen]:
            takes = ", ".join(_TAKES[chosen]) or "no parameter"
            raise InvalidArgumentError(
                f"{key} does not apply to a {chosen.value} rule (it takes {takes})", field=key
            )
    checked = _check_params(chosen, given)
    if chosen is RuleKind.CUSTOM and not callable(check):
        raise InvalidArgumentError("a custom alert rule needs a check function", field="check")
    destinations = tuple(to)
    if not destinations:
        raise InvalidArgumentError(
            "an alert rule needs at least one destination: a webhook, an email or a chat",
            field="to",
        )
    for destination in destinations:
        if not isinstance(destination, Destination):
            raise InvalidArgumentError(
                f"a destination is made with webhook(), email() or chat(), not "
                f"{shorten(destination)}",
                field="to",
            )
    scope = next(
        (
            str(checked[k])
            for k in ("job", "queue", "task", "subscription", "worker")
            if k in checked
        ),
        None,
    )
    default = chosen.value if scope is None else f"{chosen.value}-{scope}"
    return AlertRule(
        name=check_identifier(name if name is not None else _identifier(default), "rule name"),
        kind=chosen,
        namespace=namespace,
        repeat=parse_duration(repeat, "repeat"),
        destinations=destinations,
        source=source,
        check=check,
        created_at=created_at,
        **checked,
    )


def _check_params(kind: RuleKind, given: dict[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    if kind in _NEEDS_THRESHOLD and "threshold" not in given:
        unit = "seconds" if kind in _SECONDS_THRESHOLD else "runs"
        raise InvalidArgumentError(
            f"a {kind.value} rule needs a threshold ({unit})", field="threshold"
        )
    if "threshold" in given:
        if kind in _SECONDS_THRESHOLD:
            checked["threshold"] = parse_duration(given["threshold"], "threshold")
        else:
            checked["threshold"] = float(_whole(given["threshold"], "threshold", 0, 10**12))
    if "count" in given:
        checked["count"] = _whole(given["count"], "count", 1, MAX_COUNT)
    if "queue" in given:
        checked["queue"] = check_queue(given["queue"], "queue")
    for key in ("job", "task", "worker"):
        if key in given:
            checked[key] = check_label(given[key], key)
    if "subscription" in given:
        checked["subscription"] = check_identifier(given["subscription"], "subscription")
    return checked


def _whole(value: object, field: str, low: int, high: int) -> int:
    try:
        number = int(value) if isinstance(value, str) else value
    except ValueError:
        number = value
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise InvalidArgumentError(
            f"{field} must be a whole number from {low} to {high}, got {shorten(value)}",
            field=field,
        )
    return number


def _identifier(text: str) -> str:
    """A default name made of what identifiers allow (a job name may hold other letters)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.:-]", "_", text)
    return cleaned[:200]
