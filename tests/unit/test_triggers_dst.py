"""Cron triggers across daylight saving time: spring-forward gaps and fall-back folds.

The rule under test (see cronbus.triggers): a nonexistent wall-clock time fires once, at the
transition instant that ends its gap; an ambiguous one fires once, at its first occurrence.
"""

from __future__ import annotations

import functools
import itertools
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cronbus.triggers import Cron, Every, next_fires


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    """Epoch seconds of a UTC wall-clock time."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def wall(instant: float, zone: str) -> datetime:
    """The naive wall-clock time of ``instant`` in ``zone``."""
    return datetime.fromtimestamp(instant, ZoneInfo(zone)).replace(tzinfo=None)


@functools.cache
def transitions(zone: str, year: int) -> tuple[tuple[int, int], ...]:
    """Each ``(instant, seconds the clocks move)`` of ``zone`` in ``year``, found by scanning."""
    tz = ZoneInfo(zone)

    def offset(t: int) -> timedelta | None:
        return datetime.fromtimestamp(t, tz).utcoffset()

    found = []
    start = int(ts(year, 1, 1))
    # Day by day: transitions are months apart, so a day holds at most one.
    for t in range(start, int(ts(year + 1, 1, 1)), 86400):
        if offset(t) != offset(t + 86400):
            low, high = t, t + 86400
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(middle) == offset(t) else (low, middle)
            moved = offset(high) - offset(low)  # type: ignore[operator]
            found.append((high, int(moved.total_seconds())))
    return tuple(found)


def gap(zone: str, year: int) -> tuple[int, int]:
    """The spring-forward transition: its instant and how many seconds the clocks jump."""
    [found] = [(t, moved) for t, moved in transitions(zone, year) if moved > 0]
    return found


def fold(zone: str, year: int) -> tuple[int, int]:
    """The fall-back transition: its instant and how many seconds are repeated."""
    [found] = [(t, -moved) for t, moved in transitions(zone, year) if moved < 0]
    return found


def test_the_transitions_are_the_ones_we_think() -> None:
    assert gap("Europe/Paris", 2026) == (ts(2026, 3, 29, 1), 3600)
    assert fold("Europe/Paris", 2026) == (ts(2026, 10, 25, 1), 3600)
    assert gap("America/New_York", 2026) == (ts(2026, 3, 8, 7), 3600)
    assert fold("America/New_York", 2026) == (ts(2026, 11, 1, 6), 3600)
    assert gap("Australia/Lord_Howe", 2026)[1] == 1800
    assert fold("Australia/Lord_Howe", 2026)[1] == 1800


# -- daily crons ----------------------------------------------------------------------------------


def test_daily_cron_inside_the_paris_gap_fires_once_at_the_transition() -> None:
    trigger = Cron(expr="30 2 * * *", tz="Europe/Paris")
    fires = next_fires(trigger, ts(2026, 3, 28, 12), 2)
    # 02:30 does not exist on 2026-03-29: it fires at 03:00 CEST, the end of the gap.
    assert fires == [ts(2026, 3, 29, 1), ts(2026, 3, 30, 0, 30)]
    assert wall(fires[0], "Europe/Paris") == datetime(2026, 3, 29, 3, 0)


def test_daily_cron_inside_the_new_york_gap_fires_once_at_the_transition() -> None:
    trigger = Cron(expr="30 2 * * *", tz="America/New_York")
    fires = next_fires(trigger, ts(2026, 3, 7, 12), 2)
    assert fires == [ts(2026, 3, 8, 7), ts(2026, 3, 9, 6, 30)]
    assert wall(fires[0], "America/New_York") == datetime(2026, 3, 8, 3, 0)


def test_several_times_in_one_gap_fire_once() -> None:
    trigger = Cron(expr="0,15,30,45 2 * * *", tz="Europe/Paris")
    fires = next_fires(trigger, ts(2026, 3, 28, 12), 3)
    assert fires == [ts(2026, 3, 29, 1), ts(2026, 3, 30, 0), ts(2026, 3, 30, 0, 15)]


def test_daily_cron_in_the_paris_fold_fires_at_the_first_occurrence() -> None:
    trigger = Cron(expr="30 2 * * *", tz="Europe/Paris")
    fires = next_fires(trigger, ts(2026, 10, 24, 12), 2)
    # 02:30 happens twice on 2026-10-25: once in CEST (00:30 UTC), once in CET (01:30 UTC).
    assert fires == [ts(2026, 10, 25, 0, 30), ts(2026, 10, 26, 1, 30)]


def test_daily_cron_in_the_new_york_fold_fires_at_the_first_occurrence() -> None:
    trigger = Cron(expr="30 1 * * *", tz="America/New_York")
    fires = next_fires(trigger, ts(2026, 10, 31, 12), 2)
    assert fires == [ts(2026, 11, 1, 5, 30), ts(2026, 11, 2, 6, 30)]


def test_daily_cron_asked_during_the_repeated_hour_waits_for_tomorrow() -> None:
    trigger = Cron(expr="30 2 * * *", tz="Europe/Paris")
    # 01:15 UTC is 02:15 CET, in the second pass: today's 02:30 already fired in the first.
    assert trigger.next_fire(ts(2026, 10, 25, 1, 15)) == ts(2026, 10, 26, 1, 30)


# -- every second and every minute across both transitions ----------------------------------------

ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe"]
STEPS = [("* * * * * *", 1), ("* * * * *", 60)]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("expr", "step"), STEPS)
def test_the_gap_fires_exactly_once(zone: str, expr: str, step: int) -> None:
    transition, _ = gap(zone, 2026)
    trigger = Cron(expr=expr, tz=zone)
    fires = next_fires(trigger, transition - 3.5 * step, 7)
    # The whole gap (and the wall-clock time that ends it) collapses into one fire at the
    # transition, so the fires keep their rhythm in real time.
    assert fires == [transition + k * step for k in range(-3, 4)]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("expr", "step"), STEPS)
def test_the_repeated_pass_of_a_fold_never_fires(zone: str, expr: str, step: int) -> None:
    transition, repeated = fold(zone, 2026)
    trigger = Cron(expr=expr, tz=zone)
    fires = next_fires(trigger, transition - 3.5 * step, 6)
    before = [transition + k * step for k in range(-3, 0)]
    after = [transition + repeated + k * step for k in range(3)]
    assert fires == before + after
    assert len(set(fires)) == len(fires)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("expr", "step"), STEPS)
def test_asked_inside_the_repeated_pass_fires_when_it_ends(zone: str, expr: str, step: int) -> None:
    transition, repeated = fold(zone, 2026)
    trigger = Cron(expr=expr, tz=zone)
    inside = [transition, transition + 0.5, transition + repeated / 2, transition + repeated - 1]
    started = time.perf_counter()
    assert [trigger.next_fire(t) for t in inside] == [transition + repeated] * 4
    # The search jumps to the end of the fold instead of stepping through up to 3,600 seconds
    # that map back into the first pass (about 0.1 s each); a jump is well under 1 ms.
    assert time.perf_counter() - started < 0.04


@pytest.mark.parametrize("zone", ZONES)
def test_every_second_through_a_whole_year_of_transitions(zone: str) -> None:
    # Hour by hour around each transition: no fire repeats, and the gap costs nothing.
    trigger = Cron(expr="* * * * * *", tz=zone)
    for transition, moved in transitions(zone, 2026):
        fires = next_fires(trigger, transition - 3600, 7200)
        assert all(b > a for a, b in itertools.pairwise(fires))
        locals_ = [datetime.fromtimestamp(f, ZoneInfo(zone)) for f in fires]
        assert not any(t.fold for t in locals_)
        if moved > 0:
            assert fires == [transition - 3599 + k for k in range(7200)]


def test_every_is_not_moved_by_daylight_saving() -> None:
    trigger = Every(seconds=3600, tz="Europe/Paris")
    for transition, _ in transitions("Europe/Paris", 2026):
        fires = next_fires(trigger, transition - 7200, 4)
        assert fires == [transition - 3600 + 3600 * k for k in range(4)]


# -- property: agree with a literal reading of the rule -------------------------------------------

DST_ZONES = [
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "Europe/Dublin",
    "America/Sao_Paulo",
    "Asia/Tehran",
]
EXPRS = [
    "* * * * * *",
    "*/7 * * * * *",
    "* * * * *",
    "*/5 * * * *",
    "*/20 * 0-3 * * *",
    "0 30 * * * *",
    "0 0,30 0-3 * * *",
    "15 1,2 * * *",
    "0 0 * * *",
    "45 23 * * *",
]


def literal_instant(zone: ZoneInfo, when: datetime) -> float:
    """The rule, read literally: the first occurrence; else the first instant after the gap."""
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


def literal_fires(expr: str, zone: str, after: float, count: int, moved: int) -> list[float]:
    """The next fires by mapping every matching wall-clock time with the literal rule.

    Wall-clock times are enumerated from far enough back (the clock shift ``moved`` and a
    minute) that none that maps after ``after`` is missed.
    """
    tz = ZoneInfo(zone)
    # cronsim, an independent reading of the expression, given naive wall-clock times.
    steps = CronSim(expr, wall(after - abs(moved) - 60, zone))
    fires: list[float] = []
    while len(fires) < count:
        instant = literal_instant(tz, next(steps))
        if instant > after and instant not in fires:
            fires.append(instant)
    return sorted(fires)


@settings(max_examples=100, deadline=None)
@given(
    zone=st.sampled_from(DST_ZONES),
    year=st.integers(min_value=2000, max_value=2040),
    which=st.integers(min_value=0, max_value=3),
    expr=st.sampled_from(EXPRS),
    offset=st.floats(min_value=-3 * 3600, max_value=3 * 3600),
)
def test_fires_near_transitions_follow_the_rule(
    zone: str, year: int, which: int, expr: str, offset: float
) -> None:
    found = transitions(zone, year)
    assume(found)
    transition, moved = found[which % len(found)]
    after = transition + offset
    fires = next_fires(Cron(expr=expr, tz=zone), after, 8)
    assert fires == literal_fires(expr, zone, after, 8, moved)
    assert all(b > a for a, b in itertools.pairwise(fires))
