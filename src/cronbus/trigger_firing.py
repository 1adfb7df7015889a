"""What Cron and Every share: jitter, bounds, exclude dates, and finding the first fire.

Pure helpers of :mod:`cronbus.triggers` (see its docstring for the jitter and bounds rules).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from . import trigger_values as values
from .errors import ConfigurationError
from .model import JSON
from .trigger_values import TIME_END, TIME_MIN, brief, check_after
from .wallclock import iso

if TYPE_CHECKING:
    from .triggers import After, Cron, Every

__all__ = [
    "LAST_FIRE",
    "bounds_spec",
    "bounds_text",
    "common_spec",
    "common_text",
    "first_fire",
    "init_bounds",
    "init_common",
    "jitter_offset",
    "step_after",
]

LAST_FIRE = math.nextafter(TIME_END, TIME_MIN)
"""The last instant a trigger may fire at: just before year 10000."""
_UTC = ZoneInfo("UTC")


def jitter_offset(key: str, nominal: float, jitter: float) -> float:
    """A deterministic offset in ``[0, jitter)`` for the fire of ``key`` at ``nominal``.

    A hash (blake2b) of the key and of ``repr(nominal)``, so every process, on any machine,
    computes the same offset, and triggers with different keys spread differently.
    """
    if jitter == 0.0:
        return 0.0
    if not 0.0 < jitter < math.inf:
        raise ConfigurationError(f"jitter must be a finite number >= 0, got {brief(jitter)}")
    digest = hashlib.blake2b(f"{key}|{nominal!r}".encode(), digest_size=8).digest()
    # 53 bits: exactly representable, so the fraction is < 1 and the product stays < jitter.
    fraction = (int.from_bytes(digest, "big") >> 11) / float(1 << 53)
    return min(jitter * fraction, math.nextafter(jitter, 0.0))


def first_fire(
    trigger: Cron | Every,
    nominals: Callable[[float], Iterator[float]],
    gap: float,
    after: float,
) -> float | None:
    """The smallest ``nominal + offset`` strictly after ``after`` within the bounds.

    ``nominals(x)`` yields the nominal times after ``x`` in order, at least ``gap`` apart.
    """
    after = check_after(after)
    jitter = trigger.jitter
    start = TIME_MIN if trigger.start is None else trigger.start
    end = LAST_FIRE if trigger.end is None else trigger.end
    # An offset is < jitter, so a nominal time at or before after - jitter cannot fire later.
    floor = math.nextafter(after - jitter, -math.inf) if jitter else after
    if floor < start:
        floor = math.nextafter(start, -math.inf)  # so the first nominal is >= start
    best: float | None = None
    for nominal in nominals(floor):
        if nominal > end or (best is not None and nominal >= best):
            break  # a fire is never before its nominal time
        fire = nominal + jitter_offset(trigger._key, nominal, jitter)
        if fire > after and fire <= end and (best is None or fire < best):
            best = fire
        if best is not None and best <= nominal + gap:
            break  # the next nominal time is already at or after the best fire
    return best


def step_after(anchor: float, step: float, x: float) -> float:
    """The first ``anchor + k * step`` strictly after ``x``."""
    k = math.floor((x - anchor) / step) + 1
    # The division rounds; nudge k by one where it landed on the wrong side of x.
    while anchor + k * step <= x:
        k += 1
    while anchor + (k - 1) * step > x:
        k -= 1
    return anchor + k * step


def init_common(trigger: Cron | Every, owner: str) -> None:
    """Check the fields Cron and Every share, then derive the exclude dates and jitter key."""
    init_bounds(trigger, owner)
    jitter = values.number(f"{owner}.jitter", trigger.jitter)
    if jitter < 0:
        raise ConfigurationError(f"{owner}.jitter must be >= 0, got {brief(trigger.jitter)}")
    object.__setattr__(trigger, "jitter", jitter)
    if not isinstance(trigger.seed, str):
        raise ConfigurationError(f"{owner}.seed must be a string, got {brief(trigger.seed)}")
    given = values.iterable(f"{owner}.exclude", trigger.exclude)
    dates = frozenset(values.parse_date(f"{owner}.exclude", value) for value in given)
    object.__setattr__(trigger, "exclude", frozenset(d.isoformat() for d in dates))
    object.__setattr__(trigger, "_dates", dates)
    canonical = json.dumps(trigger.to_spec(), sort_keys=True, separators=(",", ":"))
    object.__setattr__(trigger, "_key", canonical)


def init_bounds(trigger: Cron | Every | After, owner: str) -> None:
    """Normalise ``start`` and ``end`` and require ``start < end``."""
    start = values.optional_time(f"{owner}.start", trigger.start)
    end = values.optional_time(f"{owner}.end", trigger.end)
    if start is not None and end is not None and start >= end:
        raise ConfigurationError(
            f"{owner}.start ({iso(start, _UTC)}) must be before end ({iso(end, _UTC)})"
        )
    object.__setattr__(trigger, "start", start)
    object.__setattr__(trigger, "end", end)


def common_spec(trigger: Cron | Every) -> dict[str, JSON]:
    """The bounds, jitter and exclude dates of a spec, each only when set."""
    spec = bounds_spec(trigger)
    if trigger.jitter:
        spec["jitter"] = trigger.jitter
        if trigger.seed:
            spec["seed"] = trigger.seed
    if trigger.exclude:
        spec["exclude"] = sorted(trigger.exclude)
    return spec


def bounds_spec(trigger: Cron | Every | After) -> dict[str, JSON]:
    """``start`` and ``end`` for a spec, each only when set."""
    bounds = {"start": trigger.start, "end": trigger.end}
    return {name: value for name, value in bounds.items() if value is not None}


def common_text(trigger: Cron | Every, zone: ZoneInfo) -> str:
    """The bounds, jitter and exclude dates, as words."""
    text = bounds_text(trigger, zone)
    if trigger.jitter:
        text += f", jitter {trigger.jitter:g}s"
    if trigger.exclude:
        text += f", except on {', '.join(sorted(trigger.exclude))}"
    return text


def bounds_text(trigger: Cron | Every | After, zone: ZoneInfo) -> str:
    """The bounds as words."""
    text = ""
    if trigger.start is not None:
        text += f", from {iso(trigger.start, zone)}"
    if trigger.end is not None:
        text += f", until {iso(trigger.end, zone)}"
    return text
