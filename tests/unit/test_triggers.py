"""Triggers: each kind, specs, descriptions, make_trigger's errors, and properties of next_fire.

Daylight saving time has its own module, test_triggers_dst.py.
"""

from __future__ import annotations

import itertools
import json
import math
import timeit
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cronbus.cron import compile_cron
from cronbus.errors import ConfigurationError
from cronbus.triggers import (
    After,
    At,
    Cron,
    Every,
    Trigger,
    jitter_offset,
    make_trigger,
    next_fires,
    trigger_from_spec,
)

PARIS = ZoneInfo("Europe/Paris")
ZONES = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
    "Pacific/Chatham",
    "Europe/Dublin",
]


def ts(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    *,
    tz: ZoneInfo | None = None,
) -> float:
    """Epoch seconds of a wall-clock time in ``tz`` (UTC by default)."""
    return datetime(year, month, day, hour, minute, second, tzinfo=tz or UTC).timestamp()


def utc(instant: float) -> datetime:
    """An instant as an aware UTC datetime, for readable assertions."""
    return datetime.fromtimestamp(instant, UTC)


def local(instant: float, zone: str | ZoneInfo) -> datetime:
    """An instant as a naive wall-clock time in ``zone``."""
    tz = zone if isinstance(zone, ZoneInfo) else ZoneInfo(zone)
    return datetime.fromtimestamp(instant, tz).replace(tzinfo=None)


def key_of(trigger: Trigger) -> str:
    """The jitter key: the spec's canonical JSON. Changing this spelling would move every
    jittered fire, and two scheduler versions in a rolling upgrade would disagree."""
    return json.dumps(trigger.to_spec(), sort_keys=True, separators=(",", ":"))


# -- cron -----------------------------------------------------------------------------------------


def test_cron_five_fields_has_minute_precision() -> None:
    trigger = Cron(expr="*/15 * * * *")
    fires = next_fires(trigger, ts(2026, 1, 1, 10, 7, 30), 3)
    assert [utc(f) for f in fires] == [
        datetime(2026, 1, 1, 10, 15, tzinfo=UTC),
        datetime(2026, 1, 1, 10, 30, tzinfo=UTC),
        datetime(2026, 1, 1, 10, 45, tzinfo=UTC),
    ]


def test_cron_six_fields_put_seconds_first() -> None:
    trigger = Cron(expr="30 */5 * * * *")
    fires = next_fires(trigger, ts(2026, 1, 1, 10, 0, 30), 2)
    assert [utc(f) for f in fires] == [
        datetime(2026, 1, 1, 10, 5, 30, tzinfo=UTC),
        datetime(2026, 1, 1, 10, 10, 30, tzinfo=UTC),
    ]


def test_cron_every_second() -> None:
    start = ts(2026, 1, 1)
    assert next_fires(Cron(expr="* * * * * *"), start, 3) == [start + 1, start + 2, start + 3]


def test_cron_fire_is_strictly_after_a_fractional_time() -> None:
    trigger = Cron(expr="* * * * * *")
    assert trigger.next_fire(100.999999) == 101.0
    assert trigger.next_fire(101.0) == 102.0
    assert trigger.next_fire(-0.5) == 0.0


def test_cron_in_a_zone() -> None:
    trigger = Cron(expr="0 9 * * *", tz="Europe/Paris")
    fire = trigger.next_fire(ts(2026, 1, 15))
    assert fire == ts(2026, 1, 15, 8)  # 09:00 CET
    fire = trigger.next_fire(ts(2026, 7, 15))
    assert fire == ts(2026, 7, 15, 7)  # 09:00 CEST


def test_cron_names_for_months_and_days() -> None:
    trigger = Cron(expr="0 0 9 * JAN,JUL MON-FRI")
    fires = [utc(f) for f in next_fires(trigger, ts(2026, 1, 1), 3)]
    # 2026-01-01 is a Thursday: Thu, Fri, then Mon the 5th.
    assert [f.date() for f in fires] == [date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 5)]
    assert all(f.hour == 9 for f in fires)
    july = utc(trigger.next_fire(ts(2026, 2, 1)) or 0)
    assert july == datetime(2026, 7, 1, 9, tzinfo=UTC)


def test_cron_last_day_of_month() -> None:
    trigger = Cron(expr="0 0 L * *")
    days = [utc(f).date() for f in next_fires(trigger, ts(2028, 1, 15), 3)]
    assert days == [date(2028, 1, 31), date(2028, 2, 29), date(2028, 3, 31)]


def test_cron_last_weekday_of_month() -> None:
    trigger = Cron(expr="0 0 * * L5")  # the last Friday
    days = [utc(f).date() for f in next_fires(trigger, ts(2026, 1, 1), 2)]
    assert days == [date(2026, 1, 30), date(2026, 2, 27)]


def test_cron_nth_weekday_of_month() -> None:
    trigger = Cron(expr="0 0 * * MON#2")
    days = [utc(f).date() for f in next_fires(trigger, ts(2026, 4, 1), 2)]
    assert days == [date(2026, 4, 13), date(2026, 5, 11)]


def test_cron_nearest_weekday_and_question_mark() -> None:
    # 2026-02-15 is a Sunday: the nearest weekday is Monday the 16th.
    assert utc(Cron(expr="0 0 15W * ?").next_fire(ts(2026, 2, 1)) or 0).day == 16
    assert utc(Cron(expr="0 0 0 ? * SUN").next_fire(ts(2026, 2, 1)) or 0).day == 8


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@hourly", datetime(2026, 1, 1, 11, tzinfo=UTC)),
        ("@daily", datetime(2026, 1, 2, tzinfo=UTC)),
        ("@monthly", datetime(2026, 2, 1, tzinfo=UTC)),
    ],
)
def test_cron_aliases(alias: str, expected: datetime) -> None:
    assert utc(Cron(expr=alias).next_fire(ts(2026, 1, 1, 10, 30)) or 0) == expected


def test_cron_expression_is_normalised() -> None:
    trigger = Cron(expr="  0   */5 * * * * ")
    assert trigger.expr == "0 */5 * * * *"
    assert trigger == Cron(expr="0 */5 * * * *")


def test_cron_start_skips_earlier_fires_and_end_stops() -> None:
    trigger = Cron(expr="0 * * * *", start=ts(2026, 1, 1, 5), end=ts(2026, 1, 1, 7))
    fires = next_fires(trigger, ts(2026, 1, 1), 10)
    assert fires == [ts(2026, 1, 1, 5), ts(2026, 1, 1, 6), ts(2026, 1, 1, 7)]
    assert trigger.next_fire(ts(2026, 1, 1, 7)) is None


def test_cron_start_is_inclusive_even_between_fires() -> None:
    trigger = Cron(expr="0 * * * *", start=ts(2026, 1, 1, 5, 30))
    assert trigger.next_fire(0.0) == ts(2026, 1, 1, 6)


def test_cron_exclude_dates_in_the_zone() -> None:
    # 00:30 in Paris is 23:30 UTC the day before: the date that counts is the one in Paris.
    trigger = Cron(expr="30 0 * * *", tz="Europe/Paris", exclude=frozenset({"2026-12-25"}))
    fires = [local(f, PARIS) for f in next_fires(trigger, ts(2026, 12, 24, 1, tz=PARIS), 2)]
    assert fires == [datetime(2026, 12, 26, 0, 30), datetime(2026, 12, 27, 0, 30)]


def test_exclude_skipping_gives_up_after_about_five_years() -> None:
    christmases = frozenset(f"{year}-12-25" for year in range(2026, 2040))
    trigger = Cron(expr="0 0 25 12 *", exclude=christmases)
    assert trigger.next_fire(ts(2026, 1, 1)) is None
    every = Every(seconds=86400, exclude=frozenset(_days(date(2026, 1, 1), 6 * 366)))
    assert every.next_fire(ts(2026, 1, 1)) is None


def _days(first: date, count: int) -> list[str]:
    return [(first + timedelta(days=i)).isoformat() for i in range(count)]


def test_exclude_longer_than_a_week_still_finds_the_next_fire() -> None:
    trigger = Cron(expr="0 0 * * * *", exclude=frozenset(_days(date(2026, 1, 1), 40)))
    assert utc(trigger.next_fire(ts(2025, 12, 31, 23)) or 0) == datetime(2026, 2, 10, tzinfo=UTC)


# -- every ----------------------------------------------------------------------------------------


def test_every_is_aligned_to_the_epoch_by_default() -> None:
    trigger = Every(seconds=60)
    assert next_fires(trigger, ts(2026, 1, 1, 10, 0, 17), 2) == [
        ts(2026, 1, 1, 10, 1),
        ts(2026, 1, 1, 10, 2),
    ]
    assert trigger.next_fire(ts(2026, 1, 1, 10, 1)) == ts(2026, 1, 1, 10, 2)


def test_every_with_anchor() -> None:
    trigger = Every(seconds=60, anchor=10.0)
    assert next_fires(trigger, 0.0, 3) == [10.0, 70.0, 130.0]
    assert trigger.next_fire(70.0) == 130.0
    # The anchor is a phase, not a start; but nothing fires before 1970 (-50.0 would).
    assert trigger.next_fire(-100.0) == 10.0
    assert Every(seconds=60, anchor=130.0).next_fire(-100.0) == 10.0


def test_every_anchor_defaults_to_start() -> None:
    trigger = Every(seconds=60, start=1005.0)
    assert next_fires(trigger, 0.0, 2) == [1005.0, 1065.0]


def test_every_fractional_seconds() -> None:
    fires = next_fires(Every(seconds=0.1), 0.0, 30)
    assert all(b > a for a, b in itertools.pairwise(fires))
    assert fires[-1] == pytest.approx(3.0)


def test_every_exclude_dates_use_its_zone() -> None:
    trigger = Every(seconds=3600, tz="Europe/Paris", exclude=frozenset({"2026-06-02"}))
    fire = trigger.next_fire(ts(2026, 6, 1, 23, 30, tz=PARIS))
    assert local(fire or 0, PARIS) == datetime(2026, 6, 3)


def test_every_jitter_must_be_smaller_than_the_period() -> None:
    with pytest.raises(ConfigurationError, match=r"Every.jitter \(60\) must be smaller"):
        Every(seconds=60, jitter=60)


# -- after and at ---------------------------------------------------------------------------------


def test_after_waits_from_the_end_of_the_previous_run() -> None:
    trigger = After(seconds=30)
    assert trigger.next_fire(1000.5) == 1030.5


def test_after_respects_start_and_end() -> None:
    trigger = After(seconds=30, start=2000.0, end=3000.0)
    assert trigger.next_fire(1000.0) == 2000.0
    assert trigger.next_fire(2960.0) == 2990.0
    assert trigger.next_fire(2980.0) is None


def test_at_fires_once() -> None:
    trigger = At(when=5000.0)
    assert trigger.next_fire(4999.0) == 5000.0
    assert trigger.next_fire(5000.0) is None
    assert next_fires(trigger, 0.0, 5) == [5000.0]


def test_at_in_the_past_never_fires() -> None:
    assert make_trigger(at=datetime(2001, 1, 1, tzinfo=UTC)).next_fire(ts(2026, 1, 1)) is None


# -- jitter ---------------------------------------------------------------------------------------


def test_jitter_offset_is_deterministic_and_in_range() -> None:
    offsets = [jitter_offset("job", 1000.0 + i, 5.0) for i in range(200)]
    assert offsets == [jitter_offset("job", 1000.0 + i, 5.0) for i in range(200)]
    assert all(0.0 <= o < 5.0 for o in offsets)
    assert len(set(offsets)) == 200
    assert jitter_offset("other", 1000.0, 5.0) != offsets[0]
    assert jitter_offset("job", 1000.0, 0.0) == 0.0
    with pytest.raises(ConfigurationError):
        jitter_offset("job", 1000.0, -1.0)


def test_jittered_fire_is_nominal_plus_the_offset_of_the_canonical_spec() -> None:
    trigger = Every(seconds=60, jitter=30, exclude=frozenset({"2030-01-01"}))
    assert key_of(trigger) == (
        '{"exclude":["2030-01-01"],"jitter":30.0,"kind":"every","seconds":60.0}'
    )
    assert trigger.next_fire(59.0) == 60.0 + jitter_offset(key_of(trigger), 60.0, 30.0)


def test_jitter_is_the_same_in_every_process() -> None:
    # Two triggers built separately (as two schedulers would) agree on every fire.
    a = make_trigger(cron="0 * * * *", tz="Europe/Paris", jitter=600)
    b = trigger_from_spec(json.loads(json.dumps(a.to_spec())))
    assert next_fires(a, ts(2026, 1, 1), 20) == next_fires(b, ts(2026, 1, 1), 20)


def test_jitter_spreads_fires_within_the_window() -> None:
    trigger = Every(seconds=60, jitter=30)
    fires = next_fires(trigger, -1.0, 50)
    nominals = [60.0 * i for i in range(50)]
    assert all(0 <= f - n < 30 for f, n in zip(fires, nominals, strict=True))
    assert len({round(f - n, 6) for f, n in zip(fires, nominals, strict=True)}) > 40


def test_jitter_never_fires_past_end() -> None:
    trigger = Every(seconds=60, jitter=59, end=600.0)
    fires = next_fires(trigger, 0.0, 100)
    assert fires
    assert all(f <= 600.0 for f in fires)


def test_cron_jitter_larger_than_the_gap_still_increases() -> None:
    trigger = Cron(expr="* * * * * *", jitter=3.5)
    fires = next_fires(trigger, 0.0, 200)
    assert all(b > a for a, b in itertools.pairwise(fires))
    # Each nominal second fires exactly once, even where two fires swap places.
    nominals = [_nominal_of(trigger, f) for f in fires]
    assert len(set(nominals)) == len(nominals)
    assert set(range(1, max(nominals) - 3)) <= set(nominals)


def _nominal_of(trigger: Cron, fire: float) -> int:
    """The whole second whose jittered fire is ``fire``."""
    [nominal] = [
        n
        for n in range(math.floor(fire - trigger.jitter), math.floor(fire) + 1)
        if n + jitter_offset(key_of(trigger), float(n), trigger.jitter) == fire
    ]
    return nominal


# -- specs and descriptions -----------------------------------------------------------------------

ALL_KINDS: list[Trigger] = [
    Cron(expr="0 */5 * * * *", tz="Europe/Paris"),
    Cron(
        expr="0 9 * * MON-FRI",
        tz="America/New_York",
        start=1.5e9,
        end=2e9,
        jitter=30.0,
        exclude=frozenset({"2026-12-25", "2026-01-01"}),
    ),
    Every(seconds=300),
    Every(seconds=60, anchor=7.0, tz="Asia/Tokyo", start=10.0, end=1e6, jitter=5.0),
    After(seconds=90),
    After(seconds=90, start=100.0, end=200.0),
    At(when=1.75e9),
]


@pytest.mark.parametrize("trigger", ALL_KINDS, ids=lambda t: t.describe())
def test_spec_round_trips_through_json(trigger: Trigger) -> None:
    spec = trigger.to_spec()
    assert spec["kind"] == trigger.kind
    again = trigger_from_spec(json.loads(json.dumps(spec, allow_nan=False)))
    assert again == trigger
    assert again.to_spec() == spec


def test_spec_leaves_defaults_out() -> None:
    assert Every(seconds=60).to_spec() == {"kind": "every", "seconds": 60.0}
    assert Cron(expr="0 * * * *").to_spec() == {"kind": "cron", "expr": "0 * * * *", "tz": "UTC"}
    spec = Cron(expr="0 * * * *", exclude=frozenset({"2026-12-25", "2026-01-01"})).to_spec()
    assert spec["exclude"] == ["2026-01-01", "2026-12-25"]


def test_numbers_are_normalised_so_equal_triggers_share_a_spec() -> None:
    assert Every(seconds=60).to_spec() == Every(seconds=60.0).to_spec()
    assert Every(seconds=60) == Every(seconds=60.0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "weekly"}, "unknown trigger kind 'weekly'"),
        ({"expr": "* * * * *"}, "unknown trigger kind None"),
        ({"kind": "cron", "expr": "* * * * *", "zone": "UTC"}, "unknown field.* zone"),
        ({"kind": "every"}, "incomplete every trigger spec"),
        ({"kind": "every", "seconds": "60"}, "Every.seconds must be a finite number"),
        ({"kind": "cron", "expr": "* * * * *", "exclude": "2026-01-01"}, "collection of dates"),
        ({"kind": "cron", "expr": "* * * * *", "exclude": ["Christmas"]}, "'Christmas'"),
    ],
)
def test_bad_specs_are_refused(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        trigger_from_spec(spec)


def test_describe() -> None:
    assert Cron(expr="0 */5 * * * *", tz="Europe/Paris").describe() == (
        "cron '0 */5 * * * *' in Europe/Paris"
    )
    assert Every(seconds=300).describe() == "every 300s"
    assert After(seconds=90).describe() == "90s after the previous run ends"
    assert At(when=ts(2026, 5, 1, 12)).describe() == "at 2026-05-01T12:00:00+00:00"
    full = Cron(
        expr="0 9 * * *",
        start=ts(2026, 1, 1),
        end=ts(2027, 1, 1),
        jitter=30,
        exclude=frozenset({"2026-12-25"}),
    ).describe()
    assert full == (
        "cron '0 9 * * *' in UTC, from 2026-01-01T00:00:00+00:00, "
        "until 2027-01-01T00:00:00+00:00, jitter 30s, except on 2026-12-25"
    )
    assert Every(seconds=60, anchor=30).describe().startswith("every 60s anchored at 1970")


# -- make_trigger ---------------------------------------------------------------------------------


def test_make_trigger_builds_each_kind() -> None:
    assert make_trigger(cron="0 * * * *", tz="Europe/Paris") == Cron(
        expr="0 * * * *", tz="Europe/Paris"
    )
    assert make_trigger(every=timedelta(minutes=5)) == Every(seconds=300)
    assert make_trigger(after=90) == After(seconds=90)
    assert make_trigger(at=1.75e9) == At(when=1.75e9)
    excluded = make_trigger(every=60, exclude=[date(2026, 12, 25), "2026-01-01"])
    assert isinstance(excluded, Every)
    assert excluded.exclude == frozenset({"2026-12-25", "2026-01-01"})


def test_naive_datetimes_are_read_in_tz_and_aware_ones_as_they_are() -> None:
    naive = make_trigger(at=datetime(2026, 5, 1, 12), tz="Europe/Paris")
    assert naive == At(when=ts(2026, 5, 1, 10))
    aware = make_trigger(at=datetime(2026, 5, 1, 12, tzinfo=UTC), tz="Europe/Paris")
    assert aware == At(when=ts(2026, 5, 1, 12))
    assert make_trigger(at=datetime(2026, 5, 1, 12)) == At(when=ts(2026, 5, 1, 12))
    bounded = make_trigger(every=60, tz="America/New_York", start=datetime(2026, 1, 1))
    assert isinstance(bounded, Every)
    assert bounded.start == ts(2026, 1, 1, 5)


def test_naive_datetimes_follow_the_dst_rule() -> None:
    in_gap = make_trigger(at=datetime(2026, 3, 29, 2, 30), tz="Europe/Paris")
    assert in_gap == At(when=ts(2026, 3, 29, 1))  # the end of the gap
    in_fold = make_trigger(at=datetime(2026, 10, 25, 2, 30), tz="Europe/Paris")
    assert in_fold == At(when=ts(2026, 10, 25, 0, 30))  # the first 02:30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-01T12:00:00+02:00", ts(2026, 5, 1, 10)),
        ("2026-05-01T12:00:00Z", ts(2026, 5, 1, 12)),
        ("2026-05-01T12:00:00", ts(2026, 5, 1, 10)),  # naive: read in tz
        ("2026-05-01", ts(2026, 4, 30, 22)),
    ],
)
def test_at_accepts_iso_strings(text: str, expected: float) -> None:
    assert make_trigger(at=text, tz="Europe/Paris") == At(when=expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"give exactly one of cron=, every=, after= or at= \(got none\)"),
        ({"cron": "* * * * *", "every": 60}, r"\(got cron= and every=\)"),
        ({"after": 5, "at": 5.0}, r"\(got after= and at=\)"),
        ({"every": -1}, r"every= must be from 0.001 s \(1 ms\) to 3155760000 s .*got -1"),
        ({"every": 0}, r"every= must be from 0.001 s"),
        ({"every": 0.0009}, r"every= must be from 0.001 s"),
        ({"every": 1e12}, r"every= must be from .* \(100 years\), got 1000000000000.0"),
        ({"every": 1e308}, r"every= must be from .* got 1e\+308"),
        ({"every": math.inf}, r"every= must be a finite number"),
        ({"every": math.nan}, r"every= must be a finite number, got nan"),
        ({"after": timedelta(0)}, r"after= must be from 0.001 s"),
        ({"after": timedelta(days=365.25 * 100, seconds=1)}, r"after= must be from 0.001 s"),
        ({"at": 1e300}, r"at= must be a time from 1970-01-01 to 9999-12-31 .*got 1e\+300"),
        ({"at": -1.0}, r"at= must be a time from 1970-01-01"),
        ({"at": "0001-01-01T00:00:00"}, r"at= must be a time from 1970-01-01"),
        ({"at": datetime(9999, 12, 31, 23), "tz": "America/New_York"}, r"at= must be a time"),
        ({"every": 60, "start": 1e300}, r"start= must be a time from 1970-01-01"),
        ({"cron": "* * * * *", "jitter": 86401}, r"Cron.jitter must be at most 86400 s"),
        ({"cron": "* * * * *", "tz": "x" * 300}, r"unknown time zone 'x{80}…'; use"),
        ({"every": "60"}, r"every= must be a finite number, got '60'"),
        ({"cron": "* * * * *", "tz": "Europe/Pariss"}, r"unknown time zone 'Europe/Pariss'"),
        ({"cron": "* * * * *", "tz": ""}, r"tz must be an IANA time zone name"),
        ({"cron": "* * * * *", "tz": "../etc/passwd"}, r"unknown time zone"),
        ({"cron": "* * * * *", "start": 10.0, "end": 10.0}, r"start .* must be before end"),
        ({"every": 60, "start": 20.0, "end": 10.0}, r"Every.start .* must be before end"),
        ({"every": 60, "jitter": -1}, r"jitter must be >= 0"),
        ({"every": 60, "jitter": 90}, r"smaller than seconds"),
        ({"after": 60, "jitter": 5}, r"after= triggers take no jitter="),
        ({"at": 5.0, "exclude": ["2026-01-01"]}, r"at= triggers take no exclude="),
        ({"at": 5.0, "start": 1.0}, r"at= triggers take no start="),
        ({"at": "tomorrow"}, r"at= 'tomorrow' is not an ISO-8601 date-time"),
        ({"at": date(2026, 1, 1)}, r"at= takes a datetime, not a date"),
        ({"every": 60, "exclude": ["2026-13-01"]}, r"'2026-13-01', which is not an ISO date"),
        ({"every": 60, "exclude": [datetime(2026, 1, 1)]}, r"takes dates, not date-times"),
        ({"every": 60, "exclude": "2026-01-01"}, r"must be a collection of dates"),
    ],
)
def test_make_trigger_refuses_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make_trigger(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", r"'61 \* \* \* \*': minute '61' is out of range 0-59; read as 5 fields"),
        ("0 0 * * * 8", r"'0 0 \* \* \* 8': day-of-week '8' is out of range 0-7; read as 6"),
        ("0 0 * * * * *", r"7 fields are read as Quartz, which wants \? in day-of-month"),
        ("* * *", r"3 field\(s\); use 5 fields"),
        ("0 0 * * FOO", r"'0 0 \* \* FOO': day-of-week 'FOO' is not a number \(0-7\) or a name"),
        ("0 0 * * Mon-Fooday", r"day-of-week 'Mon-Fooday': 'Fooday' is not a number"),
        ("R * * * *", r"R \(random\)"),
        ("H * * * *", r"H \(hashed\)"),
        ("0 0 30 2 *", r"'0 0 30 2 \*': it never fires \(no such date, e.g. February 30\)"),
        ("0 0 0 31 2,4 ?", r"it never fires.*read as Quartz"),
        ("0 0 0 29 2 ? 2027", r"never fires in the years given"),
        ("@often", r"'@often': unknown alias; use one of @yearly"),
        ("*/0 * * * *", r"minute '\*/0': the step must be a whole number >= 1"),
        ("5-1 * * * *", r"minute '5-1' runs backwards; write it as a list, e.g. '5-59,0-1'"),
        ("1,,2 * * * *", r"minute '1,,2' has an empty list item"),
        ("0 0 * * L", r"day-of-week 'L' alone means Saturday only in Quartz; write 6 or SAT"),
        ("0 0 * * 5#6", r"day-of-week '5#6': n#k takes k from 1 to 5"),
        ("0 0 L-31 * *", r"day-of-month 'L-31': L-n takes n from 1 to 30"),
        ("0 0 ? * * *", r"\? stands only in day-of-month or day-of-week"),
        ("0 ? * * *", r"\? stands only in day-of-month or day-of-week"),
        ("0 0 12 ? * ?", r"Quartz wants \? in only one of day-of-month and day-of-week"),
        ("0 0 12 ? * 0", r"day-of-week '0' is out of range 1-7; read as Quartz.*1-7 = SUN-SAT"),
        ("0 0 12 ? * MON 1969", r"year '1969' is out of range 1970-2199"),
    ],
)
def test_bad_cron_expressions_are_refused_with_the_reason(expr: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make_trigger(cron=expr)


def test_next_fires_count() -> None:
    assert next_fires(Every(seconds=1), 0.0, 0) == []
    with pytest.raises(ConfigurationError, match="count must be an int >= 0"):
        next_fires(Every(seconds=1), 0.0, -1)


def test_next_fire_refuses_nan() -> None:
    with pytest.raises(ConfigurationError, match="after must be finite"):
        Cron(expr="* * * * *").next_fire(math.nan)


def test_next_fire_of_an_every_second_cron_is_fast() -> None:
    # Measured at about 6 µs a call (bench/cron.py). The bound is loose so that a busy machine
    # does not fail it; parsing the expression on each call (about 60 µs) would.
    trigger = Cron(expr="* * * * * *", tz="Europe/Paris")
    after = [ts(2026, 1, 1)]

    def step() -> None:
        after[0] = trigger.next_fire(after[0]) or 0.0

    calls = 2000
    seconds = min(timeit.repeat(step, number=calls, repeat=3)) / calls
    assert seconds < 100e-6
    assert after[0] == ts(2026, 1, 1) + 3 * calls


# -- properties -----------------------------------------------------------------------------------

SECONDS = ["0", "*", "*/15", "5,35", "10-20/5"]
MINUTES = ["0", "*", "*/7", "1,31", "15-45/15"]
HOURS = ["*", "0", "2", "1-3", "*/6", "9-17"]
DAYS = ["*", "1", "15", "L", "28", "1-7", "29", "31"]
MONTHS = ["*", "JAN", "2", "*/3", "3,10", "NOV-DEC"]
WEEKDAYS = ["*", "MON", "1-5", "SUN#1", "5L", "SAT,SUN"]


@st.composite
def cron_exprs(draw: st.DrawFn) -> str:
    """A random valid expression, 5 or 6 fields, built from field choices."""
    fields = [draw(st.sampled_from(choices)) for choices in (MINUTES, HOURS, DAYS, MONTHS)]
    fields.append(draw(st.sampled_from(WEEKDAYS)))
    if draw(st.booleans()):
        fields.insert(0, draw(st.sampled_from(SECONDS)))
    return " ".join(fields)


def cron_or_skip(expr: str, **options: object) -> Cron:
    """The trigger, or a skipped example when the random fields can never fire together."""
    try:
        return Cron(expr=expr, **options)  # type: ignore[arg-type]
    except ConfigurationError as exc:
        assume("never fires" not in str(exc))
        raise


zones = st.sampled_from(ZONES)
instants = st.floats(min_value=ts(1971, 1, 1), max_value=ts(2090, 1, 1))


@settings(max_examples=150, deadline=None)
@given(expr=cron_exprs(), zone=zones, start=instants)
def test_cron_fires_strictly_increase_and_match_the_expression(
    expr: str, zone: str, start: float
) -> None:
    trigger = cron_or_skip(expr, tz=zone)
    after = start
    for _ in range(25):
        fire = trigger.next_fire(after)
        if fire is None:
            break
        assert fire > after
        wall = local(fire, zone)
        assert compile_cron(expr).matches(wall) or _is_transition(fire, zone)
        after = fire


def _is_transition(instant: float, zone: str) -> bool:
    """Whether the offset of ``zone`` changes at ``instant`` (where a gap's fires go)."""
    tz = ZoneInfo(zone)
    return datetime.fromtimestamp(instant - 1, tz).utcoffset() != (
        datetime.fromtimestamp(instant, tz).utcoffset()
    )


@settings(max_examples=100, deadline=None)
@given(expr=cron_exprs(), start=instants)
def test_cron_in_utc_fires_exactly_where_cronsim_does(expr: str, start: float) -> None:
    # UTC has no gaps or folds, so the mapping must be the identity: no fire missed or added.
    trigger = cron_or_skip(expr)
    steps = CronSim(expr, utc(math.floor(start)))
    expected = [next(steps).timestamp() for _ in range(10)]
    expected = [e for e in expected if e > start][:8]
    assert next_fires(trigger, start, len(expected)) == expected


@settings(max_examples=100, deadline=None)
@given(
    expr=cron_exprs(),
    zone=zones,
    start=instants,
    span=st.floats(min_value=1.0, max_value=90 * 86400.0),
)
def test_end_bound_is_respected(expr: str, zone: str, start: float, span: float) -> None:
    trigger = cron_or_skip(expr, tz=zone, end=start + span)
    fires = next_fires(trigger, start, 40)
    assert all(start < f <= start + span for f in fires)
    if len(fires) < 40:
        assert trigger.next_fire(fires[-1] if fires else start) is None


@settings(max_examples=100, deadline=None)
@given(
    expr=cron_exprs(),
    zone=zones,
    start=instants,
    jitter=st.floats(min_value=0.001, max_value=30.0),
)
def test_jittered_fires_strictly_increase_within_bounds(
    expr: str, zone: str, start: float, jitter: float
) -> None:
    trigger = cron_or_skip(expr, tz=zone, jitter=jitter, start=start)
    fires = next_fires(trigger, start - 10.0, 20)
    assert all(b > a for a, b in itertools.pairwise(fires))
    assert all(f >= start for f in fires)


@settings(max_examples=100, deadline=None)
@given(
    seconds=st.floats(min_value=0.5, max_value=86400.0),
    anchor=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e10)),
    start=instants,
    jitter_share=st.floats(min_value=0.0, max_value=0.99),
)
def test_every_fires_on_its_grid(
    seconds: float, anchor: float | None, start: float, jitter_share: float
) -> None:
    trigger = Every(seconds=seconds, anchor=anchor, jitter=seconds * jitter_share)
    base = anchor or 0.0
    after, previous_k = start, None
    for _ in range(20):
        fire = trigger.next_fire(after)
        assert fire is not None
        assert fire > after
        # The fire is a grid point plus that point's own jitter offset, one grid step on.
        k = math.floor((fire - base) / seconds)
        [nominal_k] = [
            j
            for j in (k - 1, k, k + 1)
            if base
            + j * seconds
            + jitter_offset(key_of(trigger), base + j * seconds, trigger.jitter)
            == fire
        ]
        assert previous_k is None or nominal_k == previous_k + 1
        after, previous_k = fire, nominal_k


@settings(max_examples=60, deadline=None)
@given(year=st.integers(min_value=1971, max_value=2090), zone=zones)
def test_leap_day_fires_only_on_february_29(year: int, zone: str) -> None:
    trigger = Cron(expr="0 0 29 2 *", tz=zone)
    fires = next_fires(trigger, ts(year, 1, 1), 3)
    days = [local(f, zone).date() for f in fires]
    assert all((d.month, d.day) == (2, 29) for d in days)
    leap = [y for y in range(year, year + 20) if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)]
    assert [d.year for d in days] == leap[:3]


def test_leap_days_across_a_century() -> None:
    trigger = Cron(expr="0 0 29 2 *")
    assert utc(trigger.next_fire(ts(2028, 2, 29)) or 0) == datetime(2032, 2, 29, tzinfo=UTC)
    # 2100 is not a leap year: eight years pass between two February 29ths.
    assert utc(trigger.next_fire(ts(2096, 2, 29)) or 0) == datetime(2104, 2, 29, tzinfo=UTC)


@settings(max_examples=100, deadline=None)
@given(
    expr=cron_exprs(),
    zone=zones,
    start=instants,
    offsets=st.sets(st.integers(min_value=0, max_value=60), max_size=30),
)
def test_excluded_dates_never_fire(expr: str, zone: str, start: float, offsets: set[int]) -> None:
    first = local(start, zone).date()
    excluded = frozenset((first + timedelta(days=d)).isoformat() for d in offsets)
    trigger = cron_or_skip(expr, tz=zone, exclude=excluded)
    fires = next_fires(trigger, start, 30)
    assert all(local(f, zone).date().isoformat() not in excluded for f in fires)
    assert all(b > a for a, b in itertools.pairwise(fires))
    plain = next_fires(cron_or_skip(expr, tz=zone), start, 30)
    kept = [f for f in plain if local(f, zone).date().isoformat() not in excluded]
    assert fires[: len(kept)] == kept[: len(fires)]


def test_jobs_with_one_schedule_get_their_own_jitter() -> None:
    from cronbus.triggers import make_trigger

    a = make_trigger(cron="0 * * * * *", jitter=30.0, seed="job-a")
    b = make_trigger(cron="0 * * * * *", jitter=30.0, seed="job-b")
    again = trigger_from_spec(a.to_spec())
    after = 1_700_000_000.0
    fires_a = [a.next_fire(after + 60 * i) for i in range(5)]
    assert fires_a == [again.next_fire(after + 60 * i) for i in range(5)]  # deterministic
    assert fires_a != [b.next_fire(after + 60 * i) for i in range(5)]
    assert a.to_spec()["seed"] == "job-a"
    assert "seed" not in make_trigger(cron="0 * * * * *", seed="job-a").to_spec()  # no jitter
