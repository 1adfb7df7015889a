"""Settings of the HTTP API: defaults, then ``CRONBUS_API_*`` environment variables, then
explicit arguments (as :class:`cronbus.config.Settings` reads the roles' settings).

A bad variable is refused with its name, the expected kind and the value given.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
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
            variable = "CRONBUS_API_" + item.name.upper()
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
}
_SECONDS: dict[str, tuple[float, float]] = {"idempotency_ttl": (1.0, 365 * 86_400.0)}


def _parse(variable: str, name: str, raw: str) -> Any:
    text = raw.strip()
    try:
        return int(text) if name in _COUNTS else float(text)
    except ValueError:
        kind = "a whole number" if name in _COUNTS else "a number of seconds"
        raise ConfigurationError(f"{variable}: expected {kind}, got {shorten(raw)}") from None


def _check(name: str, value: Any, label: str) -> Any:
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
