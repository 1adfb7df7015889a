"""Settings of alerting: how often rules are evaluated, and the SMTP server emails go through.

Read once from ``CRONBUS_*`` environment variables (or given), frozen after; an email
destination's own fields win over these. The password is never shown (``repr`` masks it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from ...errors import ConfigurationError
from ...validation import shorten

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertSettings:
    """Alerting's settings (environment variable: ``CRONBUS_`` + the field's name upper-cased,
    ``smtp_host`` is ``CRONBUS_SMTP_HOST``)."""

    alert_seconds: float = 5.0
    """Seconds between two evaluations of every rule."""
    alert_lease_seconds: float = 30.0
    """The evaluator's lease (one process of the cluster evaluates): another process takes over
    about this long after the holder died."""
    alert_send_seconds: float = 10.0
    """The longest a notice may take to reach one destination before it counts as failed."""
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 25
    smtp_from: str = "cronbus@localhost"
    smtp_user: str | None = None
    smtp_password: str | None = field(default=None, repr=False)
    smtp_starttls: bool = False

    def __post_init__(self) -> None:
        for name in ("alert_seconds", "alert_lease_seconds", "alert_send_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigurationError(
                    f"CRONBUS_{name.upper()}: expected more than zero seconds, got {shorten(value)}"
                )
        if not 1 <= self.smtp_port <= 65_535:
            raise ConfigurationError(
                f"CRONBUS_SMTP_PORT: expected a port from 1 to 65535, got {self.smtp_port}"
            )

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> AlertSettings:
        """The defaults, then ``CRONBUS_*`` from ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for item in fields(cls):
            variable = f"CRONBUS_{item.name.upper()}"
            raw = env.get(variable)
            if raw is None:
                continue
            value = _parse(variable, item.name, raw)
            if value is not None or item.default is None:  # empty: the default
                values[item.name] = value
        return cls(**values)  # type: ignore[arg-type]


def _parse(variable: str, name: str, raw: str) -> object:
    text = raw.strip()
    if name == "smtp_starttls":
        if text.lower() not in _TRUE + _FALSE:
            raise ConfigurationError(f"{variable}: expected true or false, got {shorten(raw)}")
        return text.lower() in _TRUE
    if name == "smtp_port":
        try:
            return int(text)
        except ValueError:
            raise ConfigurationError(f"{variable}: expected a port, got {shorten(raw)}") from None
    if name.endswith("_seconds"):
        try:
            return float(text)
        except ValueError:
            raise ConfigurationError(
                f"{variable}: expected a number of seconds, got {shorten(raw)}"
            ) from None
    return text or None
