"""Conformance: cronbus's cron fires agree with an independent implementation, cronsim.

A seeded generator builds a corpus of expressions (5 fields, 6 with seconds first, and Quartz's
6 fields with ``?``), each paired with one of five zones and a start instant, most of them within
a day and a half of a daylight saving time change. For each, cronsim (given naive wall-clock
times, so it applies no zone rule of its own) lists the matching wall-clock times; those are
mapped to instants by cronbus's documented DST rule read literally (:func:`literal_instant`),
and must equal the fires ``Cron.next_fire`` returns.

Quartz expressions are compared with cronsim on a translation written here independently:
``?`` becomes ``*`` and weekday numbers 1-7 become 0-6.

Deliberate differences from cronsim, kept out of the corpus and tested in test_cron_semantics:

* DST: cronsim (given an aware start) follows Debian cron: in a fall-back fold, an expression
  with ``*`` in its minute or hour fires in both passes; cronbus fires each wall-clock time once,
  in the first pass. In a spring-forward gap Debian cron runs a fixed-time job just after the
  change; cronbus fires at the transition instant. Both are cronbus's documented rule.
* ``5-5/2`` is 5 alone for cronbus (Vixie cron); cronsim reads an equal range with a step as
  ``5/2`` (5, 7, 9, ...).
* cronsim gives up after 50 years without a fire; cronbus searches 400 (the calendar's cycle),
  so fires more than 45 years after the start are not compared.
* Syntax cronsim does not read (``?`` in 5 fields, ``nW``, ``L-n``, ``L`` alone in Quartz,
  the year field, Quartz's wrapping ranges) is covered by test_cron_quartz's table instead.
"""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError

from cronbus.errors import ConfigurationError
from cronbus.triggers import Cron, next_fires

ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
CASES_PER_ZONE = 260
FIRES = 6
HORIZON = 45 * 365 * 86400.0  # cronsim looks 50 years ahead at most
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


# -- the corpus -----------------------------------------------------------------------------------


def _value(rng: random.Random, low: int, high: int, names: tuple[str, ...], first: int) -> str:
    """A number of the field, sometimes spelt as its name."""
    number = rng.randint(low, high)
    if names and first <= number < first + len(names) and rng.random() < 0.3:
        return names[number - first].lower() if rng.random() < 0.3 else names[number - first]
    return str(number)


def _item(
    rng: random.Random, low: int, high: int, names: tuple[str, ...] = (), first: int = 0
) -> str:
    """One list item: N, N-M (equal ends one time in five), */S, N/S or N-M/S."""
    kind = rng.choice(["n", "n", "range", "range", "star-step", "n-step", "range-step"])
    step = str(rng.choice([1, 2, 3, 5, 7, 15, high]))
    if kind == "n":
        return _value(rng, low, high, names, first)
    if kind == "star-step":
        return f"*/{step}"
    if kind == "n-step":
        return f"{rng.randint(low, high)}/{step}"
    start = rng.randint(low, high)
    end = start if kind == "range" and rng.random() < 0.2 else rng.randint(start, high)
    if kind == "range-step":
        end = max(end, start + 1) if start < high else end
        if start == end:
            return str(start)  # cronsim reads N-N/S as N/S (see the module docstring)
        return f"{start}-{end}/{step}"
    if names and first <= start and end < first + len(names) and rng.random() < 0.4:
        return f"{names[start - first]}-{names[end - first]}"
    return f"{start}-{end}"


def _field(
    rng: random.Random, low: int, high: int, names: tuple[str, ...] = (), first: int = 0
) -> str:
    """A field: ``*`` (one time in three), or a list of one to three items."""
    if rng.random() < 0.33:
        return "*"
    return ",".join(_item(rng, low, high, names, first) for _ in range(rng.choice([1, 1, 2, 3])))


def _day_of_month(rng: random.Random) -> str:
    """Days of month, with L and LW now and then."""
    roll = rng.random()
    if roll < 0.08:
        return "L"
    if roll < 0.12:
        return "LW"
    return _field(rng, 1, 31)


def _day_of_week(rng: random.Random, low: int, high: int) -> str:
    """Weekdays (numbered from ``low``), with n#k and nL now and then."""
    roll = rng.random()
    if roll < 0.1:
        return f"{_value(rng, low, min(high, low + 6), DAYS, low)}#{rng.randint(1, 5)}"
    if roll < 0.17:
        return f"{rng.randint(low, min(high, low + 6))}L"
    return _field(rng, low, high, DAYS, low)


def vixie(rng: random.Random) -> str:
    """A 5-field or 6-field (seconds first) cron expression."""
    fields = [
        _field(rng, 0, 59),
        _field(rng, 0, 23) if rng.random() < 0.7 else str(rng.randint(0, 23)),
        _day_of_month(rng),
        _field(rng, 1, 12, MONTHS, 1),
        _day_of_week(rng, 0, 7),
    ]
    if rng.random() < 0.3:
        fields.insert(0, _field(rng, 0, 59) if rng.random() < 0.3 else str(rng.randint(0, 59)))
    return " ".join(fields)


def quartz(rng: random.Random) -> str:
    """A Quartz expression: seconds first, ``?`` in one day field, weekdays 1-7 = SUN-SAT."""
    days = [_day_of_month(rng), "?"] if rng.random() < 0.5 else ["?", _day_of_week(rng, 1, 7)]
    if days[0] == "*" and rng.random() < 0.5:
        days[0] = "?"
        days[1] = "*"
    fields = [str(rng.randint(0, 59)), _field(rng, 0, 59), _field(rng, 0, 23)]
    return " ".join([*fields, days[0], _field(rng, 1, 12, MONTHS, 1), days[1]])


def quartz_as_cron(expr: str) -> str:
    """The same schedule in cron's words: ``?`` is ``*``, weekday n is n - 1."""
    fields = expr.split()
    fields = ["*" if f == "?" else f for f in fields]
    fields[5] = _shift_weekdays(fields[5])
    return " ".join(fields)


def _shift_weekdays(text: str) -> str:
    """Quartz weekday numbers (1-7) as cron's (0-6); names, ``*`` and steps stay."""
    out = []
    for item in text.split(","):
        base, slash, step = item.partition("/")
        for mark in ("#", "L"):
            if mark in base:
                day, _, rest = base.partition(mark)
                base = f"{_minus_one(day)}{mark}{rest}"
                break
        else:
            base = "-".join(_minus_one(part) for part in base.split("-"))
        out.append(base + slash + step)
    return ",".join(out)


def _minus_one(token: str) -> str:
    return str(int(token) - 1) if token.isdigit() else token


# -- the reference --------------------------------------------------------------------------------


@functools.cache
def transitions(zone: str) -> tuple[float, ...]:
    """The instants where the zone's UTC offset changes, 2020-2035 (found hour by hour)."""
    tz = ZoneInfo(zone)
    found = []
    t = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    end = datetime(2036, 1, 1, tzinfo=UTC).timestamp()
    offset = datetime.fromtimestamp(t, tz).utcoffset()
    while t < end:
        t += 3600
        now = datetime.fromtimestamp(t, tz).utcoffset()
        if now != offset:
            found.append(t)
            offset = now
    return tuple(found)


def literal_instant(zone: ZoneInfo, when: datetime) -> float:
    """cronbus's DST rule read literally: the first occurrence; else the end of the gap."""
    candidates = [when.replace(tzinfo=zone, fold=f).timestamp() for f in (0, 1)]
    real = [c for c in candidates if datetime.fromtimestamp(c, zone).replace(tzinfo=None) == when]
    if real:
        return min(real)
    low, high = int(min(candidates)), int(max(candidates))
    while high - low > 1:  # the first instant whose wall-clock time is past `when`
        middle = (low + high) // 2
        past = datetime.fromtimestamp(middle, zone).replace(tzinfo=None) > when
        low, high = (low, middle) if past else (middle, high)
    return float(high)


def expected_fires(cron_expr: str, zone: str, after: float) -> list[float] | None:
    """The next fires by cronsim's wall-clock times and the literal rule; None if refused."""
    tz = ZoneInfo(zone)
    # From two hours back: no wall-clock time before that maps after `after`.
    begin = datetime.fromtimestamp(after - 7260, tz).replace(tzinfo=None)
    try:
        steps = CronSim(cron_expr, begin)
    except CronSimError:
        return None
    fires: list[float] = []
    for wall in steps:  # stops after 50 years without a match
        instant = literal_instant(tz, wall)
        if instant > after + HORIZON:
            break
        if instant > after and instant not in fires:
            fires.append(instant)
        if len(fires) == FIRES:
            break
    return fires


def cronbus_fires(expr: str, zone: str, after: float) -> list[float] | None:
    """cronbus's next fires, within the compared horizon; None if refused."""
    try:
        trigger = Cron(expr=expr, tz=zone)
    except ConfigurationError:
        return None
    return [f for f in next_fires(trigger, after, FIRES) if f <= after + HORIZON]


def corpus(zone: str, seed: int) -> list[tuple[str, str, float]]:
    """``(expression, cron spelling for cronsim, start)`` cases for one zone."""
    rng = random.Random(seed)
    near = transitions("Europe/Paris") + transitions(zone)
    cases = []
    for _ in range(CASES_PER_ZONE):
        expr = quartz(rng) if rng.random() < 0.25 else vixie(rng)
        reference = quartz_as_cron(expr) if "?" in expr.split() else expr
        if rng.random() < 0.8:
            start = rng.choice(near) + rng.uniform(-36, 36) * 3600
        else:
            start = rng.uniform(0, datetime(2090, 1, 1, tzinfo=UTC).timestamp())
        cases.append((expr, reference, round(start, rng.choice([0, 3]))))
    return cases


# -- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
def test_cron_fires_agree_with_cronsim(zone: str) -> None:
    cases = corpus(zone, seed=ZONES.index(zone) + 2026)
    mismatches = []
    compared = 0
    for expr, reference, start in cases:
        ours, theirs = cronbus_fires(expr, zone, start), expected_fires(reference, zone, start)
        if ours is None and theirs is None:
            continue  # both refuse (e.g. February 30)
        if ours is None:
            # Refused as never firing: cronsim must find nothing in 50 years either.
            if theirs:
                mismatches.append((expr, start, "refused", theirs[:2]))
            continue
        compared += 1
        if ours != theirs:
            mismatches.append((expr, start, ours[:3], (theirs or [])[:3]))
    assert not mismatches, "\n".join(
        f"{expr!r} after {datetime.fromtimestamp(start, UTC)}: cronbus {a}, cronsim {b}"
        for expr, start, a, b in mismatches[:8]
    )
    assert compared > 0.9 * len(cases)  # the corpus is mostly valid, not all refused


def test_the_corpus_covers_each_class_of_the_issue() -> None:
    # The three classes where croniter disagreed: equal ranges, a day field starting with *,
    # # or L weekdays with a restricted day of month; and Quartz weekday numbers.
    exprs = [expr for zone in ZONES for expr, _, _ in corpus(zone, ZONES.index(zone) + 2026)]
    fields = [expr.split() for expr in exprs]
    assert any(
        "-" in f and f.split("-")[0] == f.split("-")[1] for e in fields for f in e if "/" not in f
    )
    assert any(e[-3].startswith("*/") or e[-1].startswith("*/") for e in fields)
    assert any(("#" in e[-1] or "L" in e[-1]) and e[-3] not in ("*", "?") for e in fields)
    assert sum("?" in e for e in fields) > 200
    assert sum(len(e) == 6 and "?" not in e for e in fields) > 100


def test_quartz_translation_of_the_reference_is_itself_right() -> None:
    # The test's own translation, checked on the issue's examples.
    assert quartz_as_cron("0 0 12 ? * 6#3") == "0 0 12 * * 5#3"
    assert quartz_as_cron("0 15 10 ? * 2-6") == "0 15 10 * * 1-5"
    assert quartz_as_cron("0 15 10 ? * 6L") == "0 15 10 * * 5L"
    assert quartz_as_cron("0 0 0 15 * ?") == "0 0 0 15 * *"
    begin = datetime(2026, 1, 1)
    assert next(CronSim("0 0 12 * * 5#3", begin)) == datetime(2026, 1, 16, 12)  # a Friday
    assert next(CronSim("0 0 0 * * 1-5", begin + timedelta(days=1))) == datetime(2026, 1, 5)
