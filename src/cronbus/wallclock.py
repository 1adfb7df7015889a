"""Wall-clock times and instants in a zone, by cronbus's daylight saving time rule.

(a) a wall-clock time that does not exist (it falls in a spring-forward gap) maps to the first
    instant after the gap, which is the transition instant itself;
(b) a wall-clock time that occurs twice (a fall-back fold) maps to its *first* occurrence.

The mapping never decreases. Pure functions over ``zoneinfo``; no clock is read.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = ["iso", "resolve", "search_start", "transition"]

_ONE_SECOND = timedelta(seconds=1)


def search_start(zone: ZoneInfo, instant: int) -> datetime:
    """The naive wall-clock time from which the next matching time must be searched.

    Every wall-clock time after this one maps (by rules a and b) to an instant after
    ``instant``. That is the wall-clock time of ``instant`` itself, except during the repeated
    pass of a fold: its wall-clock times already fired in the first pass, so the search starts
    where the fold ends.
    """
    local = datetime.fromtimestamp(instant, zone)
    wall = local.replace(tzinfo=None, fold=0)
    first_pass = local.replace(fold=0)
    offset, first_offset = local.utcoffset(), first_pass.utcoffset()
    if local.fold == 0 or offset is None or first_offset is None or offset == first_offset:
        return wall
    repeated = int((first_offset - offset).total_seconds())
    moment = transition(zone, instant - repeated, instant)
    fold_end = datetime.fromtimestamp(moment, zone).replace(tzinfo=None, fold=0)
    # One second back, so a search for times strictly after it includes the fold's end.
    return fold_end + timedelta(seconds=repeated) - _ONE_SECOND


def resolve(zone: ZoneInfo, wall: datetime) -> tuple[float, datetime]:
    """The instant a naive wall-clock time fires at, and the wall-clock time of that instant.

    An ambiguous time takes its first occurrence (fold=0); a nonexistent one the transition
    instant that ends its gap.
    """
    first = wall.replace(tzinfo=zone, fold=0)
    instant = first.timestamp()
    local = datetime.fromtimestamp(instant, zone).replace(tzinfo=None, fold=0)
    if local == wall:
        return instant, wall
    # In a gap: fold=0 reads the time with the offset before the gap (an instant after it),
    # fold=1 with the offset after it (an instant before it): the transition lies between.
    before = wall.replace(tzinfo=zone, fold=1).timestamp()
    moment = float(transition(zone, math.floor(before), math.ceil(instant)))
    return moment, datetime.fromtimestamp(moment, zone).replace(tzinfo=None)


def transition(zone: ZoneInfo, low: int, high: int) -> int:
    """The first whole second in ``(low, high]`` with the UTC offset ``high`` has.

    Zone transitions fall on whole seconds, and ``(low, high]`` holds at most one of them here
    (a gap or a fold is hours long, transitions are months apart).
    """
    target = datetime.fromtimestamp(high, zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            high = middle
        else:
            low = middle
    return high


def iso(instant: float, zone: ZoneInfo) -> str:
    """An instant as an ISO-8601 date-time in ``zone``, for people."""
    try:
        return datetime.fromtimestamp(instant, zone).isoformat()
    except (OverflowError, ValueError, OSError):
        return repr(instant)
