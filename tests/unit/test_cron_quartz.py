"""Quartz expressions: the examples of Quartz's CronTrigger tutorial and CronExpression javadoc.

Each row gives an expression, the start (UTC), and the next fires Quartz documents for it,
worked out by hand on the calendar (2026-01-01 is a Thursday). Weekdays are 1-7 = SUN-SAT.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronbus.errors import ConfigurationError
from cronbus.triggers import Cron, next_fires


def d(*parts: int) -> datetime:
    """A UTC date-time."""
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


JAN1 = d(2026, 1, 1)

# (expression, what Quartz's documentation says, start, expected next fires)
TABLE: list[tuple[str, str, datetime, list[datetime]]] = [
    ("0 0 12 * * ?", "12pm (noon) every day", JAN1, [d(2026, 1, 1, 12), d(2026, 1, 2, 12)]),
    ("0 15 10 ? * *", "10:15am every day", JAN1, [d(2026, 1, 1, 10, 15), d(2026, 1, 2, 10, 15)]),
    ("0 15 10 * * ?", "10:15am every day", JAN1, [d(2026, 1, 1, 10, 15), d(2026, 1, 2, 10, 15)]),
    ("0 15 10 * * ? *", "10:15am every day", JAN1, [d(2026, 1, 1, 10, 15), d(2026, 1, 2, 10, 15)]),
    (
        "0 15 10 * * ? 2005",
        "10:15am every day during the year 2005",
        d(2004, 12, 31, 12),
        [d(2005, 1, 1, 10, 15), d(2005, 1, 2, 10, 15)],
    ),
    (
        "0 15 10 * * ? 2005",
        "... and not after 2005",
        d(2005, 12, 30, 12),
        [d(2005, 12, 31, 10, 15)],
    ),
    (
        "0 * 14 * * ?",
        "every minute starting at 2pm and ending at 2:59pm, every day",
        d(2026, 1, 1, 14, 58),
        [d(2026, 1, 1, 14, 59), d(2026, 1, 2, 14, 0), d(2026, 1, 2, 14, 1)],
    ),
    (
        "0 0/5 14 * * ?",
        "every 5 minutes starting at 2pm and ending at 2:55pm, every day",
        d(2026, 1, 1, 14, 50),
        [d(2026, 1, 1, 14, 55), d(2026, 1, 2, 14, 0), d(2026, 1, 2, 14, 5)],
    ),
    (
        "0 0/5 14,18 * * ?",
        "every 5 minutes from 2pm to 2:55pm, and from 6pm to 6:55pm, every day",
        d(2026, 1, 1, 14, 52),
        [d(2026, 1, 1, 14, 55), d(2026, 1, 1, 18, 0), d(2026, 1, 1, 18, 5)],
    ),
    (
        "0 0-5 14 * * ?",
        "every minute starting at 2pm and ending at 2:05pm, every day",
        d(2026, 1, 1, 14, 4),
        [d(2026, 1, 1, 14, 5), d(2026, 1, 2, 14, 0)],
    ),
    (
        "0 10,44 14 ? 3 WED",
        "2:10pm and at 2:44pm every Wednesday in the month of March",
        JAN1,
        [d(2026, 3, 4, 14, 10), d(2026, 3, 4, 14, 44), d(2026, 3, 11, 14, 10)],
    ),
    (
        "0 15 10 ? * MON-FRI",
        "10:15am every Monday, Tuesday, Wednesday, Thursday and Friday",
        d(2026, 1, 2, 11),
        [d(2026, 1, 5, 10, 15), d(2026, 1, 6, 10, 15), d(2026, 1, 7, 10, 15)],
    ),
    (
        "0 15 10 ? * 2-6",
        "2-6 is MON-FRI",
        d(2026, 1, 2, 11),
        [d(2026, 1, 5, 10, 15), d(2026, 1, 6, 10, 15), d(2026, 1, 7, 10, 15)],
    ),
    (
        "0 15 10 15 * ?",
        "10:15am on the 15th day of every month",
        JAN1,
        [d(2026, 1, 15, 10, 15), d(2026, 2, 15, 10, 15)],
    ),
    (
        "0 15 10 L * ?",
        "10:15am on the last day of every month",
        JAN1,
        [d(2026, 1, 31, 10, 15), d(2026, 2, 28, 10, 15), d(2026, 3, 31, 10, 15)],
    ),
    (
        "0 15 10 L-2 * ?",
        "10:15am on the 2nd-to-last last day of every month",
        JAN1,
        [d(2026, 1, 29, 10, 15), d(2026, 2, 26, 10, 15), d(2026, 3, 29, 10, 15)],
    ),
    (
        "0 15 10 ? * 6L",
        "10:15am on the last Friday of every month",
        JAN1,
        [d(2026, 1, 30, 10, 15), d(2026, 2, 27, 10, 15), d(2026, 3, 27, 10, 15)],
    ),
    (
        "0 15 10 ? * 6L 2002-2005",
        "10:15am on every last Friday of every month during 2002-2005",
        d(2005, 10, 1),
        [d(2005, 10, 28, 10, 15), d(2005, 11, 25, 10, 15), d(2005, 12, 30, 10, 15)],
    ),
    (
        "0 15 10 ? * 6#3",
        "10:15am on the third Friday of every month",
        JAN1,
        [d(2026, 1, 16, 10, 15), d(2026, 2, 20, 10, 15), d(2026, 3, 20, 10, 15)],
    ),
    (
        "0 0 12 ? * 6#3",
        "noon on the third Friday (the issue's example; not the third Saturday)",
        JAN1,
        [d(2026, 1, 16, 12), d(2026, 2, 20, 12)],
    ),
    (
        "0 0 12 1/5 * ?",
        "12pm every 5 days every month, beginning on the first day of the month",
        JAN1,
        [d(2026, 1, 1, 12), d(2026, 1, 6, 12), d(2026, 1, 11, 12)],
    ),
    (
        "0 11 11 11 11 ?",
        "every November 11th at 11:11am",
        JAN1,
        [d(2026, 11, 11, 11, 11), d(2027, 11, 11, 11, 11)],
    ),
    (
        "0 0 0 15W * ?",
        "the weekday nearest the 15th (Sunday 15 February: Monday the 16th)",
        JAN1,
        [d(2026, 1, 15), d(2026, 2, 16), d(2026, 3, 16)],
    ),
    (
        "0 0 0 1W * ?",
        "1W on a Saturday (1 August 2026) fires Monday the 3rd, never the month before",
        d(2026, 7, 2),
        [d(2026, 8, 3), d(2026, 9, 1)],
    ),
    (
        "0 0 0 LW * ?",
        "the last weekday of the month",
        JAN1,
        [d(2026, 1, 30), d(2026, 2, 27), d(2026, 3, 31)],
    ),
    ("0 0 0 ? * L", "L alone in day-of-week is 7, SAT", JAN1, [d(2026, 1, 3), d(2026, 1, 10)]),
    ("0 0 0 ? * 7L", "the last Saturday", JAN1, [d(2026, 1, 31), d(2026, 2, 28)]),
    ("0 0 0 ? * 1#1", "the first Sunday", JAN1, [d(2026, 1, 4), d(2026, 2, 1), d(2026, 3, 1)]),
    ("0 0 0 ? * sun", "names in any case", JAN1, [d(2026, 1, 4), d(2026, 1, 11)]),
    (
        "0 0 22-1 * * ?",
        "a reversed range wraps around, as Quartz reads it",
        d(2025, 12, 31, 23, 30),
        [d(2026, 1, 1, 0), d(2026, 1, 1, 1), d(2026, 1, 1, 22), d(2026, 1, 1, 23)],
    ),
    (
        "0 0 0 ? * FRI-MON",
        "FRI-MON wraps: Friday to Monday",
        JAN1,
        [d(2026, 1, 2), d(2026, 1, 3), d(2026, 1, 4), d(2026, 1, 5), d(2026, 1, 9)],
    ),
]


@pytest.mark.parametrize(
    ("expr", "meaning", "start", "expected"), TABLE, ids=[row[0] for row in TABLE]
)
def test_quartz_documented_examples(
    expr: str, meaning: str, start: datetime, expected: list[datetime]
) -> None:
    fires = next_fires(Cron(expr=expr), start.timestamp(), len(expected))
    assert [datetime.fromtimestamp(f, UTC) for f in fires] == expected, meaning


def test_a_year_field_ends_the_fires() -> None:
    trigger = Cron(expr="0 15 10 * * ? 2005")
    assert trigger.next_fire(d(2005, 12, 31, 10, 15).timestamp()) is None
    assert Cron(expr="0 15 10 ? * 6L 2002-2005").next_fire(d(2006, 1, 1).timestamp()) is None


def test_quartz_in_a_zone() -> None:
    # 10:15 in Paris in January is 09:15 UTC.
    fire = Cron(expr="0 15 10 ? * 2-6", tz="Europe/Paris").next_fire(JAN1.timestamp())
    assert fire == d(2026, 1, 1, 9, 15).timestamp()


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 0 12 ? * 0", r"day-of-week '0' is out of range 1-7; read as Quartz.*1-7 = SUN-SAT"),
        ("0 0 12 ? * 8", r"day-of-week '8' is out of range 1-7"),
        ("0 0 12 ? * ?", r"Quartz wants \? in only one of day-of-month and day-of-week"),
        ("0 0 12 1 * 2 2030", r"7 fields are read as Quartz, which wants \? in day-of-month"),
        ("0 ? 12 * * ?", r"\? stands only in day-of-month or day-of-week"),
        ("0 0 12 L-3W * ?", r"L-n takes n from 1 to 30 .* write LW for the last weekday"),
        ("0 0 12 ? * 6#0", r"n#k takes k from 1 to 5"),
        ("0 0 12 * * ? 1969", r"year '1969' is out of range 1970-2199"),
        ("0 0 12 30 2 ?", r"it never fires \(no such date, e.g. February 30\); read as Quartz"),
        ("0 0 0 29 2 ? 2029-2031", r"never fires in the years given"),
    ],
)
def test_unsupported_or_wrong_quartz_is_refused_saying_how(expr: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Cron(expr=expr)
