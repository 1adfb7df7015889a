"""A job seen by a person: its one-word state, its next planned fire, its trigger in words and
its time zone. The CLI and the console both show jobs this way.

A job's state is one word: ``active`` (it will fire), ``paused``, ``disabled`` (gone from the
app's code: kept, never fired, until removed), ``waiting`` (an ``after`` job whose run has not
ended yet, so its next fire is not planned) or ``finished`` (no fire left).
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import CronbusError
from .model import Job
from .triggers import trigger_from_spec


def job_state(job: Job) -> str:
    """One word for where a job stands (see the module docstring)."""
    if not job.enabled:
        return "disabled"
    if job.spec.paused:
        return "paused"
    if job.next_fire_at is not None:
        return "active"
    spec = job.spec
    if spec.after_seconds is not None and (spec.max_fires is None or job.fires < spec.max_fires):
        return "waiting"
    return "finished"


def planned_fire(job: Job) -> float | None:
    """The job's next fire, or None when it will not fire (paused or disabled included)."""
    return job.next_fire_at if job_state(job) == "active" else None


def describe(job: Job) -> str:
    """The trigger in words, e.g. ``cron '0 9 * * *' in Europe/Paris`` or ``every 60s``."""
    try:
        return trigger_from_spec(job.spec.trigger).describe()
    except (CronbusError, ArithmeticError, ValueError) as exc:
        # A stored trigger this version refuses (stored by an older one, or by hand) must not
        # hide every other job; the scheduler pauses such a job.
        return f"invalid trigger: {exc}"


def zone_of(job: Job) -> ZoneInfo:
    """The job's time zone: its trigger's (cron, every), else UTC."""
    name = job.spec.trigger.get("tz")
    try:
        return ZoneInfo(name) if isinstance(name, str) else ZoneInfo("UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")  # shown as UTC; `jobs show` says the trigger is invalid


def local_iso(timestamp: float | None, zone: ZoneInfo) -> str | None:
    """Epoch seconds as an ISO-8601 time in ``zone`` (None stays None)."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, zone).isoformat(timespec="milliseconds")
