"""Triggers: when a job fires.

A trigger is a pure, frozen value. It never reads the clock: the scheduler passes a time in and
asks for the first fire strictly after it (``next_fire``). Times are epoch seconds (``float``).

===========  ================================================================================
kind         fires
===========  ================================================================================
``cron``     on a cron expression, in the wall-clock time of a zone (:class:`Cron`)
``every``    at ``anchor + k * seconds``: a fixed rate, aligned to the anchor (:class:`Every`)
``after``    ``seconds`` after the previous run *ended* (:class:`After`)
``at``       once (:class:`At`)
===========  ================================================================================

Cron expressions have 5 fields (``minute hour day-of-month month day-of-week``) or 6 with the
seconds *first* (``second minute hour day-of-month month day-of-week``, the Quartz/Spring order).
They are read by croniter, so its syntax comes through unchanged: lists, ranges, steps, names
(``MON``, ``JAN``), ``L``, ``#``, ``W``, ``?`` and the ``@hourly``-style aliases (5-field). The
``R`` (random) form is refused, since each process would draw its own schedule, and so is ``H``
(hashed), which needs a per-job seed.

Daylight saving time
--------------------
Cron expressions are matched against the *naive wall-clock time* of the trigger's zone; each
matching wall-clock time is then mapped to one instant by this rule:

(a) a wall-clock time that does not exist (it falls in a spring-forward gap) fires at the first
    instant after the gap, which is the transition instant itself. Every nonexistent time of one
    gap maps to that same instant, so the whole gap fires once.
(b) a wall-clock time that occurs twice (a fall-back fold) fires once, at its *first* occurrence
    (``fold=0``). Nothing fires during the repeated pass of the folded hour.

The mapping never decreases, so successive ``next_fire`` calls return strictly increasing
instants. ``exclude`` dates are read in the same zone.

Jitter
------
``Cron`` and ``Every`` can spread their fires: a fire happens at ``nominal + offset`` where
``offset = jitter_offset(key, nominal, jitter)`` is in ``[0, jitter)`` and ``key`` is the
trigger's canonical spec (``json.dumps(spec, sort_keys=True, separators=(",", ":"))``), so every
scheduler process computes the same fire time. The spec holds a ``seed`` (jobs use their name), so
jobs with the same schedule and jitter are spread apart, not moved together. To step on, pass
the fire ``next_fire`` returned (jitter included) back as ``after``.
``next_fire(after)`` returns the smallest ``nominal + offset`` strictly greater than ``after``,
so the sequence is strictly increasing whatever the jitter. When the jitter is smaller than the
gap between two nominal fires (always so for ``Every``, which requires it) the fires also keep
their nominal order; a larger jitter on a cron may reorder two fires, and makes ``next_fire``
scan every nominal time in the jitter window.

Bounds
------
``start`` and ``end`` bound the fires: a nominal time before ``start`` is skipped, and no fire
(jitter included) is returned after ``end``: ``start <= fire <= end``. Skipping ``exclude`` dates
gives up after about five years of excluded fires and returns ``None`` rather than loop.

Cost
----
``next_fire`` parses nothing: the expression is compiled once, at construction, and the zone is
cached. A croniter step costs 20-40 µs, so inside a minute that already matched, a 6-field
expression takes its next second from the expanded seconds list instead. Measured with
``timeit`` on ``Cron(expr="* * * * * *", tz="Europe/Paris")``, stepping
``t = trigger.next_fire(t)``: 15-20 µs a call (one croniter step a minute); with a jitter,
about twice that; a 5-field or once-a-minute expression pays one croniter step a call.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timedelta
from typing import ClassVar, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from .errors import ConfigurationError
from .model import JSON

__all__ = [
    "After",
    "At",
    "Cron",
    "Every",
    "Trigger",
    "jitter_offset",
    "make_trigger",
    "next_fires",
    "trigger_from_spec",
]

_FIELDS_5 = "minute hour day-of-month month day-of-week"
_FIELDS_6 = "second minute hour day-of-month month day-of-week"
_CRON_HINTS = {
    5: f"read as 5 fields: {_FIELDS_5} (6 fields put the seconds first)",
    6: f"read as 6 fields: {_FIELDS_6} (seconds first, as in Quartz and Spring)",
}
_CRON_HINT = f"use 5 fields ({_FIELDS_5}) or 6 fields: {_FIELDS_6}"
# croniter's random (R) and hashed (H) forms; matched per comma-separated item, any field.
_DRAWN_ITEM = re.compile(r"[rh](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
# Where the compiled expression starts counting; any date works, croniter is always given one.
_REFERENCE = datetime(2000, 1, 1)
_ONE_SECOND = timedelta(seconds=1)
_ONE_DAY = timedelta(days=1)
# How far past the first excluded fire next_fire keeps skipping before it gives up.
_EXCLUDE_HORIZON = timedelta(days=5 * 366)


class Trigger(Protocol):
    """When a job fires: the first fire after a time, and a spec that can be stored."""

    @property
    def kind(self) -> str:
        """``"cron"``, ``"every"``, ``"after"`` or ``"at"``."""
        ...

    def next_fire(self, after: float) -> float | None:
        """The first fire strictly after ``after`` (epoch seconds), or None when no more."""
        ...

    def to_spec(self) -> dict[str, JSON]:
        """A JSON-able mapping that :func:`trigger_from_spec` turns back into this trigger."""
        ...

    def describe(self) -> str:
        """One line for people, e.g. ``cron '0 */5 * * * *' in Europe/Paris``."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Cron:
    """Fires on a cron expression (5 fields, or 6 with seconds first) in the zone ``tz``.

    ``exclude`` holds ISO dates (``"2026-12-25"``) on which nothing fires, in ``tz``. See the
    module docstring for daylight saving time, jitter and bounds.
    """

    kind: ClassVar[str] = "cron"
    expr: str
    tz: str = "UTC"
    start: float | None = None
    end: float | None = None
    jitter: float = 0.0
    exclude: frozenset[str] = frozenset()
    seed: str = ""
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _cron: croniter[datetime] = field(init=False, repr=False, compare=False)
    _seconds: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _matched: list[datetime] = field(init=False, repr=False, compare=False)
    _dates: frozenset[date] = field(init=False, repr=False, compare=False)
    _key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate and normalise every field, compile the expression once."""
        if not isinstance(self.expr, str):
            raise ConfigurationError(f"Cron.expr must be a string, got {self.expr!r}")
        # One spelling per expression, so equal triggers share one spec and one jitter key.
        object.__setattr__(self, "expr", " ".join(self.expr.split()))
        object.__setattr__(self, "_zone", _zone(self.tz))
        object.__setattr__(self, "_cron", _compile(self.expr))
        object.__setattr__(self, "_seconds", _second_values(self._cron))
        # A memo, not state: a minute that matched stays matched (see _next_in_minute).
        object.__setattr__(self, "_matched", [datetime.min])
        _init_common(self, "Cron")

    def next_fire(self, after: float) -> float | None:
        """The first fire strictly after ``after``, or None when none is left."""
        # Cron instants are whole seconds (zone offsets are), so they are >= 1 s apart.
        return _first_fire(self, self._nominals, 1.0, after)

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "cron", "expr": ..., "tz": ...}`` plus the bounds, jitter and exclude set."""
        return {"kind": "cron", "expr": self.expr, "tz": self.tz, **_common_spec(self)}

    def describe(self) -> str:
        """E.g. ``cron '0 */5 * * * *' in Europe/Paris``."""
        return f"cron {self.expr!r} in {self.tz}" + _common_text(self, self._zone)

    def _nominals(self, x: float) -> Iterator[float]:
        """The matching instants strictly after ``x``, in order, exclude dates skipped."""
        try:
            cursor = _search_start(self._zone, math.floor(x))
        except (OverflowError, ValueError, OSError):
            return  # outside what datetime can represent
        steps: croniter[datetime] | None = None
        last, limit = x, None
        while True:
            wall = self._next_in_minute(cursor)
            if wall is None:
                # A copy: croniter keeps its position in the object, and triggers are shared.
                steps = steps or copy.copy(self._cron)
                try:
                    wall = steps.get_next(datetime, start_time=cursor)
                except (CroniterBadDateError, OverflowError, ValueError):
                    return  # no match in croniter's 50-year window, or past year 9999
                self._matched[0] = wall.replace(second=0)
            instant, local = _resolve(self._zone, wall)
            # From the end of a gap (local), not from inside it: the rest of the gap would
            # map to the same instant again, up to 3,599 times for a cron of every second.
            cursor = local
            if instant <= last:
                continue  # a guard: cannot happen with the cursor rules above
            if local.date() in self._dates:
                if limit is None:
                    limit = wall + _EXCLUDE_HORIZON
                if wall > limit:
                    return
                cursor = datetime.combine(local.date() + _ONE_DAY, time()) - _ONE_SECOND
                continue
            last, limit = instant, None
            yield instant

    def _next_in_minute(self, cursor: datetime) -> datetime | None:
        """The next matching second after ``cursor`` in its minute, when that is known.

        A croniter step costs about 20 µs; an every-second cron would pay it every second.
        When croniter last answered with a time in ``cursor``'s minute, that minute matches
        every field but the seconds, so the next second comes from the seconds list alone.
        Threads may race on the memo harmlessly: any minute it holds did match.
        """
        minute = cursor.replace(second=0, microsecond=0)
        if minute != self._matched[0]:
            return None
        later = bisect.bisect_right(self._seconds, cursor.second)
        return minute.replace(second=self._seconds[later]) if later < len(self._seconds) else None


@dataclass(frozen=True, kw_only=True, slots=True)
class Every:
    """Fires at ``anchor + k * seconds`` for every integer ``k``: a fixed rate.

    ``anchor`` defaults to ``start``, or to 0 (the epoch), so the fires of every job with the
    same period line up (``seconds=60`` fires on the minute). ``tz`` is only used to read the
    ``exclude`` dates. ``jitter`` must be smaller than ``seconds``.
    """

    kind: ClassVar[str] = "every"
    seconds: float
    anchor: float | None = None
    tz: str = "UTC"
    start: float | None = None
    end: float | None = None
    jitter: float = 0.0
    exclude: frozenset[str] = frozenset()
    seed: str = ""
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _dates: frozenset[date] = field(init=False, repr=False, compare=False)
    _key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate and normalise every field."""
        object.__setattr__(self, "seconds", _positive("Every.seconds", self.seconds))
        object.__setattr__(self, "anchor", _optional_time("Every.anchor", self.anchor))
        object.__setattr__(self, "_zone", _zone(self.tz))
        _init_common(self, "Every")
        if self.jitter >= self.seconds:
            raise ConfigurationError(
                f"Every.jitter ({self.jitter:g}) must be smaller than seconds "
                f"({self.seconds:g}), or fires could overtake each other"
            )

    def next_fire(self, after: float) -> float | None:
        """The first fire strictly after ``after``, or None when none is left."""
        return _first_fire(self, self._nominals, self.seconds, after)

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "every", "seconds": ...}`` plus whatever differs from the defaults."""
        spec: dict[str, JSON] = {"kind": "every", "seconds": self.seconds}
        if self.anchor is not None:
            spec["anchor"] = self.anchor
        if self.tz != "UTC":
            spec["tz"] = self.tz
        return spec | _common_spec(self)

    def describe(self) -> str:
        """E.g. ``every 300s`` or ``every 60s anchored at 1970-01-01T00:00:30+00:00``."""
        text = f"every {self.seconds:g}s"
        if self.anchor is not None:
            text += f" anchored at {_iso(self.anchor, self._zone)}"
        return text + _common_text(self, self._zone)

    def _nominals(self, x: float) -> Iterator[float]:
        """The instants ``anchor + k * seconds`` strictly after ``x``, exclude dates skipped."""
        anchor = self.anchor if self.anchor is not None else (self.start or 0.0)
        limit: float | None = None
        while True:
            x = nominal = _step_after(anchor, self.seconds, x)
            if self._dates:
                try:
                    day = datetime.fromtimestamp(nominal, self._zone).date()
                except (OverflowError, ValueError, OSError):
                    return  # outside what datetime can represent
                if day in self._dates:
                    if limit is None:
                        limit = nominal + _EXCLUDE_HORIZON.total_seconds()
                    if nominal > limit:
                        return
                    midnight = datetime.combine(day + _ONE_DAY, time())
                    x = math.nextafter(_resolve(self._zone, midnight)[0], -math.inf)
                    continue
            limit = None
            yield nominal


@dataclass(frozen=True, kw_only=True, slots=True)
class After:
    """Fires ``seconds`` after the previous run *ends*: a fixed delay, never overlapping.

    The scheduler computes the next fire when a run ends, passing that end time as ``after``:
    ``next_fire(after) == after + seconds`` (moved up to ``start`` if earlier, None past
    ``end``). When a new job first fires (at once, or ``next_fire(created)``) is the
    scheduler's choice: there is no previous run to wait for.
    """

    kind: ClassVar[str] = "after"
    seconds: float
    start: float | None = None
    end: float | None = None

    def __post_init__(self) -> None:
        """Validate and normalise every field."""
        object.__setattr__(self, "seconds", _positive("After.seconds", self.seconds))
        _init_bounds(self, "After")

    def next_fire(self, after: float) -> float | None:
        """``after + seconds``, where ``after`` is the end of the previous run."""
        fire = _check_after(after) + self.seconds
        if self.start is not None:
            fire = max(fire, self.start)
        return None if self.end is not None and fire > self.end else fire

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "after", "seconds": ...}`` plus the bounds when set."""
        return {"kind": "after", "seconds": self.seconds, **_bounds_spec(self)}

    def describe(self) -> str:
        """E.g. ``300s after the previous run ends``."""
        return f"{self.seconds:g}s after the previous run ends" + _bounds_text(self, _UTC)


@dataclass(frozen=True, kw_only=True, slots=True)
class At:
    """Fires once, at ``when``."""

    kind: ClassVar[str] = "at"
    when: float

    def __post_init__(self) -> None:
        """Validate and normalise ``when``."""
        object.__setattr__(self, "when", _number("At.when", self.when))

    def next_fire(self, after: float) -> float | None:
        """``when`` if it is strictly after ``after``, else None: it is in the past."""
        return self.when if self.when > _check_after(after) else None

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "at", "when": ...}``."""
        return {"kind": "at", "when": self.when}

    def describe(self) -> str:
        """E.g. ``at 2026-05-01T12:00:00+00:00``."""
        return f"at {_iso(self.when, _UTC)}"


_UTC = ZoneInfo("UTC")
_KINDS: dict[str, type[Cron | Every | After | At]] = {
    "cron": Cron,
    "every": Every,
    "after": After,
    "at": At,
}


def make_trigger(
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    after: float | timedelta | None = None,
    at: datetime | float | str | None = None,
    tz: str | None = None,
    start: datetime | float | None = None,
    end: datetime | float | None = None,
    jitter: float = 0.0,
    exclude: Iterable[date | str] = (),
    seed: str = "",
) -> Trigger:
    """Build a trigger from the spellings a job decorator takes; give exactly one kind.

    ``tz`` is an IANA zone name (default ``"UTC"``). It is the zone of a cron expression and of
    ``exclude`` dates, and the zone in which *naive* datetimes given as ``at``, ``start`` or
    ``end`` are read (by the module's DST rule: a nonexistent time means the end of the gap, an
    ambiguous one its first occurrence); aware datetimes are used as they are. ``at`` may also
    be an ISO-8601 string (``"2026-05-01T12:00:00+02:00"``, or naive, read in ``tz``), and
    ``every``/``after`` a number of seconds or a ``timedelta``. ``seed`` (a job passes its
    name) makes the jitter of triggers with the same schedule differ.
    """
    given = {"cron": cron, "every": every, "after": after, "at": at}
    kinds = [name for name, value in given.items() if value is not None]
    if len(kinds) != 1:
        got = " and ".join(f"{k}=" for k in kinds) if kinds else "none"
        raise ConfigurationError(f"give exactly one of cron=, every=, after= or at= (got {got})")
    zone_name = "UTC" if tz is None else tz
    zone = _zone(zone_name)
    bounds = {"start": _instant("start", start, zone), "end": _instant("end", end, zone)}
    dates = frozenset(_iso_date(d) for d in _iterable("exclude", exclude))
    if cron is not None:
        return Cron(expr=cron, tz=zone_name, jitter=jitter, exclude=dates, seed=seed, **bounds)
    if every is not None:
        seconds = _seconds("every", every)
        return Every(
            seconds=seconds, tz=zone_name, jitter=jitter, exclude=dates, seed=seed, **bounds
        )
    _refuse_options(kinds[0], jitter=jitter != 0.0, exclude=bool(dates))
    if after is not None:
        return After(seconds=_seconds("after", after), **bounds)
    _refuse_options("at", start=start is not None, end=end is not None)
    return At(when=_at_instant(at, zone))


def trigger_from_spec(spec: Mapping[str, JSON]) -> Trigger:
    """Rebuild the trigger that :meth:`Trigger.to_spec` described."""
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"a trigger spec must be a mapping, got {spec!r}")
    kind = spec.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ConfigurationError(
            f"unknown trigger kind {kind!r} in {dict(spec)!r}; use one of {', '.join(_KINDS)}"
        )
    allowed = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(spec) - allowed - {"kind"})
    if unknown:
        raise ConfigurationError(
            f"unknown field(s) {', '.join(unknown)} in {kind} trigger spec; "
            f"expected {', '.join(sorted(allowed))}"
        )
    # Each dataclass checks and normalises its own fields (an exclude list becomes a frozenset).
    options = {k: v for k, v in spec.items() if k != "kind"}
    try:
        return cls(**options)
    except TypeError as exc:  # a required field is missing
        raise ConfigurationError(f"incomplete {kind} trigger spec {dict(spec)!r}: {exc}") from exc


def next_fires(trigger: Trigger, after: float, count: int) -> list[float]:
    """The next ``count`` fires after ``after`` (fewer when the trigger runs out)."""
    if not isinstance(count, int) or count < 0:
        raise ConfigurationError(f"count must be an int >= 0, got {count!r}")
    fires: list[float] = []
    while len(fires) < count:
        fire = trigger.next_fire(after)
        if fire is None:
            break
        fires.append(fire)
        after = fire
    return fires


def jitter_offset(key: str, nominal: float, jitter: float) -> float:
    """A deterministic offset in ``[0, jitter)`` for the fire of ``key`` at ``nominal``.

    A hash (blake2b) of the key and of ``repr(nominal)``, so every process, on any machine,
    computes the same offset, and triggers with different keys spread differently.
    """
    if jitter == 0.0:
        return 0.0
    if not 0.0 < jitter < math.inf:
        raise ConfigurationError(f"jitter must be a finite number >= 0, got {jitter!r}")
    digest = hashlib.blake2b(f"{key}|{nominal!r}".encode(), digest_size=8).digest()
    # 53 bits: exactly representable, so the fraction is < 1 and the product stays < jitter.
    fraction = (int.from_bytes(digest, "big") >> 11) / float(1 << 53)
    return min(jitter * fraction, math.nextafter(jitter, 0.0))


# -- firing ---------------------------------------------------------------------------------------


def _first_fire(
    trigger: Cron | Every,
    nominals: Callable[[float], Iterator[float]],
    gap: float,
    after: float,
) -> float | None:
    """The smallest ``nominal + offset`` strictly after ``after`` within the bounds.

    ``nominals(x)`` yields the nominal times after ``x`` in order, at least ``gap`` apart.
    """
    after = _check_after(after)
    start, end, jitter = trigger.start, trigger.end, trigger.jitter
    # An offset is < jitter, so a nominal time at or before after - jitter cannot fire later.
    floor = math.nextafter(after - jitter, -math.inf) if jitter else after
    if start is not None and floor < start:
        floor = math.nextafter(start, -math.inf)  # so the first nominal is >= start
    best: float | None = None
    for nominal in nominals(floor):
        if (end is not None and nominal > end) or (best is not None and nominal >= best):
            break  # a fire is never before its nominal time
        fire = nominal + jitter_offset(trigger._key, nominal, jitter)
        if fire > after and (end is None or fire <= end) and (best is None or fire < best):
            best = fire
        if best is not None and best <= nominal + gap:
            break  # the next nominal time is already at or after the best fire
    return best


def _step_after(anchor: float, step: float, x: float) -> float:
    """The first ``anchor + k * step`` strictly after ``x``."""
    k = math.floor((x - anchor) / step) + 1
    # The division rounds; nudge k by one where it landed on the wrong side of x.
    while anchor + k * step <= x:
        k += 1
    while anchor + (k - 1) * step > x:
        k -= 1
    return anchor + k * step


def _check_after(after: float) -> float:
    """``after`` as a finite float; NaN would make every comparison false."""
    if isinstance(after, bool) or not isinstance(after, int | float) or not math.isfinite(after):
        raise ConfigurationError(f"after must be finite epoch seconds, got {after!r}")
    return float(after)


# -- wall clock and instants ----------------------------------------------------------------------


def _search_start(zone: ZoneInfo, instant: int) -> datetime:
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
    transition = _transition(zone, instant - repeated, instant)
    fold_end = datetime.fromtimestamp(transition, zone).replace(tzinfo=None, fold=0)
    # One second back, so croniter's "strictly after" includes the fold's end itself.
    return fold_end + timedelta(seconds=repeated) - _ONE_SECOND


def _resolve(zone: ZoneInfo, wall: datetime) -> tuple[float, datetime]:
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
    transition = float(_transition(zone, math.floor(before), math.ceil(instant)))
    return transition, datetime.fromtimestamp(transition, zone).replace(tzinfo=None)


def _transition(zone: ZoneInfo, low: int, high: int) -> int:
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


def _iso(instant: float, zone: ZoneInfo) -> str:
    """An instant as an ISO-8601 date-time in ``zone``, for people."""
    try:
        return datetime.fromtimestamp(instant, zone).isoformat()
    except (OverflowError, ValueError, OSError):
        return repr(instant)


# -- validation and normalisation -----------------------------------------------------------------


def _zone(name: object) -> ZoneInfo:
    """The zone named ``name``, refusing anything zoneinfo does not know."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"tz must be an IANA time zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from None


def _compile(expr: str) -> croniter[datetime]:
    """croniter's compiled form of ``expr``, or a ConfigurationError that says what is wrong."""
    count = len(expr.split())
    if count not in (5, 6) and not (count == 1 and expr.startswith("@")):
        raise ConfigurationError(
            f"invalid cron expression {expr!r}: {count} field(s); {_CRON_HINT}"
        )
    if any(_DRAWN_ITEM.fullmatch(item) for item in re.split(r"[\s,]+", expr)):
        # R draws its values at random in each process, so schedulers would disagree; H needs
        # a per-job seed that a trigger does not have.
        raise ConfigurationError(
            f"invalid cron expression {expr!r}: R (random) and H (hashed) values are not "
            "supported; write the values out"
        )
    hint = _CRON_HINTS.get(count, _CRON_HINT)
    try:
        compiled = croniter(expr, _REFERENCE, ret_type=datetime, second_at_beginning=count == 6)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(f"invalid cron expression {expr!r}: {exc}; {hint}") from exc
    try:
        copy.copy(compiled).get_next(datetime)
    except CroniterBadDateError:
        raise ConfigurationError(
            f"cron expression {expr!r} never fires (no such date, e.g. February 30)"
        ) from None
    return compiled


def _second_values(compiled: croniter[datetime]) -> tuple[int, ...]:
    """The seconds a 6-field expression matches, in order; none for 5 fields."""
    if len(compiled.expanded) != 6:
        return ()
    # croniter stores the seconds field last, even when it is written first.
    values = compiled.expanded[-1]
    return tuple(range(60)) if "*" in values else tuple(sorted(int(v) for v in values))


def _init_common(trigger: Cron | Every, owner: str) -> None:
    """Check the fields Cron and Every share, then derive the exclude dates and jitter key."""
    _init_bounds(trigger, owner)
    jitter = _number(f"{owner}.jitter", trigger.jitter)
    if jitter < 0:
        raise ConfigurationError(f"{owner}.jitter must be >= 0, got {trigger.jitter!r}")
    object.__setattr__(trigger, "jitter", jitter)
    if not isinstance(trigger.seed, str):
        raise ConfigurationError(f"{owner}.seed must be a string, got {trigger.seed!r}")
    values = _iterable(f"{owner}.exclude", trigger.exclude)
    dates = frozenset(_parse_date(f"{owner}.exclude", value) for value in values)
    object.__setattr__(trigger, "exclude", frozenset(d.isoformat() for d in dates))
    object.__setattr__(trigger, "_dates", dates)
    canonical = json.dumps(trigger.to_spec(), sort_keys=True, separators=(",", ":"))
    object.__setattr__(trigger, "_key", canonical)


def _init_bounds(trigger: Cron | Every | After, owner: str) -> None:
    """Normalise ``start`` and ``end`` and require ``start < end``."""
    start = _optional_time(f"{owner}.start", trigger.start)
    end = _optional_time(f"{owner}.end", trigger.end)
    if start is not None and end is not None and start >= end:
        raise ConfigurationError(
            f"{owner}.start ({_iso(start, _UTC)}) must be before end ({_iso(end, _UTC)})"
        )
    object.__setattr__(trigger, "start", start)
    object.__setattr__(trigger, "end", end)


def _common_spec(trigger: Cron | Every) -> dict[str, JSON]:
    """The bounds, jitter and exclude dates of a spec, each only when set."""
    spec = _bounds_spec(trigger)
    if trigger.jitter:
        spec["jitter"] = trigger.jitter
        if trigger.seed:
            spec["seed"] = trigger.seed
    if trigger.exclude:
        spec["exclude"] = sorted(trigger.exclude)
    return spec


def _bounds_spec(trigger: Cron | Every | After) -> dict[str, JSON]:
    """``start`` and ``end`` for a spec, each only when set."""
    bounds = {"start": trigger.start, "end": trigger.end}
    return {name: value for name, value in bounds.items() if value is not None}


def _common_text(trigger: Cron | Every, zone: ZoneInfo) -> str:
    """The bounds, jitter and exclude dates, as words."""
    text = _bounds_text(trigger, zone)
    if trigger.jitter:
        text += f", jitter {trigger.jitter:g}s"
    if trigger.exclude:
        text += f", except on {', '.join(sorted(trigger.exclude))}"
    return text


def _bounds_text(trigger: Cron | Every | After, zone: ZoneInfo) -> str:
    """The bounds as words."""
    text = ""
    if trigger.start is not None:
        text += f", from {_iso(trigger.start, zone)}"
    if trigger.end is not None:
        text += f", until {_iso(trigger.end, zone)}"
    return text


def _number(what: str, value: object) -> float:
    """``value`` as a finite float; bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _positive(what: str, value: object) -> float:
    """``value`` as a finite float > 0."""
    number = _number(what, value)
    if number <= 0:
        raise ConfigurationError(f"{what} must be > 0 seconds, got {value!r}")
    return number


def _optional_time(what: str, value: object) -> float | None:
    """Epoch seconds or None."""
    return None if value is None else _number(what, value)


def _iterable(what: str, value: object) -> Iterable[object]:
    """A collection of values; a lone string would be iterated letter by letter."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{what} must be a collection of dates, got {value!r}")
    return value


def _parse_date(what: str, value: object) -> date:
    """An ISO date string (``"2026-12-25"``) as a date."""
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise ConfigurationError(f"{what} holds {value!r}, which is not an ISO date like 2026-12-25")


def _iso_date(value: object) -> str:
    """A date or ISO date string given to make_trigger, as an ISO date string."""
    if isinstance(value, datetime):
        raise ConfigurationError(f"exclude= takes dates, not date-times: {value!r}")
    if isinstance(value, date):
        return value.isoformat()
    return _parse_date("exclude=", value).isoformat()


def _seconds(what: str, value: object) -> float:
    """A number of seconds or a timedelta, as a float > 0."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return _positive(f"{what}=", value)


def _instant(what: str, value: object, zone: ZoneInfo) -> float | None:
    """A datetime (naive ones in ``zone``) or epoch seconds, as epoch seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            return _resolve(zone, value)[0]
        return value.timestamp()
    if isinstance(value, date):
        raise ConfigurationError(f"{what}= takes a datetime, not a date: {value!r}")
    return _number(f"{what}=", value)


def _at_instant(value: object, zone: ZoneInfo) -> float:
    """``at=``: a datetime, epoch seconds or an ISO-8601 string, as epoch seconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigurationError(
                f"at= {value!r} is not an ISO-8601 date-time like 2026-05-01T12:00:00+02:00"
            ) from None
    instant = _instant("at", value, zone)
    assert instant is not None  # make_trigger only calls this with at= given
    return instant


def _refuse_options(kind: str, **given: bool) -> None:
    """Refuse options that mean nothing for ``kind``, naming them."""
    extra = [f"{name}=" for name, present in given.items() if present]
    if extra:
        raise ConfigurationError(f"{kind}= triggers take no {' or '.join(extra)}")
