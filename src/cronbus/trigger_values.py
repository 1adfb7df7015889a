"""The values a trigger is built from, checked once, with one-line errors that name the field.

Bounds (the same for the Python API, the CLI and stored specs, since every trigger is built
through these checks):

* times (``at``, ``start``, ``end``, ``anchor``): from 1970-01-01T00:00:00Z to the end of
  9999-12-31 UTC, i.e. ``TIME_MIN <= t < TIME_END`` in epoch seconds. A trigger never fires
  outside that range: a schedule whose next fire would fall after 9999 has none.
* intervals (``every``, ``after``): from 1 ms to 100 years (of 365.25 days), both included.
* jitter: ``>= 0``; below the period for ``every``, at most one day for ``cron`` (a cron's next
  fire scans every nominal time in the jitter window).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .cron_fields import show
from .errors import ConfigurationError
from .wallclock import resolve

__all__ = [
    "CRON_JITTER_MAX",
    "INTERVAL_MAX",
    "INTERVAL_MIN",
    "TIME_END",
    "TIME_MIN",
    "brief",
    "check_after",
    "check_time",
    "interval",
    "number",
    "zone",
]

TIME_MIN = 0.0
"""1970-01-01T00:00:00Z: no trigger time or fire is earlier."""
TIME_END = 253_402_300_800.0
"""10000-01-01T00:00:00Z: every trigger time and fire is earlier."""
INTERVAL_MIN = 0.001
"""The shortest ``every``/``after`` interval: 1 ms."""
INTERVAL_MAX = 100 * 365.25 * 86400.0
"""The longest ``every``/``after`` interval: 100 years of 365.25 days (3,155,760,000 s)."""
CRON_JITTER_MAX = 86400.0
"""The largest jitter of a cron trigger: one day."""


def brief(value: object) -> str:
    """``repr(value)`` cut to 80 characters, for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def zone(name: object) -> ZoneInfo:
    """The zone named ``name``, refusing anything zoneinfo does not know."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"tz must be an IANA time zone name, got {brief(name)}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(
            f"unknown time zone {show(name)}; use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from None


def number(what: str, value: object) -> float:
    """``value`` as a finite float; bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a finite number, got {brief(value)}")
    return float(value)


def interval(what: str, value: object) -> float:
    """A number of seconds (or a timedelta) from 1 ms to 100 years, as a float."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    seconds = number(what, value)
    if not INTERVAL_MIN <= seconds <= INTERVAL_MAX:
        raise ConfigurationError(
            f"{what} must be from 0.001 s (1 ms) to {INTERVAL_MAX:.0f} s (100 years), "
            f"got {brief(value)}"
        )
    return seconds


def check_time(what: str, value: object) -> float:
    """Epoch seconds from 1970-01-01 to 9999-12-31 (UTC), as a float."""
    instant = number(what, value)
    if not TIME_MIN <= instant < TIME_END:
        raise ConfigurationError(
            f"{what} must be a time from 1970-01-01 to 9999-12-31 (epoch seconds 0 to "
            f"{TIME_END - 1:.0f}), got {brief(value)}"
        )
    return instant


def optional_time(what: str, value: object) -> float | None:
    """Epoch seconds within the time bounds, or None."""
    return None if value is None else check_time(what, value)


def check_after(after: object) -> float:
    """``after`` (the time a next fire is asked after) as a finite float; NaN would make every
    comparison false. Any finite time may be asked about; fires stay within the bounds."""
    if isinstance(after, bool) or not isinstance(after, int | float) or not math.isfinite(after):
        raise ConfigurationError(f"after must be finite epoch seconds, got {brief(after)}")
    return float(after)


def iterable(what: str, value: object) -> Iterable[object]:
    """A collection of values; a lone string would be iterated letter by letter."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{what} must be a collection of dates, got {brief(value)}")
    return value


def parse_date(what: str, value: object) -> date:
    """An ISO date string (``"2026-12-25"``) as a date."""
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise ConfigurationError(
        f"{what} holds {brief(value)}, which is not an ISO date like 2026-12-25"
    )


def iso_date(value: object) -> str:
    """A date or ISO date string given to make_trigger, as an ISO date string."""
    if isinstance(value, datetime):
        raise ConfigurationError(f"exclude= takes dates, not date-times: {brief(value)}")
    if isinstance(value, date):
        return value.isoformat()
    return parse_date("exclude=", value).isoformat()


def instant(what: str, value: object, tz: ZoneInfo) -> float | None:
    """A datetime (naive ones read in ``tz``) or epoch seconds, as bounded epoch seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        try:
            value = resolve(tz, value)[0] if value.utcoffset() is None else value.timestamp()
        except (OverflowError, ValueError, OSError):
            # Near year 1 or 9999 a zone's offset takes the time out of datetime's range.
            raise ConfigurationError(
                f"{what}= must be a time from 1970-01-01 to 9999-12-31, got {brief(value)}"
            ) from None
    elif isinstance(value, date):
        raise ConfigurationError(f"{what}= takes a datetime, not a date: {brief(value)}")
    return check_time(f"{what}=", value)


def at_instant(value: object, tz: ZoneInfo) -> float:
    """``at=``: a datetime, epoch seconds or an ISO-8601 string, as epoch seconds."""
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError(
                f"at= {show(text)} is not an ISO-8601 date-time like 2026-05-01T12:00:00+02:00"
            ) from None
    when = instant("at", value, tz)
    assert when is not None  # make_trigger only calls this with at= given
    return when


def refuse_options(kind: str, **given: bool) -> None:
    """Refuse options that mean nothing for ``kind``, naming them."""
    extra = [f"{name}=" for name, present in given.items() if present]
    if extra:
        raise ConfigurationError(f"{kind}= triggers take no {' or '.join(extra)}")
