"""Cron semantics that croniter got wrong (issue #9, item 12), error messages, and time bounds.

Each class of item 12 is pinned by an example whose Vixie cron answer is worked out by hand
(2026-01-01 is a Thursday), and the deliberate differences from cronsim are shown.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from cronbus.cron import compile_cron
from cronbus.errors import ConfigurationError
from cronbus.triggers import After, At, Cron, Every, make_trigger, next_fires, trigger_from_spec

JAN1 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
LAST_SECOND = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def days(expr: str, count: int = 4, tz: str = "UTC") -> list[str]:
    """The dates (ISO, in ``tz``) of the next fires after 2026-01-01T00:00:00Z."""
    fires = next_fires(Cron(expr=expr, tz=tz), JAN1, count)
    return [datetime.fromtimestamp(f, UTC).strftime("%m-%d %H:%M") for f in fires]


# -- item 12: the three classes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 5-5 * * *", ["01-01 05:00", "01-02 05:00"]),  # not every hour
        ("30-30 1 * * *", ["01-01 01:30", "01-02 01:30"]),
        ("0 0 * * MON-MON", ["01-05 00:00", "01-12 00:00"]),  # Mondays only
        ("0 0 2 JAN-JAN *", ["01-02 00:00"]),  # then 2027
    ],
)
def test_an_equal_range_is_that_one_value(expr: str, expected: list[str]) -> None:
    assert days(expr, len(expected)) == expected


def test_an_equal_month_range_waits_a_year() -> None:
    fires = next_fires(Cron(expr="0 0 2 JAN-JAN *"), JAN1, 2)
    assert [datetime.fromtimestamp(f, UTC).date().isoformat() for f in fires] == [
        "2026-01-02",
        "2027-01-02",
    ]


def test_a_day_field_starting_with_a_star_ands_the_day_fields() -> None:
    # */2 is Sunday, Tuesday, Thursday, Saturday; with a star, both fields must match (Vixie).
    # croniter OR'd them and fired on 3 January (a Saturday); cron fires on 1 February (Sunday).
    assert days("0 0 1 * */2", 3) == ["02-01 00:00", "03-01 00:00", "08-01 00:00"]
    # The 1st, 11th, 21st or 31st, and a Monday: 11 May and 1 June are the first.
    assert days("0 0 */10 * MON", 2) == ["05-11 00:00", "06-01 00:00"]
    # Without a star they are OR'd: the 1st of each month, or any Sunday/Tuesday/...
    assert days("0 0 1 * 0,2,4,6", 3) == ["01-03 00:00", "01-04 00:00", "01-06 00:00"]


def test_nth_and_last_weekdays_follow_the_or_rule_with_a_restricted_day_of_month() -> None:
    # The 13th, or the second Friday (9 January): croniter fired on second Fridays only.
    assert days("0 0 13 * 5#2", 3) == ["01-09 00:00", "01-13 00:00", "02-13 00:00"]
    # croniter refused this one as "never fires"; it is the 1st or the second Monday.
    assert days("0 0 1 * 1#2", 3) == ["01-12 00:00", "02-01 00:00", "02-09 00:00"]
    # With a star in day of month: only the weekday part counts.
    assert days("0 0 * * 5#2", 2) == ["01-09 00:00", "02-13 00:00"]
    assert days("0 0 20 * 5L", 3) == ["01-20 00:00", "01-30 00:00", "02-20 00:00"]


def test_last_weekday_forms() -> None:
    assert days("0 0 * * 5L", 2) == ["01-30 00:00", "02-27 00:00"]
    assert days("0 0 * * FRIL", 2) == ["01-30 00:00", "02-27 00:00"]
    assert days("0 0 * * L5", 2) == ["01-30 00:00", "02-27 00:00"]  # croniter's spelling
    assert days("0 0 LW * *", 3) == ["01-30 00:00", "02-27 00:00", "03-31 00:00"]
    assert days("0 0 L-1 * *", 2) == ["01-30 00:00", "02-27 00:00"]
    assert days("0 0 15W * *", 2) == ["01-15 00:00", "02-16 00:00"]


def test_seconds_first_and_aliases() -> None:
    assert days("30 0 12 * * *", 1) == ["01-01 12:00"]
    fire = Cron(expr="30 0 12 * * *").next_fire(JAN1)
    assert fire == JAN1 + 12 * 3600 + 30
    assert days("@weekly", 1) == ["01-04 00:00"]  # Sunday
    assert Cron(expr="@YEARLY").next_fire(JAN1) == datetime(2027, 1, 1, tzinfo=UTC).timestamp()


def test_the_issue_examples_agree_with_cronsim() -> None:
    start = datetime(2026, 1, 1)
    for expr in ["0 5-5 * * *", "0 0 1 * */2", "0 0 13 * 5#2", "0 0 1 * 1#2", "0 0 * * 5L"]:
        theirs = CronSim(expr, start)
        expected = [next(theirs).replace(tzinfo=UTC).timestamp() for _ in range(5)]
        assert next_fires(Cron(expr=expr), JAN1, 5) == expected, expr


# -- deliberate differences from cronsim ----------------------------------------------------------


def test_equal_range_with_a_step_is_the_one_value() -> None:
    # Vixie cron: 5-5/2 is 5. Older cronsim read it as 5/2 (5, 7, 9, ...) and newer fixes it:
    # only cronbus's own reading is asserted, never a dependency's (issue 30).
    assert compile_cron("5-5/2 * * * *").minutes == (5,)
    start = datetime(2026, 1, 1, 0, 5, tzinfo=UTC).timestamp()
    assert next_fires(Cron(expr="5-5/2 * * * *", tz="UTC"), start, 2) == [
        start + 3600,
        start + 7200,
    ]


def test_a_wildcard_cron_fires_once_in_a_fold_unlike_cronsim() -> None:
    # Europe/Paris repeats 02:00-02:59 on 2026-10-25. cronsim, like Debian cron, fires an
    # hourly-wildcard expression in both passes; cronbus fires each wall-clock time once.
    from zoneinfo import ZoneInfo

    paris = ZoneInfo("Europe/Paris")
    start = datetime(2026, 10, 25, 1, 50, tzinfo=paris)
    ours = next_fires(Cron(expr="30 * * * *", tz="Europe/Paris"), start.timestamp(), 3)
    utc = datetime(2026, 10, 25, tzinfo=UTC).timestamp()
    assert ours == [utc + 30 * 60, utc + 150 * 60, utc + 210 * 60]  # 02:30 once, then 03:30


# -- error messages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "quoted"),
    [
        ("0 0 * * Mon-Fooday", "'0 0 * * Mon-Fooday'"),  # not lower-cased or reordered
        ("0 0 * * 5l,SUNx", "'SUNx'"),
        ("5L * * * * *", "'5L'"),  # seconds first: the seconds field named, as typed
        ("0 0 ? * MON-Fri/0", "'MON-Fri/0'"),
    ],
)
def test_errors_quote_the_expression_and_field_as_typed(expr: str, quoted: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Cron(expr=expr)
    message = str(info.value)
    assert quoted in message
    assert "\n" not in message
    assert message.startswith(f"invalid cron expression {expr!r}: ")


def test_errors_show_at_most_80_characters_of_a_long_value() -> None:
    field = "1," * 450 + "99"  # 902 characters: long, but not too long to read
    with pytest.raises(ConfigurationError) as info:
        Cron(expr=f"{field} * * * *")
    message = str(info.value)
    assert len(message) < 500
    assert "…" in message
    assert "'99' is out of range 0-59" in message  # the culprit itself is named
    with pytest.raises(ConfigurationError) as info:
        Cron(expr="x" * 10_000 + " * * * *")
    assert str(info.value).endswith(": 10008 characters long; at most 1000")
    assert len(str(info.value)) < 200


def test_errors_name_the_field_of_six_and_five_field_forms() -> None:
    with pytest.raises(ConfigurationError, match=r"hour '24' is out of range 0-23; read as 6"):
        Cron(expr="0 0 24 * * *")
    with pytest.raises(ConfigurationError, match=r"hour '24' is out of range 0-23; read as 5"):
        Cron(expr="0 24 * * *")


# -- bounds ---------------------------------------------------------------------------------------


def test_no_cron_fire_after_year_9999() -> None:
    trigger = Cron(expr="0 0 1 1 *")
    last = trigger.next_fire(datetime(9998, 6, 1, tzinfo=UTC).timestamp())
    assert last == datetime(9999, 1, 1, tzinfo=UTC).timestamp()
    assert trigger.next_fire(last) is None
    # West of UTC, 9999-12-31 23:00 local is in year 10000 UTC: no fire either.
    late = Cron(expr="0 23 31 12 *", tz="America/New_York")
    new_year = late.next_fire(datetime(9998, 12, 31, tzinfo=UTC).timestamp())
    assert new_year == datetime(9999, 1, 1, 4, tzinfo=UTC).timestamp()  # 9998-12-31 23:00
    assert late.next_fire(new_year) is None
    assert Cron(expr="* * * * * *").next_fire(LAST_SECOND) is None
    assert Cron(expr="* * * * * *").next_fire(1e300) is None


def test_no_fire_before_1970() -> None:
    assert Cron(expr="30 0 1 1 *", tz="Europe/Paris").next_fire(-1e9) == (
        datetime(1971, 1, 1, tzinfo=UTC).timestamp() - 1800  # 00:30 CET, 1970's was < 0
    )
    assert Every(seconds=7).next_fire(-1e12) == 0.0
    assert After(seconds=5).next_fire(-100.0) == 0.0


def test_every_and_after_never_fire_past_9999() -> None:
    assert Every(seconds=3600).next_fire(LAST_SECOND) is None
    assert After(seconds=3600).next_fire(LAST_SECOND) is None
    jittered = Every(seconds=86400, jitter=3600)
    last = jittered.next_fire(LAST_SECOND - 86400)
    assert last is not None
    assert last < LAST_SECOND + 1
    assert jittered.next_fire(last) is None


@pytest.mark.parametrize("seconds", [0.001, 1, 86400, 100 * 365.25 * 86400])
def test_intervals_from_1_ms_to_100_years_are_accepted(seconds: float) -> None:
    assert Every(seconds=seconds).seconds == seconds
    assert make_trigger(after=timedelta(seconds=seconds)) == After(seconds=seconds)


@pytest.mark.parametrize(
    "seconds", [0.0009, 0, -1, 100 * 365.25 * 86400 + 1, 1e12, 1e308, math.inf, math.nan]
)
def test_intervals_outside_the_bounds_are_refused(seconds: float) -> None:
    for build in (lambda: make_trigger(every=seconds), lambda: make_trigger(after=seconds)):
        with pytest.raises(ConfigurationError) as info:
            build()
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigurationError, match=r"Every.seconds must be"):
        trigger_from_spec({"kind": "every", "seconds": seconds})


@pytest.mark.parametrize("when", [-1.0, -1e300, 253_402_300_800.0, 1e300, math.inf, math.nan])
def test_times_outside_1970_to_9999_are_refused(when: float) -> None:
    with pytest.raises(ConfigurationError, match=r"must be (a time from 1970|a finite number)"):
        At(when=when)
    with pytest.raises(ConfigurationError):
        make_trigger(every=60, start=when)
    with pytest.raises(ConfigurationError):
        trigger_from_spec({"kind": "cron", "expr": "* * * * *", "end": when})
    with pytest.raises(ConfigurationError):
        Every(seconds=60, anchor=when)


def test_the_first_and_last_times_are_accepted() -> None:
    assert At(when=0.0).next_fire(-1.0) == 0.0
    assert At(when=LAST_SECOND + 0.5).next_fire(LAST_SECOND) == LAST_SECOND + 0.5
    assert make_trigger(at="9999-12-31T23:59:59+00:00") == At(when=LAST_SECOND)


# -- any text: a trigger or one clear error ------------------------------------------------------

TOKENS = [*"0123456789*/,-?#LW", "MON", "fri", "JAN", "L-", "5L", "\x00", "\ud800", "é", "@daily"]
BAD = ["61", "L-40", "1/0", "5-1", "\x00", "\ud800", "é", "8", "1#9", "MON-"]
TIMES = ["*", "0", "5", "1-5", "*/2", "3/4", "7,8", "22-1"]
DOMS = ["*", "?", "1", "15", "31", "L", "LW", "15W", "L-2", "1-7"]
MONTHS = ["*", "1", "jan", "*/3", "2-3", "FEB"]
DOWS = ["*", "?", "MON", "1-5", "5L", "MON#2", "0", "7", "L", "FRI-MON"]
YEARS = ["*", "2030", "2030-2040", "1969"]
JUNK = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6).map("".join)
ACCEPTED: list[str] = []  # the accepted expressions, for the check below


def _field(choices: list[str]) -> st.SearchStrategy[str]:
    """One field: a piece, or a list of two."""
    one = st.sampled_from(choices)
    return st.one_of(one, st.lists(one, min_size=2, max_size=2).map(",".join))


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """5, 6 or 7 plausible fields, one of them now and then replaced by a bad value or junk."""
    count = draw(st.sampled_from([5, 6, 7, 1]))
    layout = {
        1: [TIMES],
        5: [TIMES, TIMES, DOMS, MONTHS, DOWS],
        6: [TIMES, TIMES, TIMES, DOMS, MONTHS, DOWS],
        7: [TIMES, TIMES, TIMES, DOMS, MONTHS, DOWS, YEARS],
    }[count]
    fields = [draw(_field(choices)) for choices in layout]
    if count >= 6 and draw(st.booleans()):
        fields[draw(st.sampled_from([3, 5]))] = "?"  # Quartz: ? in one day field
    if draw(st.booleans()):
        spoiled = draw(st.integers(min_value=0, max_value=len(fields) - 1))
        fields[spoiled] = draw(st.one_of(st.sampled_from(BAD), JUNK))
    return " ".join(fields)


@settings(max_examples=400, deadline=None)
@given(
    expr=expressions(),
    zone=st.sampled_from(["UTC", "Europe/Paris", "Australia/Lord_Howe"]),
    start=st.floats(min_value=-1e10, max_value=3e11),
)
def test_any_expression_builds_a_trigger_or_raises_one_clear_error(
    expr: str, zone: str, start: float
) -> None:
    try:
        trigger = Cron(expr=expr, tz=zone)
    except ConfigurationError as exc:
        message = str(exc)
        assert "\n" not in message
        assert message.startswith("invalid cron expression ")
        assert len(message) < 600
        return
    ACCEPTED.append(expr)
    fires = next_fires(trigger, start, 3)
    assert all(0.0 <= f < 253_402_300_800.0 for f in fires)
    assert all(b > a for a, b in itertools.pairwise([start, *fires]))


def test_the_generated_expressions_are_often_accepted() -> None:
    # Otherwise the property above would only exercise the error path.
    ACCEPTED.clear()
    test_any_expression_builds_a_trigger_or_raises_one_clear_error()
    assert len(ACCEPTED) > 40
