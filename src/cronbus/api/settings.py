"""Settings of the HTTP API and its console: defaults, then ``CRONBUS_API_*`` (and
``CRONBUS_CONSOLE_*``) environment variables, then explicit arguments (as
:class:`cronbus.config.Settings` reads the roles' settings).

A bad variable is refused with its name, the expected kind and the value given.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import ConfigurationError
from ..validation import shorten

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiSettings:
    """How the HTTP API admits requests."""

    rate: int = 1200
    """Requests per minute one token may send, sustained (``CRONBUS_API_RATE``)."""
    burst: int = 0
    """Requests one token may send at once after a quiet spell (``CRONBUS_API_BURST``);
    0 means as many as ``rate``, a minute's worth."""
    max_body: int = 2 * MIB
    """Bytes a request body may hold (``CRONBUS_API_MAX_BODY``); a larger one gets 413."""
    idempotency_ttl: float = 86_400.0
    """Seconds an ``Idempotency-Key`` and its answer are kept (``CRONBUS_API_IDEMPOTENCY_TTL``)."""
    console_idle_seconds: float = field(
        default=8 * 3600.0, metadata={"env": "CRONBUS_CONSOLE_IDLE_SECONDS"}
    )
    """Seconds a console session lives without a request (``CRONBUS_CONSOLE_IDLE_SECONDS``)."""
    console_lifetime_seconds: float = field(
        default=7 * 86_400.0, metadata={"env": "CRONBUS_CONSOLE_LIFETIME_SECONDS"}
    )
    """Seconds a console session lives at most, however busy, and never past its token's
    expiry (``CRONBUS_CONSOLE_LIFETIME_SECONDS``)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or networks (``10.0.0.0/8``) of the reverse proxies whose
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed (``CRONBUS_API_TRUSTED_PROXIES``,
    separated by commas); none by default: the peer's own address and scheme count."""
    auth_failure_burst: int = 20
    """Failed token lookups (API or console login) one client address may make at once
    (``CRONBUS_API_AUTH_FAILURE_BURST``); beyond that its requests get 429."""
    auth_failures: int = 10
    """Failed token lookups a minute one client address may make, sustained
    (``CRONBUS_API_AUTH_FAILURES``): the rate its allowance refills at."""
    auth_addresses: int = 10_000
    """Client addresses whose failures are remembered (``CRONBUS_API_AUTH_ADDRESSES``): the
    least recently failing are forgotten first, so memory stays bounded."""

    def __post_init__(self) -> None:
        for item in fields(self):
            _check(item.name, getattr(self, item.name), item.name)

    @property
    def bucket_size(self) -> int:
        """How many requests a token may send at once."""
        return self.burst or self.rate

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ApiSettings:
        """Defaults, then ``CRONBUS_API_<NAME>`` from ``env`` (default ``os.environ``), then
        ``overrides`` (``None`` values are ignored)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for item in fields(cls):
            variable = item.metadata.get("env", "CRONBUS_API_" + item.name.upper())
            raw = env.get(variable)
            if raw is not None and raw.strip():
                values[item.name] = _check(item.name, _parse(variable, item.name, raw), variable)
        settings = cls(**values)
        return replace(settings, **{k: v for k, v in overrides.items() if v is not None})


# Upper bounds only keep a typo (an extra zero or six) from meaning something absurd.
_COUNTS: dict[str, tuple[int, int]] = {
    "rate": (1, 10_000_000),
    "burst": (0, 10_000_000),
    "max_body": (1, 1 << 30),
    "auth_failure_burst": (1, 10_000_000),
    "auth_failures": (1, 10_000_000),
    "auth_addresses": (1, 10_000_000),
}
_SECONDS: dict[str, tuple[float, float]] = {
    "idempotency_ttl": (1.0, 365 * 86_400.0),
    "console_idle_seconds": (60.0, 365 * 86_400.0),
    "console_lifetime_seconds": (60.0, 365 * 86_400.0),
}
_LISTS = frozenset({"trusted_proxies"})


def _parse(variable: str, name: str, raw: str) -> Any:
    text = raw.strip()
    if name in _LISTS:
        return tuple(part for part in re.split(r"[\s,]+", text) if part)
    try:
        return int(text) if name in _COUNTS else float(text)
    except ValueError:
        kind = "a whole number" if name in _COUNTS else "a number of seconds"
        raise ConfigurationError(f"{variable}: expected {kind}, got {shorten(raw)}") from None


def _check(name: str, value: Any, label: str) -> Any:
    if name in _LISTS:
        return _check_networks(value, label)
    if name in _COUNTS:
        low, high = _COUNTS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigurationError(
                f"{label}: expected a whole number from {low} to {high}, got {shorten(value)}"
            )
        return value
    low_s, high_s = _SECONDS[name]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low_s <= value <= high_s
    ):
        raise ConfigurationError(
            f"{label}: expected seconds from {low_s:.0f} to {high_s:.0f}, got {shorten(value)}"
        )
    return value


def _check_networks(value: Any, label: str) -> tuple[str, ...]:
    """Addresses or networks, as given (each must parse: a typo would trust nobody silently)."""
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise ConfigurationError(f"{label}: expected a list of addresses, got {shorten(value)}")
    for item in value:
        try:
            ipaddress.ip_network(item, strict=False)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"{label}: expected addresses or networks (127.0.0.1, 10.0.0.0/8), "
                f"got {shorten(item)}"
            ) from None
    return tuple(value)
