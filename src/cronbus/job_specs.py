"""Job definitions: the options a user gives, validated once into a :class:`~cronbus.model.JobSpec`.

``@app.job``, ``app.jobs.add``/``update`` and ``cronbus jobs add``/``update`` all come here, so a
definition is accepted or refused the same way whatever the door (the rules of
:mod:`cronbus.validation`: names, durations, counts, arguments).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, InvalidArgumentError
from .model import JobSpec, Misfire, Overlap
from .task import check_priority, check_queue, configuring
from .task_policy import SHARDS_LIMIT
from .triggers import make_trigger
from .validation import check_int, check_label, check_seconds, shorten

if TYPE_CHECKING:
    from .task import Task

_COUNT_LIMIT = 10_000
"""The most missed fires one misfire may catch up."""
_FIRES_LIMIT = 1_000_000_000
"""The largest max_fires (stored in a 32-bit column on PostgreSQL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Everything a job definition may say besides its task, as given by a user."""

    cron: str | None = None
    every: float | timedelta | None = None
    after: float | timedelta | None = None
    at: datetime | float | str | None = None
    tz: str | None = None
    start: datetime | float | None = None
    end: datetime | float | None = None
    jitter: float = 0.0
    calendars: Sequence[str] = ()
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] | None = None
    misfire: Misfire | str = Misfire.ONCE
    misfire_grace: float = 1.0
    misfire_max: int = 100
    overlap: Overlap | str = Overlap.ALLOW
    children: Sequence[str] = ()
    max_fires: int | None = None
    queue: str | None = None
    priority: int | None = None
    paused: bool = False
    broadcast: bool = False
    """Each fire is a parent run with one child per live worker that knows the task."""
    shards: int | None = None
    """Each fire is a parent run with this many children (1 to 10,000), each told its index."""


def build_spec(name: str, task: Task[Any, Any], options: JobOptions, source: str) -> JobSpec:
    """Validate a job definition into a spec, or raise saying what is wrong."""
    name = check_job_name(name)
    with configuring():
        jitter = check_seconds(options.jitter, "jitter")
        grace = check_seconds(options.misfire_grace, "misfire_grace")
        misfire_max = check_int(options.misfire_max, "misfire_max", 1, _COUNT_LIMIT)
        max_fires = (
            None
            if options.max_fires is None
            else check_int(options.max_fires, "max_fires", 1, _FIRES_LIMIT)
        )
        queue = task.queue if options.queue is None else check_queue(options.queue)
        priority = task.priority if options.priority is None else check_priority(options.priority)
        children = tuple(check_job_name(c) for c in _names(options.children, "children"))
        calendars = tuple(_calendar_name(c) for c in _names(options.calendars, "calendars"))
        broadcast, shards = _fanout(options.broadcast, options.shards)
    trigger = make_trigger(
        cron=options.cron,
        every=options.every,
        after=options.after,
        at=options.at,
        tz=options.tz,
        start=options.start,
        end=options.end,
        jitter=jitter,
        seed=name,
    )
    call = task.prepare(options.args, options.kwargs or {}, now=0.0)
    return JobSpec(
        name=name,
        task=task.name,
        trigger=trigger.to_spec(),
        args_json=call.args_json,
        kwargs_json=call.kwargs_json,
        queue=queue,
        priority=priority,
        max_attempts=task.retry.max_attempts,
        timeout=task.timeout,
        misfire=_enum(Misfire, options.misfire, "misfire"),
        misfire_grace=grace,
        misfire_max=misfire_max,
        overlap=_enum(Overlap, options.overlap, "overlap"),
        children=children,
        calendars=calendars,
        max_fires=max_fires,
        source=source,
        paused=bool(options.paused),
        broadcast=broadcast,
        shards=shards,
    )


def check_job_name(name: str) -> str:
    """A job name: 1-200 printable characters without whitespace (as task names)."""
    with configuring():
        return check_label(name, "job name")


def _fanout(broadcast: object, shards: object) -> tuple[bool, int | None]:
    """A job's fan-out: broadcast (a bool), or a number of shards, not both."""
    if not isinstance(broadcast, bool):
        raise InvalidArgumentError(
            f"broadcast must be true or false, got {shorten(broadcast)}", field="broadcast"
        )
    if shards is None:
        return broadcast, None
    count = check_int(shards, "shards", 1, SHARDS_LIMIT)
    if broadcast:
        raise InvalidArgumentError(
            "give broadcast or shards, not both: a fire is one or the other", field="shards"
        )
    return False, count


def _names(values: Sequence[str], what: str) -> Sequence[str]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidArgumentError(f"{what} must be a list of names, got {shorten(values)}")
    return values


def _calendar_name(name: str) -> str:
    return check_label(name, "calendar name")


def _enum(kind: type[Misfire] | type[Overlap], value: Any, what: str) -> Any:
    try:
        return kind(value)
    except (ValueError, TypeError):
        allowed = ", ".join(m.value for m in kind)
        raise ConfigurationError(f"{what} must be one of {allowed}, got {shorten(value)}") from None
