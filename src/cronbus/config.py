"""Settings: defaults, then ``CRONBUS_*`` environment variables, then explicit arguments.

Each setting is read and validated once, here, into a frozen :class:`Settings`; a bad one is
refused with its name, the expected kind and the value given (at most 80 characters of it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ConfigurationError, CronbusError
from .serialization import DEFAULT_MAX_PAYLOAD_BYTES
from .validation import shorten

_DAY = 86_400.0


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
    connector_lease_seconds: float = 15.0
    """A connector task belongs to its worker this long past the last renewal: a dead
    worker's tasks move to another worker after about this long."""
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    """Serialized JSON bytes a run's arguments or an event's data may take (1 MiB)."""
    keep_succeeded_seconds: float = 7 * _DAY
    """Retention: succeeded runs are kept this long after they end (a task's ``keep`` wins)."""
    keep_dead_seconds: float = 30 * _DAY
    """Retention: dead runs (dead letters) are kept this long after they end."""
    keep_cancelled_seconds: float = 7 * _DAY
    """Retention: cancelled runs are kept this long after they end."""
    keep_skipped_seconds: float = _DAY
    """Retention: runs skipped by a job's policy are kept this long."""
    keep_acked_seconds: float = 7 * _DAY
    """Retention: acknowledged deliveries (a subscription's ``keep_acked`` wins)."""
    keep_dead_deliveries_seconds: float = 30 * _DAY
    """Retention: dead deliveries (a subscription's ``keep_dead`` wins)."""
    keep_events_seconds: float = 7 * _DAY
    """Retention: events of a topic that sets no retention of its own."""
    retention_period_seconds: float = 300.0
    """How often the holder of the retention lease applies retention."""
    retention_batch: int = 500
    """Rows a retention transaction removes at most (each holds the store's locks briefly)."""
    connector_files: tuple[str, ...] = ()
    """Directories under which ``file-source`` and ``file-sink`` connectors may read and write
    (``CRONBUS_CONNECTOR_FILES``, ``os.pathsep``-separated); none: file connectors are refused."""
    connector_databases: tuple[str, ...] = ()
    """Databases (URLs or DSNs) ``sql-source`` and ``postgres-sink`` connectors may read and
    write (``CRONBUS_CONNECTOR_DATABASES``, separated by ``;`` or newlines); none: they are
    refused. The store's own database is refused even when listed."""
    broadcast_wait_seconds: float = 10.0
    """A broadcast that finds no live worker serving its task and queue waits this long after
    its creation for one to register (workers starting, a cluster coming up), then ends dead
    saying so. Every worker and scheduler checks waiting broadcasts as it reaps."""

    def __post_init__(self) -> None:
        for item in fields(self):
            checked = _check(item.name, getattr(self, item.name), item.name)
            # Lists are kept as tuples whatever sequence was given: the settings stay frozen.
            object.__setattr__(self, item.name, checked)

    @property
    def heartbeat_seconds(self) -> float:
        """How often leases are renewed."""
        return self.lease_seconds * self.heartbeat_fraction

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given fields changed (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``CRONBUS_<NAME>`` from ``env`` (default ``os.environ``), then args.

        A bad variable is reported by its name: ``CRONBUS_LEASE_SECONDS: expected a number of
        seconds, got 'abc'``.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for item in fields(cls):
            variable = "CRONBUS_" + item.name.upper()
            raw = env.get(variable)
            if raw is not None and raw.strip():
                values[item.name] = _check(item.name, _parse(variable, item.name, raw), variable)
        return cls(**values).with_overrides(**overrides)


# Bounds of each setting: (lowest, highest, lowest allowed itself?). Seconds are floats, counts
# are whole numbers; the upper bounds only keep a typo (an extra zero or six) from overflowing.
_SECONDS: dict[str, tuple[float, bool]] = {
    "lease_seconds": (0.0, False),
    "poll_seconds": (0.0, False),
    "retry_aging_seconds": (0.0, False),
    "dispatcher_lease_seconds": (0.0, False),
    "connector_lease_seconds": (0.0, False),
    "grace_seconds": (0.0, True),
    "retention_period_seconds": (0.0, False),
    "keep_succeeded_seconds": (0.0, True),
    "keep_dead_seconds": (0.0, True),
    "keep_cancelled_seconds": (0.0, True),
    "keep_skipped_seconds": (0.0, True),
    "keep_acked_seconds": (0.0, True),
    "keep_dead_deliveries_seconds": (0.0, True),
    "keep_events_seconds": (0.0, True),
    "broadcast_wait_seconds": (0.0, True),
}
_MAX_SECONDS = 365 * 86_400.0
_COUNTS: dict[str, int] = {
    "concurrency": 10_000,
    "max_lost": 1_000_000,
    "log_limit": 1 << 30,
    "dispatcher_pool": 10_000,
    "max_payload_bytes": 1 << 30,
    "retention_batch": 10_000,
}


_LISTS = ("connector_files", "connector_databases")
"""The settings that are lists (of directories, of database URLs)."""


def _parse(variable: str, name: str, raw: str) -> Any:
    """An environment variable's text as the setting's kind, or an error naming the variable."""
    if name in _LISTS:
        # Imported here: the connectors package is not needed to read any other setting.
        from .connectors.allow import split_databases, split_files

        return split_files(raw) if name == "connector_files" else split_databases(raw)
    text = raw.strip()
    try:
        return int(text) if name in _COUNTS else float(text)
    except ValueError:
        raise ConfigurationError(
            f"{variable}: expected {_expected(name)}, got {shorten(raw)}"
        ) from None


def _expected(name: str) -> str:
    if name in _COUNTS:
        return "a whole number"
    return "a number of seconds" if name in _SECONDS else "a number"


def _check(name: str, value: Any, label: str) -> Any:
    """``value`` if it is a valid ``name`` setting, else an error naming ``label``."""
    if name in _LISTS:
        return _check_list(name, value, label)
    if name in _COUNTS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{label}: expected a whole number, got {shorten(value)}")
        if not 1 <= value <= _COUNTS[name]:
            raise ConfigurationError(
                f"{label}: expected a whole number from 1 to {_COUNTS[name]}, got {value}"
            )
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{label}: expected {_expected(name)}, got {shorten(value)}")
    if name == "heartbeat_fraction" and not 0 < value <= 0.5:
        raise ConfigurationError(
            f"{label}: expected a fraction in (0, 0.5], got {shorten(value)}: a lease needs at "
            "least two heartbeats to survive one late one"
        )
    if name in _SECONDS:
        low, zero_ok = _SECONDS[name]
        if value < low or (value == low and not zero_ok):
            bound = "zero or more" if zero_ok else "more than zero"
            raise ConfigurationError(f"{label}: expected {bound} seconds, got {shorten(value)}")
        if value > _MAX_SECONDS:
            raise ConfigurationError(
                f"{label}: expected at most {_MAX_SECONDS:.0f} seconds (a year), got "
                f"{shorten(value)}"
            )
    return value


def _check_list(name: str, value: Any, label: str) -> tuple[str, ...]:
    """A list setting as a tuple of strings, each entry checked: a directory must be absolute
    (a relative one would mean another directory in each process), a database must be a URL or
    DSN that names one."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigurationError(f"{label}: expected a list of strings, got {shorten(value)}")
    entries = tuple(value)
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigurationError(f"{label}: expected non-empty strings, got {shorten(entry)}")
        if name == "connector_files" and not os.path.isabs(entry):
            raise ConfigurationError(
                f"{label}: expected absolute directories, got {shorten(entry)}"
            )
    if name == "connector_databases":
        from .connectors.allow import database_key

        for entry in entries:
            try:
                database_key(entry, label)
            except CronbusError as exc:
                raise ConfigurationError(str(exc)) from None
    return entries
