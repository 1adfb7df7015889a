"""Cron fields: from the text a user typed to the values it matches (pure, no clock).

Two dialects read the same items with different weekday numbers:

* **cron** (Vixie cron, 5 fields, or 6 with the seconds first): weekdays ``0-7``, where 0 and 7
  are Sunday; a reversed range (``5-1``) is refused.
* **Quartz** (6 or 7 fields with ``?`` in a day field): weekdays ``1-7`` are ``SUN-SAT``, ``L``
  alone in day-of-week is Saturday, and a reversed range wraps around (``FRI-MON``,
  ``22-2``), as Quartz's ``CronExpression`` reads them.

Items, in both: ``*``, ``N``, ``N-M``, ``*/S``, ``N/S`` (from N to the field's end), ``N-M/S``,
lists of these; month and weekday names (``JAN``, ``MON``, any case). Day of month also takes
``L`` (last day), ``L-n`` (n days before the last), ``LW`` (last weekday, Monday-Friday) and
``nW`` (the weekday nearest day n, within the month); day of week takes ``nL`` (the last weekday
n of the month, also ``Ln`` in the cron dialect) and ``n#k`` (the k-th weekday n, k in 1-5).
Errors are :class:`FieldError` carrying one line that quotes the field as typed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CRON",
    "QUARTZ",
    "DayOfMonth",
    "DayOfWeek",
    "Dialect",
    "FieldError",
    "FieldSpec",
    "parse_day_of_month",
    "parse_day_of_week",
    "parse_values",
    "show",
]

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DIGITS = frozenset("0123456789")
_SHOWN = 80  # characters of a user's text an error message quotes at most


class FieldError(ValueError):
    """A field cannot be read; the message is one line naming the field and quoting it."""


def show(text: str) -> str:
    """``text`` quoted for an error message: at most 80 characters, on one line."""
    cut = text[:_SHOWN] + ("…" if len(text) > _SHOWN else "")
    return repr(cut)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field: its name, its range and the names that stand for numbers (from ``first``)."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first: int = 0

    def value(self, token: str, item: str) -> int:
        """The number ``token`` (a part of ``item``) stands for, checked against the range."""
        upper = token.upper()
        if upper in self.names:
            return self.names.index(upper) + self.first
        # Name the item, and the part of it that is wrong when that is not the whole item.
        where = f"{self.name} {show(item)}" + (f": {show(token)}" if token != item else "")
        if not token or not set(token) <= _DIGITS:
            named = f" or a name ({self.names[0]}-{self.names[-1]})" if self.names else ""
            raise FieldError(f"{where} is not a number ({self.low}-{self.high}){named}")
        number = int(token)
        if not self.low <= number <= self.high:
            raise FieldError(f"{where} is out of range {self.low}-{self.high}")
        return number


@dataclass(frozen=True, slots=True)
class Dialect:
    """How weekdays are numbered and whether reversed ranges wrap around."""

    name: str
    weekday: FieldSpec
    wrap: bool

    def weekday_index(self, value: int) -> int:
        """A weekday number of this dialect as 0-6, Sunday first."""
        return (value - self.weekday.first) % 7


CRON = Dialect("cron", FieldSpec("day-of-week", 0, 7, _DAYS, 0), wrap=False)
QUARTZ = Dialect("Quartz", FieldSpec("day-of-week", 1, 7, _DAYS, 1), wrap=True)
SECOND = FieldSpec("second", 0, 59)
MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DAY = FieldSpec("day-of-month", 1, 31)
MONTH = FieldSpec("month", 1, 12, _MONTHS, 1)
YEAR = FieldSpec("year", 1970, 2199)


def parse_values(text: str, spec: FieldSpec, dialect: Dialect) -> frozenset[int]:
    """The values a plain field (no ``L``, ``W`` or ``#``) matches."""
    values: set[int] = set()
    for item in text.split(","):
        values.update(_item(item, text, spec, dialect))
    return frozenset(values)


def _item(item: str, text: str, spec: FieldSpec, dialect: Dialect) -> list[int]:
    """The values of one list item: ``*``, ``N``, ``N-M``, each with an optional ``/step``."""
    if not item:
        raise FieldError(f"{spec.name} {show(text)} has an empty list item")
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text or not set(step_text) <= _DIGITS or int(step_text) == 0:
            raise FieldError(f"{spec.name} {show(item)}: the step must be a whole number >= 1")
        step = int(step_text)
    if base == "*":
        low, high = spec.low, spec.high
    elif "-" in base:
        start, _, stop = base.partition("-")
        low, high = spec.value(start, item), spec.value(stop, item)
    else:
        low = spec.value(base, item)
        high = spec.high if slash else low  # N/S runs from N to the end of the field
    if low <= high:
        return list(range(low, high + 1, step))
    if not dialect.wrap:
        raise FieldError(
            f"{spec.name} {show(item)} runs backwards; write it as a list, "
            f"e.g. '{low}-{spec.high},{spec.low}-{high}'"
        )
    # Quartz reads a reversed range as wrapping past the field's end: 22-2 is 22,23,0,1,2.
    wrapped = list(range(low, spec.high + 1)) + list(range(spec.low, high + 1))
    return wrapped[::step]


@dataclass(frozen=True, slots=True)
class DayOfMonth:
    """A day-of-month field: plain days, days counted from the end, nearest weekdays."""

    days: frozenset[int] = frozenset()
    from_end: frozenset[int] = frozenset()  # L is 0, L-3 is 3
    nearest: frozenset[int] = frozenset()  # 15W is 15
    last_weekday: bool = False  # LW

    def matches(self, length: int, first: int) -> set[int]:
        """The days it matches in a month of ``length`` days whose 1st is weekday ``first``."""
        found = {d for d in self.days if d <= length}
        found.update(length - n for n in self.from_end if length - n >= 1)
        found.update(_nearest_weekday(d, length, first) for d in self.nearest if d <= length)
        if self.last_weekday:
            found.add(_nearest_weekday(length, length, first))
        return found


def _nearest_weekday(day: int, length: int, first: int) -> int:
    """The Monday-Friday nearest ``day``, never leaving the month (Quartz's ``W``)."""
    weekday = (first + day - 1) % 7  # 0 is Sunday
    if weekday == 6:  # Saturday: the Friday before, or Monday the 3rd for the 1st
        return day + 2 if day == 1 else day - 1
    if weekday == 0:  # Sunday: the Monday after, or the Friday before for the last day
        return day - 2 if day == length else day + 1
    return day


@dataclass(frozen=True, slots=True)
class DayOfWeek:
    """A day-of-week field: weekdays (0-6, Sunday first), n-th and last weekdays of a month."""

    weekdays: frozenset[int] = frozenset()
    nth: frozenset[tuple[int, int]] = frozenset()  # (weekday, k): the k-th weekday
    last: frozenset[int] = frozenset()  # the last weekday of the month

    def matches(self, length: int, first: int) -> set[int]:
        """The days it matches in a month of ``length`` days whose 1st is weekday ``first``."""
        found: set[int] = set()
        for weekday in self.weekdays:
            found.update(range(1 + (weekday - first) % 7, length + 1, 7))
        for weekday, k in self.nth:
            day = 1 + (weekday - first) % 7 + 7 * (k - 1)
            if day <= length:
                found.add(day)
        for weekday in self.last:
            found.add(length - (first + length - 1 - weekday) % 7)
        return found


def parse_day_of_month(text: str, dialect: Dialect) -> DayOfMonth:
    """Read a day-of-month field (not ``*`` or ``?``, which the caller reads as any day)."""
    days: set[int] = set()
    from_end: set[int] = set()
    nearest: set[int] = set()
    last_weekday = False
    for item in text.split(","):
        upper = item.upper()
        if upper == "LW":
            last_weekday = True
        elif upper == "L":
            from_end.add(0)
        elif upper.startswith("L-"):
            offset = upper[2:]
            if not offset or not set(offset) <= _DIGITS or not 1 <= int(offset) <= 30:
                raise FieldError(
                    f"day-of-month {show(item)}: L-n takes n from 1 to 30 (days before the "
                    "last day); W cannot follow it, write LW for the last weekday"
                )
            from_end.add(int(offset))
        elif upper.endswith("W") and "L" not in upper:
            nearest.add(DAY.value(item[:-1], item))
        else:
            days.update(_item(item, text, DAY, dialect))
    return DayOfMonth(frozenset(days), frozenset(from_end), frozenset(nearest), last_weekday)


def parse_day_of_week(text: str, dialect: Dialect) -> DayOfWeek:
    """Read a day-of-week field (not ``*`` or ``?``, which the caller reads as any day)."""
    spec = dialect.weekday
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for item in text.split(","):
        upper = item.upper()
        if "#" in upper:
            day, _, k = item.partition("#")
            if not k or not set(k) <= _DIGITS or not 1 <= int(k) <= 5:
                raise FieldError(
                    f"day-of-week {show(item)}: n#k takes k from 1 to 5 (the k-th weekday n "
                    "of the month)"
                )
            nth.add((dialect.weekday_index(spec.value(day, item)), int(k)))
        elif upper == "L":
            if dialect is not QUARTZ:
                raise FieldError(
                    "day-of-week 'L' alone means Saturday only in Quartz; write 6 or SAT, "
                    "or nL for the last weekday n of the month (5L: the last Friday)"
                )
            last_day = spec.value("SAT", item)
            weekdays.add(dialect.weekday_index(last_day))
        elif upper.endswith("L"):
            last.add(dialect.weekday_index(spec.value(item[:-1], item)))
        elif upper.startswith("L") and dialect is CRON and upper[1:].isdigit():
            last.add(dialect.weekday_index(spec.value(item[1:], item)))  # croniter's L5 form
        else:
            weekdays.update(dialect.weekday_index(v) for v in _item(item, text, spec, dialect))
    return DayOfWeek(frozenset(weekdays), frozenset(nth), frozenset(last))
