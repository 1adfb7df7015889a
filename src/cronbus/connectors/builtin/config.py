"""Reading a built-in connector's config: each field checked once, every error naming it.

Each connector of this package reads its config through :class:`Fields`, so the messages
are alike (``config.table: required``, ``config.poll_seconds: must be a number > 0, not
'x'``) and a misspelt field (``poll_second``) is refused instead of silently ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from ...errors import ConnectorConfigError, InvalidArgumentError
from ...validation import RESERVED_PREFIX, check_event_type, check_topic, shorten
from ..api import JSON

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}", re.ASCII)
"""An SQL name part; 63 characters is PostgreSQL's limit (NAMEDATALEN - 1)."""

SQLITE_SCHEMES = ("sqlite",)
"""The URL scheme of an SQLite database file."""
POSTGRES_SCHEMES = ("postgresql", "postgres")
"""The URL schemes libpq accepts for PostgreSQL."""


def config_error(name: str, rule: str, value: object) -> ConnectorConfigError:
    """The error for field ``name`` whose ``value`` breaks ``rule``."""
    return ConnectorConfigError(
        f"config.{name}: {rule}, not {shorten(value)}", field=f"config.{name}"
    )


class Fields:
    """The fields of one config, read one at a time; :meth:`done` refuses those never read."""

    def __init__(self, config: object) -> None:
        if not isinstance(config, Mapping):
            raise ConnectorConfigError(
                f"config: must be a JSON object, not {type(config).__name__}", field="config"
            )
        self._config: Mapping[str, JSON] = config
        self._read: set[str] = set()

    def _get(self, name: str) -> JSON:
        self._read.add(name)
        return self._config.get(name)

    def text(self, name: str, default: str | None = None) -> str:
        """A non-empty string; ``default`` when absent (required when there is none)."""
        value = self._get(name)
        if value is None:
            if default is None:
                raise ConnectorConfigError(f"config.{name}: required", field=f"config.{name}")
            return default
        if not isinstance(value, str) or not value.strip():
            raise config_error(name, "must be a non-empty string", value)
        return value

    def number(self, name: str, default: float) -> float:
        """A finite number > 0 (seconds, most often)."""
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise config_error(name, "must be a number > 0", value)
        if not math.isfinite(value) or value <= 0:
            raise config_error(name, "must be a number > 0", value)
        return float(value)

    def integer(self, name: str, default: int, *, high: int) -> int:
        """A whole number from 1 to ``high``."""
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise config_error(name, f"must be a whole number from 1 to {high}", value)
        return value

    def identifier(self, name: str, default: str | None = None, *, qualified: bool) -> str:
        """An SQL name (``[A-Za-z_][A-Za-z0-9_]*``); ``qualified`` allows ``schema.name``."""
        value = self.text(name, default)
        parts = value.split(".")
        if len(parts) > (2 if qualified else 1) or not all(map(_IDENTIFIER.fullmatch, parts)):
            shape = "name or schema.name" if qualified else "name"
            raise config_error(name, f"must be an SQL {shape} of letters, digits and _", value)
        return value

    def topic(self, *, publish: bool) -> str:
        """The topic the connector reads from, or (``publish``) writes to."""
        value = self.text("topic")
        try:
            check_topic(value)
        except InvalidArgumentError:
            raise config_error(
                "topic",
                "must be 1 to 200 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit",
                value,
            ) from None
        if publish and value.startswith(RESERVED_PREFIX):
            raise config_error(
                "topic", f"must not start with {RESERVED_PREFIX!r} (cronbus's own)", value
            )
        return value

    def event_type(self, name: str, default: str) -> str:
        """A CloudEvents ``type`` (no whitespace, at most 200 characters)."""
        value = self.text(name, default)
        try:
            return check_event_type(value, name)
        except InvalidArgumentError as exc:
            raise config_error(name, _rule(exc, name), value) from None

    def url(self, name: str, schemes: tuple[str, ...]) -> str:
        """A database URL with one of ``schemes`` (an SQLite one must name a file)."""
        value = self.text(name).strip()
        scheme = urlsplit(value).scheme.lower()
        if scheme not in schemes:
            spelled = " or ".join(f"{s}://…" for s in schemes)
            raise config_error(name, f"must be a {spelled} URL", value)
        if scheme == "sqlite":
            sqlite_path(value, name)
        return value

    def done(self) -> None:
        """Refuse the fields nobody read: a typo must not fall back to a default unnoticed."""
        unknown = sorted(set(self._config) - self._read)
        if unknown:
            known = ", ".join(sorted(self._read))
            raise ConnectorConfigError(
                f"config.{unknown[0]}: unknown field (this kind reads {known})",
                field=f"config.{unknown[0]}",
            )


def sqlite_path(url: str, name: str = "url") -> str:
    """The file of an ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL."""
    parts = urlsplit(url.strip())
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if parts.netloc or parts.query or not path:
        raise config_error(
            name,
            "must be sqlite:///relative.db or sqlite:////absolute.db (no host, no options)",
            url,
        )
    return path


def quote(identifier: str, mark: str = '"') -> str:
    """An identifier :meth:`Fields.identifier` accepted, quoted with ``mark``.

    Quoting lets reserved words through (a table named ``order``); the names are then
    case-sensitive on PostgreSQL, exactly as configured. SQLite needs ``mark="`"``: it reads
    a double-quoted name that matches no column as a string literal, so a misspelt key would
    compare a constant instead of failing.
    """
    return ".".join(f"{mark}{part}{mark}" for part in identifier.split("."))


def _rule(exc: InvalidArgumentError, name: str) -> str:
    """The rule of a validation message (``type must not … , got …`` → ``must not …``)."""
    text = str(exc).removeprefix(name).strip()
    return text.rsplit(", got ", 1)[0]
