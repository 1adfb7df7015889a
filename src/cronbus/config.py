"""Settings: defaults, then ``CRONBUS_*`` environment variables, then explicit arguments.

Each setting is read and validated once, here, into a frozen :class:`Settings`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ConfigurationError


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How the roles of one process behave. Times are seconds."""

    lease_seconds: float = 30.0
    """A claimed run belongs to its worker this long past the last heartbeat."""
    heartbeat_fraction: float = 1 / 3
    """Heartbeats renew leases every ``lease_seconds * heartbeat_fraction``."""
    poll_seconds: float = 2.0
    """Idle workers look for work this often even if no wake-up arrives (a safety net)."""
    grace_seconds: float = 30.0
    """On SIGTERM, running attempts have this long to finish before they are requeued."""
    concurrency: int = 8
    """Attempts a worker runs at once."""
    max_lost: int = 10
    """A run whose worker is lost this many times is given up (dead), not requeued again."""
    retry_aging_seconds: float = 60.0
    """A retry waiting longer than this is served like fresh work, so it cannot starve."""
    log_limit: int = 64 * 1024
    """Bytes of logs and stdout kept per attempt."""
    dispatcher_pool: int = 64
    """Pushes a dispatcher runs at once, shared fairly by the subscriptions it holds."""
    dispatcher_lease_seconds: float = 15.0
    """A subscription's pusher belongs to its dispatcher this long past the last renewal."""

    def __post_init__(self) -> None:
        for name in (
            "lease_seconds",
            "poll_seconds",
            "retry_aging_seconds",
            "dispatcher_lease_seconds",
        ):
            _positive(name, getattr(self, name))
        _positive("grace_seconds", self.grace_seconds, allow_zero=True)
        if not 0 < self.heartbeat_fraction <= 0.5:
            raise ConfigurationError(
                f"heartbeat_fraction must be in (0, 0.5], got {self.heartbeat_fraction}: "
                "a lease needs at least two heartbeats to survive one late one"
            )
        for name in ("concurrency", "max_lost", "log_limit", "dispatcher_pool"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def heartbeat_seconds(self) -> float:
        """How often leases are renewed."""
        return self.lease_seconds * self.heartbeat_fraction

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given fields changed (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``CRONBUS_<NAME>`` from ``env`` (default ``os.environ``), then args."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field in fields(cls):
            raw = env.get("CRONBUS_" + field.name.upper())
            if raw is not None and raw.strip():
                values[field.name] = _parse(field.name, raw, field.type)
        return cls(**values).with_overrides(**overrides)


def _parse(name: str, raw: str, kind: Any) -> float | int:
    try:
        return int(raw) if kind in (int, "int") else float(raw)
    except ValueError:
        raise ConfigurationError(
            f"CRONBUS_{name.upper()}={raw!r} is not a {'whole ' if kind == 'int' else ''}number"
        ) from None


def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigurationError(f"{name} must be positive, got {value}")
