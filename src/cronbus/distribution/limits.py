"""Limits a claim honours across every worker: concurrency per key and start rate per key.

A run may carry ``limit_key``/``limit_max`` (at most ``limit_max`` runs with the key in ACTIVE
states at once) and ``rate_key``/``rate_max``/``rate_period`` (at most ``rate_max`` claims per
fixed window ``[floor(now / period) * period, + period)``). The store's pick query already
leaves out runs whose key is saturated; :func:`admit` then decides, in pick order, which of the
picked runs fit together (several may share a key), from the counts read in the same
transaction. A run over a limit stays queued: it never fails for it and holds no slot.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

from ..errors import InvalidArgumentError
from ..validation import shorten

MAX_STARTS = 1_000_000
"""The most starts a rate may allow per period."""
MIN_PERIOD = 1.0
"""The shortest rate period, in seconds: windows are counted in the store, per claim, so a
sub-second window would mostly measure claim timing."""
MAX_PERIOD = 7 * 86_400.0
"""The longest rate period (a week): a longer window is a schedule, better written as a job."""
MAX_PER_SECOND = 10_000.0
"""The fastest rate: above 10,000 starts a second, no worker pool is held back by it, so such a
"limit" is more likely a typo than a wish."""

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3_600.0,
    "hour": 3_600.0,
    "hours": 3_600.0,
    "d": 86_400.0,
    "day": 86_400.0,
    "days": 86_400.0,
}
_RATE = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]*)\s*([A-Za-z]+)\s*", re.ASCII)


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """At most ``max`` starts per ``period`` seconds."""

    max: int
    period: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limited:
    """The limit fields of one picked run (None: that limit does not apply)."""

    limit_key: str | None = None
    limit_max: int | None = None
    rate_key: str | None = None
    rate_max: int | None = None
    rate_period: float | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A rate window as ``rate_windows`` stores it: ``used`` starts since ``window_start``."""

    window_start: float
    used: int
    max_starts: int
    period: float

    def covers(self, now: float) -> bool:
        """Whether the window is still the current one at ``now``."""
        return self.window_start <= now < self.window_start + self.period

    @property
    def full(self) -> bool:
        """Whether no start is left in it."""
        return self.used >= self.max_starts


def parse_rate(text: object, field: str = "rate") -> Rate:
    """Parse ``"100/m"``, ``"5/s"``, ``"1000/h"``, ``"10/d"`` or ``"3/10s"`` (N per M units).

    Units: s, sec, second(s); m, min, minute(s); h, hour(s); d, day(s), any case. Bounds: 1 to
    1,000,000 starts, a period of 1 second to 7 days, and at most 10,000 starts a second.
    Raises :class:`~cronbus.errors.InvalidArgumentError` naming ``field``.
    """
    found = _RATE.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise _bad(field, "must read like '100/m', '5/s', '1000/h', '10/d' or '3/10s'", text)
    count, every, unit = found.groups()
    seconds = _UNITS.get(unit.lower())
    if seconds is None:
        raise _bad(field, "has an unknown unit; use s, m, h or d", text)
    starts, times = int(count), int(every or 1)
    if not 1 <= starts <= MAX_STARTS:
        raise _bad(field, f"must allow 1 to {MAX_STARTS:,} starts per period", text)
    period = times * seconds
    if not MIN_PERIOD <= period <= MAX_PERIOD:
        raise _bad(field, "must have a period of 1 second to 7 days", text)
    if starts / period > MAX_PER_SECOND:
        raise _bad(field, f"must allow at most {MAX_PER_SECOND:,.0f} starts a second", text)
    return Rate(starts, period)


def window_start(now: float, period: float) -> float:
    """The start of the fixed window of ``period`` seconds that holds ``now``."""
    return math.floor(now / period) * period


def admit(
    picked: Sequence[Limited],
    running: Mapping[str, int],
    windows: Mapping[str, Window],
    now: float,
) -> tuple[list[int], dict[str, Window]]:
    """Which picked runs fit their limits, in pick order, and the rate windows to write back.

    ``running`` counts the ACTIVE runs per ``limit_key``; ``windows`` are the stored windows per
    ``rate_key`` (a window that no longer covers ``now`` counts as a fresh one). Each admitted
    run counts towards the runs after it. Returns the indexes of the admitted runs and, for
    every rate key an admitted run used, its window after the claim.
    """
    active = dict(running)
    used: dict[str, Window] = {}
    kept: list[int] = []
    for index, run in enumerate(picked):
        if _late(run, windows, now):
            continue
        window = _window(run, used, windows, now)
        if _saturated(run, active) or (window is not None and window.full):
            continue
        kept.append(index)
        if run.limit_key is not None and run.limit_max is not None:
            active[run.limit_key] = active.get(run.limit_key, 0) + 1
        if window is not None and run.rate_key is not None:
            used[run.rate_key] = dataclasses.replace(window, used=window.used + 1)
    return kept, used


def _late(run: Limited, stored: Mapping[str, Window], now: float) -> bool:
    """Whether a claim's time is behind the run's stored rate window: a claim with a later time
    counted starts in a newer window already, so this one belongs to neither, and writing its
    older window back would reset the newer one's count. Its runs wait for the next claim."""
    if run.rate_key is None:
        return False
    window = stored.get(run.rate_key)
    return window is not None and window.window_start > now


def _saturated(run: Limited, active: Mapping[str, int]) -> bool:
    """Whether the run's concurrency key already has ``limit_max`` active runs."""
    if run.limit_key is None or run.limit_max is None:
        return False
    return active.get(run.limit_key, 0) >= run.limit_max


def _window(
    run: Limited, used: Mapping[str, Window], stored: Mapping[str, Window], now: float
) -> Window | None:
    """The run's current rate window (this claim's own count first), or None without a rate.

    The run's own ``rate_max`` is the bound, so a changed rate applies from the next claim.
    """
    if run.rate_key is None or run.rate_max is None or run.rate_period is None:
        return None
    window = used.get(run.rate_key) or stored.get(run.rate_key)
    if window is None or not window.covers(now):
        start = window_start(now, run.rate_period)
        return Window(window_start=start, used=0, max_starts=run.rate_max, period=run.rate_period)
    return dataclasses.replace(window, max_starts=run.rate_max)


def _bad(field: str, rule: str, value: object) -> InvalidArgumentError:
    """The error for a bad rate, naming the field."""
    return InvalidArgumentError(f"{field} {rule}, got {shorten(value)}", field=field)
