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

Cron expressions are read by :mod:`cronbus.cron`: 5 fields (Vixie cron), 6 with the seconds
first, and Quartz's 6 or 7 fields with ``?`` (weekdays 1-7 = SUN-SAT, a year field); see
``docs/cron.md``. Matching wall-clock times become instants by the daylight saving time rule of
:mod:`cronbus.wallclock`: a time in a spring-forward gap fires once, at the transition that ends
the gap; a time in a fall-back fold fires once, at its first occurrence. Successive
``next_fire`` calls return strictly increasing instants. ``exclude`` dates are read in the
trigger's zone.

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
scan every nominal time in the jitter window (so a cron's jitter is at most one day).

Bounds
------
``start`` and ``end`` bound the fires: a nominal time before ``start`` is skipped, and no fire
(jitter included) is returned after ``end``: ``start <= fire <= end``. Every time a trigger
holds and every fire it returns lies from 1970-01-01 to 9999-12-31 UTC; intervals are 1 ms to
100 years (:mod:`cronbus.trigger_values`). Skipping ``exclude`` dates gives up after about five
years of excluded fires and returns ``None`` rather than loop.

Cost
----
``next_fire`` parses nothing: the expression is compiled once (and cached by its text), the
zone is cached. See ``bench/cron.py`` for next fires per second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timedelta
from typing import ClassVar, Protocol
from zoneinfo import ZoneInfo

from . import trigger_values as values
from .cron import CronSchedule, compile_cron
from .errors import ConfigurationError
from .model import JSON
from .trigger_firing import (
    LAST_FIRE,
    bounds_spec,
    bounds_text,
    common_spec,
    common_text,
    first_fire,
    init_bounds,
    init_common,
    jitter_offset,
    step_after,
)
from .trigger_values import TIME_END, TIME_MIN, brief, check_after
from .wallclock import iso, resolve, search_start

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
    _schedule: CronSchedule = field(init=False, repr=False, compare=False)
    _dates: frozenset[date] = field(init=False, repr=False, compare=False)
    _key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate and normalise every field, compile the expression once."""
        if not isinstance(self.expr, str):
            raise ConfigurationError(f"Cron.expr must be a string, got {brief(self.expr)}")
        # One spelling per expression, so equal triggers share one spec and one jitter key.
        object.__setattr__(self, "expr", " ".join(self.expr.split()))
        object.__setattr__(self, "_zone", values.zone(self.tz))
        object.__setattr__(self, "_schedule", compile_cron(self.expr))
        init_common(self, "Cron")
        if self.jitter > values.CRON_JITTER_MAX:
            raise ConfigurationError(
                f"Cron.jitter must be at most 86400 s (one day), got {brief(self.jitter)}"
            )

    def next_fire(self, after: float) -> float | None:
        """The first fire strictly after ``after``, or None when none is left."""
        # Cron instants are whole seconds (zone offsets are), so they are >= 1 s apart.
        return first_fire(self, self._nominals, 1.0, after)

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "cron", "expr": ..., "tz": ...}`` plus the bounds, jitter and exclude set."""
        return {"kind": "cron", "expr": self.expr, "tz": self.tz, **common_spec(self)}

    def describe(self) -> str:
        """E.g. ``cron '0 */5 * * * *' in Europe/Paris``."""
        return f"cron {self.expr!r} in {self.tz}" + common_text(self, self._zone)

    def _nominals(self, x: float) -> Iterator[float]:
        """The matching instants strictly after ``x``, in order, exclude dates skipped."""
        try:
            # From 1969-12-31T23:59:59Z at the earliest, so no fire is before 1970.
            cursor = search_start(self._zone, math.floor(max(x, TIME_MIN - 1.0)))
        except (OverflowError, ValueError, OSError):
            return  # outside what datetime can represent
        last, limit = x, None
        while True:
            wall = self._schedule.next_after(cursor)
            if wall is None:
                return  # past year 9999
            try:
                instant, local = resolve(self._zone, wall)
            except (OverflowError, ValueError, OSError):
                return  # the zone's offset takes it past what datetime can represent
            if instant >= TIME_END:
                return
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
        object.__setattr__(self, "seconds", values.interval("Every.seconds", self.seconds))
        object.__setattr__(self, "anchor", values.optional_time("Every.anchor", self.anchor))
        object.__setattr__(self, "_zone", values.zone(self.tz))
        init_common(self, "Every")
        if self.jitter >= self.seconds:
            raise ConfigurationError(
                f"Every.jitter ({self.jitter:g}) must be smaller than seconds "
                f"({self.seconds:g}), or fires could overtake each other"
            )

    def next_fire(self, after: float) -> float | None:
        """The first fire strictly after ``after``, or None when none is left."""
        return first_fire(self, self._nominals, self.seconds, after)

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "every", "seconds": ...}`` plus whatever differs from the defaults."""
        spec: dict[str, JSON] = {"kind": "every", "seconds": self.seconds}
        if self.anchor is not None:
            spec["anchor"] = self.anchor
        if self.tz != "UTC":
            spec["tz"] = self.tz
        return spec | common_spec(self)

    def describe(self) -> str:
        """E.g. ``every 300s`` or ``every 60s anchored at 1970-01-01T00:00:30+00:00``."""
        text = f"every {self.seconds:g}s"
        if self.anchor is not None:
            text += f" anchored at {iso(self.anchor, self._zone)}"
        return text + common_text(self, self._zone)

    def _nominals(self, x: float) -> Iterator[float]:
        """The instants ``anchor + k * seconds`` strictly after ``x``, exclude dates skipped."""
        anchor = self.anchor if self.anchor is not None else (self.start or 0.0)
        limit: float | None = None
        while True:
            x = nominal = step_after(anchor, self.seconds, x)
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
                    x = math.nextafter(resolve(self._zone, midnight)[0], -math.inf)
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
        object.__setattr__(self, "seconds", values.interval("After.seconds", self.seconds))
        init_bounds(self, "After")

    def next_fire(self, after: float) -> float | None:
        """``after + seconds``, where ``after`` is the end of the previous run."""
        start = TIME_MIN if self.start is None else self.start
        fire = max(check_after(after) + self.seconds, start)
        return None if fire > (LAST_FIRE if self.end is None else self.end) else fire

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "after", "seconds": ...}`` plus the bounds when set."""
        return {"kind": "after", "seconds": self.seconds, **bounds_spec(self)}

    def describe(self) -> str:
        """E.g. ``300s after the previous run ends``."""
        return f"{self.seconds:g}s after the previous run ends" + bounds_text(self, _UTC)


@dataclass(frozen=True, kw_only=True, slots=True)
class At:
    """Fires once, at ``when``."""

    kind: ClassVar[str] = "at"
    when: float

    def __post_init__(self) -> None:
        """Validate and normalise ``when``."""
        object.__setattr__(self, "when", values.check_time("At.when", self.when))

    def next_fire(self, after: float) -> float | None:
        """``when`` if it is strictly after ``after``, else None: it is in the past."""
        return self.when if self.when > check_after(after) else None

    def to_spec(self) -> dict[str, JSON]:
        """``{"kind": "at", "when": ...}``."""
        return {"kind": "at", "when": self.when}

    def describe(self) -> str:
        """E.g. ``at 2026-05-01T12:00:00+00:00``."""
        return f"at {iso(self.when, _UTC)}"


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
    zone = values.zone(zone_name)
    bounds = {
        "start": values.instant("start", start, zone),
        "end": values.instant("end", end, zone),
    }
    dates = frozenset(values.iso_date(d) for d in values.iterable("exclude", exclude))
    if cron is not None:
        return Cron(expr=cron, tz=zone_name, jitter=jitter, exclude=dates, seed=seed, **bounds)
    if every is not None:
        seconds = values.interval("every=", every)
        return Every(
            seconds=seconds, tz=zone_name, jitter=jitter, exclude=dates, seed=seed, **bounds
        )
    values.refuse_options(kinds[0], jitter=jitter != 0.0, exclude=bool(dates))
    if after is not None:
        return After(seconds=values.interval("after=", after), **bounds)
    values.refuse_options("at", start=start is not None, end=end is not None)
    return At(when=values.at_instant(at, zone))


def trigger_from_spec(spec: Mapping[str, JSON]) -> Trigger:
    """Rebuild the trigger that :meth:`Trigger.to_spec` described."""
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"a trigger spec must be a mapping, got {brief(spec)}")
    kind = spec.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ConfigurationError(
            f"unknown trigger kind {brief(kind)} in {brief(dict(spec))}; "
            f"use one of {', '.join(_KINDS)}"
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
        raise ConfigurationError(
            f"incomplete {kind} trigger spec {brief(dict(spec))}: {exc}"
        ) from exc


def next_fires(trigger: Trigger, after: float, count: int) -> list[float]:
    """The next ``count`` fires after ``after`` (fewer when the trigger runs out)."""
    if not isinstance(count, int) or count < 0:
        raise ConfigurationError(f"count must be an int >= 0, got {brief(count)}")
    fires: list[float] = []
    while len(fires) < count:
        fire = trigger.next_fire(after)
        if fire is None:
            break
        fires.append(fire)
        after = fire
    return fires
