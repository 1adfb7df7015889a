"""Cron expressions: which naive wall-clock times match, and the next one after a time.

:func:`compile_cron` reads an expression once into a :class:`CronSchedule`, whose
:meth:`~CronSchedule.next_after` returns the first matching wall-clock second strictly after a
given one. Zones and daylight saving time are not this module's business: the ``Cron`` trigger
maps wall-clock times to instants (see :mod:`cronbus.triggers`).

Forms, by the number of fields:

* 5: ``minute hour day-of-month month day-of-week``, Vixie cron;
* 6: ``second minute hour day-of-month month day-of-week``, cron with the seconds first;
* 6 with ``?`` in a day field: the same order, read as Quartz;
* 7: Quartz's six and a ``year`` (a ``?`` is required);
* 1: ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.

Which days fire (see :mod:`cronbus.cron_fields` for the items of each field):

* cron: as in Vixie cron, when day-of-month and day-of-week are both restricted, a day fires
  when *either* matches; when either field starts with ``*`` (``*``, ``*/2``) or is ``?``, a
  day must match both (the ``*`` one matching every day it allows). ``n#k`` and ``nL`` weekdays
  are weekdays like any other here, as in cronsim.
* Quartz: exactly one of the two day fields is ``?``; the other one decides. Weekdays are 1-7
  for ``SUN-SAT``; ``L`` alone in day-of-week is Saturday; the year field takes 1970-2199.

An expression that can never fire (``0 0 30 2 *``) is refused when it is compiled. A schedule
has no fire after 9999-12-31 23:59:59.
"""

from __future__ import annotations

import calendar
import functools
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime

from .cron_fields import (
    CRON,
    HOUR,
    MINUTE,
    MONTH,
    QUARTZ,
    SECOND,
    YEAR,
    DayOfMonth,
    DayOfWeek,
    FieldError,
    parse_day_of_month,
    parse_day_of_week,
    parse_values,
    show,
)
from .errors import ConfigurationError

__all__ = ["MAX_LENGTH", "CronSchedule", "compile_cron"]

MAX_LENGTH = 1000
"""The longest expression accepted, in characters (every second and minute listed is 340)."""

_ALIASES = {
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
    "@MONTHLY": "0 0 1 * *",
    "@WEEKLY": "0 0 * * 0",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@HOURLY": "0 * * * *",
}
_FIELDS_5 = "minute hour day-of-month month day-of-week"
_FIELDS_6 = "second minute hour day-of-month month day-of-week"
_HINTS = {
    "5": f"read as 5 fields: {_FIELDS_5} (6 fields put the seconds first)",
    "6": f"read as 6 fields: {_FIELDS_6} (seconds first; with ? it is read as Quartz)",
    "Quartz": f"read as Quartz: {_FIELDS_6} [year], weekdays 1-7 = SUN-SAT",
    "count": f"use 5 fields ({_FIELDS_5}), 6 fields ({_FIELDS_6}) or Quartz's 7 (… year)",
}
_LAST_YEAR = 9999
_SCAN_MONTHS = 400 * 12  # the Gregorian calendar repeats every 400 years


@dataclass(frozen=True, slots=True, eq=False)
class CronSchedule:
    """The wall-clock times a cron expression matches (naive datetimes, whole seconds)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    years: tuple[int, ...] | None
    day_of_month: DayOfMonth | None  # None: any day
    day_of_week: DayOfWeek | None  # None: any day
    either: bool  # a day fires when either day field matches (Vixie's OR), else both
    # Days that fire, by (weekday of the 1st, month length): a month's days depend on nothing
    # else. A memo filled lazily; threads racing on it store equal values.
    _days: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False
    )

    def next_after(self, wall: datetime) -> datetime | None:
        """The first matching wall-clock second strictly after ``wall``, None past year 9999."""
        later = self._time_from(wall.hour, wall.minute, wall.second + 1)
        if later is not None and wall.day in self.month_days(wall.year, wall.month):
            return datetime(wall.year, wall.month, wall.day, *later)
        found = self._day_after(wall.year, wall.month, wall.day)
        if found is None:
            return None
        return datetime(*found, self.hours[0], self.minutes[0], self.seconds[0])

    def matches(self, wall: datetime) -> bool:
        """Whether the wall-clock time ``wall`` (its whole second) matches."""
        return (
            wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.day in self.month_days(wall.year, wall.month)
        )

    def month_days(self, year: int, month: int) -> tuple[int, ...]:
        """The days of ``year``-``month`` that fire, in order (empty for a month that does not)."""
        if month not in self.months or (self.years is not None and year not in self.years):
            return ()
        first, length = calendar.monthrange(year, month)
        return self._days_of(first, length)

    def _days_of(self, first_monday: int, length: int) -> tuple[int, ...]:
        """The days that fire in a month of ``length`` days whose 1st is ``first_monday``
        (0 is Monday, as ``calendar`` counts)."""
        key = (first_monday, length)
        days = self._days.get(key)
        if days is None:
            first = (first_monday + 1) % 7  # 0 is Sunday, as cron counts
            dom, dow = self.day_of_month, self.day_of_week
            by_date = None if dom is None else dom.matches(length, first)
            by_weekday = None if dow is None else dow.matches(length, first)
            if by_date is None or by_weekday is None:
                chosen = by_date if by_weekday is None else by_weekday
                found = set(range(1, length + 1)) if chosen is None else chosen
            else:
                found = by_date | by_weekday if self.either else by_date & by_weekday
            days = self._days[key] = tuple(sorted(found))
        return days

    def _time_from(self, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
        """The first matching time of day at or after ``hour:minute:second`` (second may be 60)."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        h = bisect_left(hours, hour)
        if h == len(hours):
            return None
        if hours[h] != hour:
            return hours[h], minutes[0], seconds[0]
        m = bisect_left(minutes, minute)
        if m < len(minutes):
            if minutes[m] != minute:
                return hour, minutes[m], seconds[0]
            s = bisect_left(seconds, second)
            if s < len(seconds):
                return hour, minute, seconds[s]
            if m + 1 < len(minutes):
                return hour, minutes[m + 1], seconds[0]
        if h + 1 < len(hours):
            return hours[h + 1], minutes[0], seconds[0]
        return None

    def _day_after(self, year: int, month: int, day: int) -> tuple[int, int, int] | None:
        """The first date strictly after ``year-month-day`` that fires, within 400 years."""
        for _ in range(_SCAN_MONTHS + 1):
            if self.years is not None and year not in self.years:
                later = bisect_right(self.years, year)
                if later == len(self.years):
                    return None
                year, month, day = self.years[later], 1, 0
            if year > _LAST_YEAR:
                return None
            days = self.month_days(year, month)
            found = bisect_right(days, day)
            if found < len(days):
                return year, month, days[found]
            year, month, day = (year + 1, 1, 0) if month == 12 else (year, month + 1, 0)
        return None


@functools.lru_cache(maxsize=4096)
def compile_cron(expr: str) -> CronSchedule:
    """The schedule of ``expr``, or a ConfigurationError of one line that quotes it as typed.

    Cached: a scheduler with thousands of jobs on a few schedules reads each one once.
    """
    if len(expr) > MAX_LENGTH:
        raise ConfigurationError(
            f"invalid cron expression {show(expr)}: {len(expr)} characters long; "
            f"at most {MAX_LENGTH}"
        )
    parts = expr.split()
    if len(parts) == 1 and parts[0].startswith("@"):
        alias = _ALIASES.get(parts[0].upper())
        if alias is None:
            raise ConfigurationError(
                f"invalid cron expression {show(expr)}: unknown alias; use one of "
                + ", ".join(name.lower() for name in _ALIASES)
            )
        parts = alias.split()
    try:
        return _compile(parts)
    except FieldError as exc:
        raise ConfigurationError(
            f"invalid cron expression {show(expr)}: {exc}; {_HINTS[_form(parts)]}"
        ) from None


def _form(parts: list[str]) -> str:
    """Which hint explains how ``parts`` were read."""
    if len(parts) == 7 or (len(parts) == 6 and "?" in parts):
        return "Quartz"
    return str(len(parts)) if len(parts) in (5, 6) else "count"


def _compile(parts: list[str]) -> CronSchedule:
    """Read the fields; raise FieldError saying what is wrong."""
    if len(parts) not in (5, 6, 7):
        raise FieldError(f"{len(parts)} field(s)")
    _refuse_drawn(parts)
    quartz = _form(parts) == "Quartz"
    if quartz:
        _check_quartz_days(parts)
    elif len(parts) == 5 and "?" in parts[:2] + parts[3:4]:
        raise FieldError("? stands only in day-of-month or day-of-week")
    if len(parts) == 5:
        parts = ["0", *parts]
    dialect = QUARTZ if quartz else CRON
    dom_text, dow_text = parts[3], parts[5]
    years = None
    if len(parts) == 7:
        years = tuple(sorted(parse_values(parts[6], YEAR, dialect)))
    schedule = CronSchedule(
        seconds=tuple(sorted(parse_values(parts[0], SECOND, dialect))),
        minutes=tuple(sorted(parse_values(parts[1], MINUTE, dialect))),
        hours=tuple(sorted(parse_values(parts[2], HOUR, dialect))),
        months=parse_values(parts[4], MONTH, dialect),
        years=years,
        day_of_month=None if _any_day(dom_text) else parse_day_of_month(dom_text, dialect),
        day_of_week=None if _any_day(dow_text) else parse_day_of_week(dow_text, dialect),
        # Vixie: a day field starting with * (even */2) makes the two fields AND'd.
        either=not (dom_text.startswith(("*", "?")) or dow_text.startswith(("*", "?"))),
    )
    _refuse_never(schedule)
    return schedule


def _any_day(text: str) -> bool:
    """Whether a day field allows every day (``*``, ``?``)."""
    return text in ("*", "?")


def _check_quartz_days(parts: list[str]) -> None:
    """Quartz wants ``?`` in exactly one of the two day fields, and nowhere else."""
    if "?" in parts[:3] + parts[4:5] + parts[6:]:
        raise FieldError("? stands only in day-of-month or day-of-week")
    if parts[3] == "?" and parts[5] == "?":
        raise FieldError("Quartz wants ? in only one of day-of-month and day-of-week")
    if "?" not in (parts[3], parts[5]):
        raise FieldError(
            "7 fields are read as Quartz, which wants ? in day-of-month or day-of-week, "
            "e.g. '0 15 10 ? * MON-FRI 2030'"
        )


def _refuse_drawn(parts: list[str]) -> None:
    """Refuse croniter's R (random) and H (hashed) values, which a trigger cannot honour."""
    for item in ",".join(parts).upper().split(","):
        head = item.partition("(")[0].partition("/")[0]
        if head in ("R", "H"):
            # R draws its values at random in each process, so schedulers would disagree; H
            # needs a per-job seed that a trigger does not have.
            raise FieldError("R (random) and H (hashed) values are not supported; write the values")


def _refuse_never(schedule: CronSchedule) -> None:
    """Refuse a schedule with no fire, by trying each kind of month it allows.

    A month's days depend only on its length and the weekday of its 1st, and every pair occurs
    in any 400 years; with a year field, the years themselves are tried.
    """
    if schedule.years is not None:
        if any(schedule.month_days(y, m) for y in schedule.years for m in range(1, 13)):
            return
        raise FieldError("it never fires in the years given (no such date in them)")
    for month in sorted(schedule.months):
        lengths = (28, 29) if month == 2 else (calendar.monthrange(2001, month)[1],)
        for length in lengths:
            if any(schedule._days_of(first, length) for first in range(7)):
                return
    raise FieldError("it never fires (no such date, e.g. February 30)")
