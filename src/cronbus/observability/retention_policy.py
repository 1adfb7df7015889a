"""Retention rules, pure: how long each finished run, delivery and event is kept.

Rules resolve task → store default for runs, and subscription → store default for deliveries
(the subscription's ``keep_acked`` / ``keep_dead`` delivery policy), the same chain as every
other policy. Ages are seconds; the edges also take ``"90"``, ``"30m"``, ``"12h"``, ``"1d"``,
``"2w"`` (and sums like ``"1d12h"``) or a :class:`~datetime.timedelta` (:func:`parse_age`).

Defaults (:class:`~cronbus.config.Settings`): succeeded and cancelled runs 7 days, dead runs
30 days, skipped runs 1 day; acked deliveries 7 days, dead ones 30 days; events of a topic
without a retention of its own 7 days. Cancelled runs are kept like succeeded ones (an operator
asked for them to end: nothing went wrong that needs looking into), skipped ones shortest (a
fire skipped by policy carried no work and can come once per fire).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..states import TERMINAL, RunState
from ..validation import shorten

if TYPE_CHECKING:
    from ..config import Settings

__all__ = [
    "DAY",
    "MAX_AGE",
    "Keep",
    "KeepSpec",
    "RetentionRules",
    "check_purge_states",
    "parse_age",
    "rules_for",
]

DAY = 86_400.0
MAX_AGE = 100 * 365 * DAY
"""The longest age accepted (a typo's extra zeros must not overflow a timestamp)."""
_UNITS = {"s": 1.0, "m": 60.0, "h": 3_600.0, "d": DAY, "w": 7 * DAY}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_AGE_HINT = "seconds, or like 30m, 12h, 1d, 2w"


Age = float | int | str | timedelta
"""An age as the edges take it: seconds, a text like ``"1d"``, or a timedelta."""


def parse_age(value: object, field: str = "age") -> float:
    """An age in seconds from a number, a :class:`timedelta` or a text like ``"1d12h"``.

    Negative, infinite and unknown spellings are refused with an
    :class:`~cronbus.errors.InvalidArgumentError` naming ``field``.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise _bad_age(field, value)
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value, field)
    else:
        raise _bad_age(field, value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(
            f"{field} must be zero or more ({_AGE_HINT}), got {shorten(value)}", field=field
        )
    if seconds > MAX_AGE:
        raise InvalidArgumentError(
            f"{field} must be at most 100 years, got {shorten(value)}", field=field
        )
    return seconds


def _parse_text(text: str, field: str) -> float:
    spelled = text.strip().lower()
    try:
        return float(spelled)
    except ValueError:
        pass
    if not spelled or _PART.sub("", spelled) != "":
        raise _bad_age(field, text)
    return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(spelled))


def _bad_age(field: str, value: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{field} must be an age ({_AGE_HINT}), got {shorten(value)}", field=field
    )


def check_purge_states(
    states: Iterable[RunState | str] | None, field: str = "states"
) -> tuple[RunState, ...]:
    """Run states a purge may remove: terminal ones only (all of them when none are given)."""
    if states is None:
        return tuple(sorted(TERMINAL))
    if isinstance(states, str):
        states = [states]
    chosen: list[RunState] = []
    allowed = ", ".join(sorted(s.value for s in TERMINAL))
    for state in states:
        try:
            run_state = RunState(state)
        except ValueError:
            raise InvalidArgumentError(
                f"{field}: {shorten(state)} is not a run state; a purge takes finished states "
                f"({allowed})",
                field=field,
            ) from None
        if run_state not in TERMINAL:
            raise InvalidArgumentError(
                f"{field}: {run_state.value} runs are not finished and are never purged; a purge "
                f"takes finished states ({allowed})",
                field=field,
            )
        chosen.append(run_state)
    if not chosen:
        return tuple(sorted(TERMINAL))
    return tuple(sorted(dict.fromkeys(chosen)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Keep:
    """How long finished runs are kept after they end, per final state, in seconds (None: the
    next rule's; see the module's docstring)."""

    succeeded: float | None = None
    dead: float | None = None
    cancelled: float | None = None
    skipped: float | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None:
                object.__setattr__(self, item.name, parse_age(value, f"keep.{item.name}"))

    @classmethod
    def coerce(cls, value: object, field: str = "keep") -> Keep:
        """A :class:`Keep` from one age for every state (``"30d"``, seconds, a timedelta), a
        mapping of state → age, a :class:`Keep`, or None (nothing of its own)."""
        if value is None:
            return cls()
        if isinstance(value, Keep):
            return value
        if isinstance(value, Mapping):
            names = {item.name for item in fields(cls)}
            unknown = sorted(str(k) for k in value if k not in names)
            if unknown:
                raise InvalidArgumentError(
                    f"{field}: {', '.join(unknown)} is not a finished run state "
                    f"({', '.join(sorted(names))})",
                    field=field,
                )
            return cls(**{k: parse_age(v, f"{field}.{k}") for k, v in value.items()})
        age = parse_age(value, field)
        return cls(succeeded=age, dead=age, cancelled=age, skipped=age)

    def seconds(self, state: RunState) -> float | None:
        """The age kept for runs that ended in ``state`` (None: not said here)."""
        value: float | None = getattr(self, state.value, None)
        return value

    def over(self, base: Keep) -> Keep:
        """This keep, with what it does not say taken from ``base``."""
        chosen: dict[str, Any] = {}
        for item in fields(self):
            own = getattr(self, item.name)
            chosen[item.name] = own if own is not None else getattr(base, item.name)
        return Keep(**chosen)


KeepSpec = Keep | Mapping[str, Age] | Age | None
"""What ``@app.task(keep=...)`` takes (see :meth:`Keep.coerce`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRules:
    """Every retention rule of a store, resolved: store defaults and per-task overrides."""

    runs: Keep = field(
        default_factory=lambda: Keep(
            succeeded=7 * DAY, dead=30 * DAY, cancelled=7 * DAY, skipped=DAY
        )
    )
    """The store's default per final state (every state set)."""
    tasks: Mapping[str, Keep] = field(default_factory=dict)
    """Overrides by task name."""
    acked: float = 7 * DAY
    """Acknowledged deliveries (a subscription's ``keep_acked`` overrides it)."""
    dead_deliveries: float = 30 * DAY
    """Dead deliveries (a subscription's ``keep_dead`` overrides it)."""
    events: float = 7 * DAY
    """Events of topics that set no retention of their own (``max_age`` or ``max_events``)."""

    def run_keep(self, state: RunState, task: str) -> float:
        """How long a run of ``task`` that ended in ``state`` is kept."""
        own = self.tasks.get(task)
        if own is not None:
            found = own.seconds(state)
            if found is not None:
                return found
        default = self.runs.seconds(state)
        return DAY * 36_500 if default is None else default

    def shortest_run_keep(self) -> float:
        """The shortest keep of any rule: runs that ended before ``now`` minus it are the
        only candidates of a pass."""
        ages = [self.runs.seconds(s) for s in TERMINAL]
        ages += [keep.seconds(s) for keep in self.tasks.values() for s in TERMINAL]
        return min(age for age in ages if age is not None)

    def purges(self, state: RunState, task: str, finished_at: float, now: float) -> bool:
        """Whether a run of ``task`` that ended in ``state`` at ``finished_at`` is due to go."""
        return state in TERMINAL and finished_at <= now - self.run_keep(state, task)


def rules_for(settings: Settings, tasks: Iterable[object] = ()) -> RetentionRules:
    """The rules of a process: its settings' defaults, and the ``keep`` of each task that
    says one (tasks are :class:`~cronbus.task.Task`; others are skipped)."""
    overrides: dict[str, Keep] = {}
    for task in tasks:
        keep = getattr(task, "keep", None)
        name = getattr(task, "name", None)
        if isinstance(keep, Keep) and isinstance(name, str) and keep != Keep():
            overrides[name] = keep
    return RetentionRules(
        runs=Keep(
            succeeded=settings.keep_succeeded_seconds,
            dead=settings.keep_dead_seconds,
            cancelled=settings.keep_cancelled_seconds,
            skipped=settings.keep_skipped_seconds,
        ),
        tasks=overrides,
        acked=settings.keep_acked_seconds,
        dead_deliveries=settings.keep_dead_deliveries_seconds,
        events=settings.keep_events_seconds,
    )
