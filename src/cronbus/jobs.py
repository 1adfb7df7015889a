"""Jobs: a task plus a trigger and its policies, defined in code or through the API.

Definitions are validated once, in :mod:`cronbus.job_specs`, into a
:class:`~cronbus.model.JobSpec`; planning a fire
(:func:`plan`) is pure, so misfire and overlap rules are tested with a fake clock; the
:class:`Jobs` API reads and changes the jobs in the store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from .errors import CodeJobError, ConfigurationError
from .handle import RunHandle
from .job_specs import JobOptions, build_spec, check_job_name
from .model import Fire, Job, JobSpec, Misfire
from .store.logic import job_run
from .task import Task
from .triggers import Trigger, trigger_from_spec
from .validation import check_int, check_label

if TYPE_CHECKING:
    from .app import App
    from .services.jobs import JobsService

__all__ = [
    "JobOptions",
    "Jobs",
    "SyncReport",
    "build_spec",
    "check_job_name",
    "code_job_guard",
    "first_fire",
    "is_code_job",
    "plan",
    "trigger_of",
]
log = logging.getLogger("cronbus.jobs")
NEXT_LIMIT = 10_000
"""The most fire times ``Jobs.next`` computes at once."""
_SYNC_BATCH = 1000
"""Jobs stored per transaction by a sync."""


# -- planning (pure) ---------------------------------------------------------------------------
def trigger_of(spec: JobSpec, calendars: Mapping[str, frozenset[str]]) -> Trigger:
    """The job's trigger, with the dates of its calendars excluded."""
    days: set[str] = set()
    for name in spec.calendars:
        days |= calendars.get(name, frozenset())
    if not days or spec.trigger.get("kind") not in ("cron", "every"):
        return trigger_from_spec(spec.trigger)
    own = spec.trigger.get("exclude") or []
    assert isinstance(own, list)
    return trigger_from_spec({**spec.trigger, "exclude": sorted(days | {str(d) for d in own})})


def first_fire(trigger: Trigger, now: float) -> float | None:
    """When a new (or resumed) job fires first: ``after`` jobs fire at once, others per trigger."""
    if trigger.kind == "after":
        start = getattr(trigger, "start", None)
        return max(now, start) if start is not None else now
    return trigger.next_fire(now)


def plan(job: Job, trigger: Trigger, now: float) -> Fire:
    """What to do about a due job: its runs for this fire, and its next fire.

    A fire later than the job's grace period is a misfire, handled by its policy: ``skip``
    fires nothing and goes on after now; ``once`` fires one catch-up run now; ``all`` fires
    every missed fire, up to ``misfire_max``. Runs created ahead of their fire time wait as
    ``scheduled`` until it, so workers start them on time.
    """
    spec = job.spec
    due = job.next_fire_at
    assert due is not None
    missed = 0
    if due >= now - spec.misfire_grace:
        times, eta, after = [due], due, due
    else:
        times = _missed(spec, trigger, due, now)
        eta, after = now, now
        missed = 1
    if spec.max_fires is not None:
        times = times[: max(0, spec.max_fires - job.fires)]
    following = None if trigger.kind in ("after", "at") else trigger.next_fire(after)
    if spec.max_fires is not None and job.fires + len(times) >= spec.max_fires:
        following = None
    runs = [job_run(job, t, max(t, eta)) for t in times]
    return Fire(job_id=job.id, expected=due, next_fire_at=following, runs=runs, missed=missed)


def _missed(spec: JobSpec, trigger: Trigger, due: float, now: float) -> list[float]:
    if spec.misfire is Misfire.SKIP:
        return []
    if spec.misfire is Misfire.ONCE or trigger.kind in ("after", "at"):
        return [due]
    times = [due]
    while len(times) < spec.misfire_max:
        following = trigger.next_fire(times[-1])
        if following is None or following > now:
            break
        times.append(following)
    return times


# -- the API -----------------------------------------------------------------------------------
class Jobs:
    """Jobs in the store: add, change, pause, resume, remove, trigger, and look ahead.

    Reached as ``app.jobs``; every method is a coroutine (use ``app.blocking(...)`` from sync
    code, or the ``cronbus jobs`` commands).
    """

    def __init__(self, app: App) -> None:
        self._app = app

    # The use cases live in the jobs service (cronbus.services.jobs), written once for the
    # Python API, the CLI and the HTTP API; these methods are the local caller's door to it.
    def _service(self, namespace: str | None = None) -> JobsService:
        from .services import Services  # the services import this module

        return Services(self._app, namespace=namespace).jobs

    async def _of(self, name: str) -> JobsService:
        """The service of the job's own namespace: names are unique per store, and a local
        caller may reach a job of any namespace by its name (it stays in its namespace)."""
        job = await self._app.store.get_job(_named(name))
        return self._service(job.spec.namespace)

    async def add(self, name: str, task: str | Task[Any, Any], **options: Any) -> Job:
        """Create a job in the app's namespace; the name must be new. Options are those of
        ``@app.job``."""
        return await self._service().create(name, task, _options(options))

    async def update(self, name: str, *, force: bool = False, **changes: Any) -> Job:
        """Change a job. To change its schedule give its whole trigger (cron/every/after/at,
        with tz, start, end, jitter as needed); other options not given stay as they are.

        A job defined in code is changed only with ``force=True`` (and a warning): the next
        scheduler start restores it from the code (:class:`~cronbus.errors.CodeJobError`).
        """
        return await (await self._of(name)).update(name, changes, force=force)

    async def pause(self, name: str) -> Job:
        """Stop a job from firing until it is resumed."""
        return await (await self._of(name)).pause(name)

    async def resume(self, name: str) -> Job:
        """Let a paused job fire again, from its next fire after now."""
        return await (await self._of(name)).resume(name)

    async def remove(self, name: str, *, force: bool = False) -> None:
        """Delete a job (its runs stay). A job still defined in code is deleted only with
        ``force=True`` (and a warning): the next scheduler start brings it back from the code."""
        await (await self._of(name)).delete(name, force=force)

    async def trigger(self, name: str) -> RunHandle:
        """Fire a job now, once, outside its schedule (the schedule is unchanged)."""
        run = await (await self._of(name)).trigger(name)
        return RunHandle(self._app, run.id, namespace=run.namespace)

    async def next(self, name: str, count: int = 5) -> list[float]:
        """The job's next ``count`` fire times (epoch seconds), as its trigger plans them: none
        while paused, disabled or finished; an ``after`` job's next one only."""
        check_int(count, "count", 0, NEXT_LIMIT)
        service = await self._of(name)
        return [] if count == 0 else await service.next_fires(name, count)

    async def get(self, name: str) -> Job:
        """One job (of any namespace: a local caller reaches a job by its name)."""
        return await (await self._of(name)).get(name)

    async def list(self) -> list[Job]:
        """Every job of the app's namespace, by name."""
        from .services.pages import MAX_LIMIT  # the services import this module

        service, jobs, cursor = self._service(), [], None
        while True:
            page = await service.list(limit=MAX_LIMIT, cursor=cursor)
            jobs.extend(page.items)
            if page.next is None:
                return jobs
            cursor = page.next

    async def sync(self, progress: Callable[[int, int], object] | None = None) -> SyncReport:
        """Make the store's code-defined jobs match the app's: add new ones, update changed
        ones, and disable (never delete) those no longer in the code.

        Only the app's namespace is synced: apps of other namespaces, sharing the store, keep
        their code jobs whatever this app's code holds. ``progress`` is told ``(written,
        to write)`` once the changes are known and after each batch (``cronbus jobs sync``)."""
        store, now = self._app.store, self._app.clock.now()
        existing = {job.name: job for job in await store.list_jobs(namespace=self._app.namespace)}
        calendars = await store.get_calendars()
        added: list[str] = []
        updated: list[str] = []
        puts: list[tuple[JobSpec, float | None]] = []
        for spec in self._app.code_jobs.values():
            old = existing.get(spec.name)
            if old is not None and old.enabled and old.spec_digest == spec.spec_hash():
                continue
            keep = old is not None and old.spec.trigger == spec.trigger and old.enabled
            keep_at = old.next_fire_at if keep and old is not None else None
            puts.append((spec, _following(spec, keep_at, calendars, now)))
            (updated if old is not None else added).append(spec.name)
        gone = [
            name
            for name, job in existing.items()
            if job.spec.source == "code" and name not in self._app.code_jobs and job.enabled
        ]
        tell = progress or _ignore
        tell(0, len(puts) + len(gone))
        for start in range(0, len(puts), _SYNC_BATCH):
            await store.put_jobs(puts[start : start + _SYNC_BATCH], now)
            tell(min(start + _SYNC_BATCH, len(puts)), len(puts) + len(gone))
        disabled = await store.disable_jobs(gone, now) if gone else []
        tell(len(puts) + len(gone), len(puts) + len(gone))
        for name in disabled:
            log.warning(
                "job %s is no longer in the code: disabled, not deleted "
                "(`cronbus jobs remove %s` deletes it)",
                name,
                name,
                extra={"action": "job.disabled"},
            )
        return SyncReport(added=added, updated=updated, disabled=disabled)

    def _task(self, task: str | Task[Any, Any]) -> Task[Any, Any]:
        if isinstance(task, Task):
            return task
        return self._app.get_task(check_label(task, "task name"))


def _named(name: str) -> str:
    """A job name to look up: checked first, so a NUL reaches no store."""
    return check_label(name, "job name")


def is_code_job(job: Job) -> bool:
    """True for a job defined in code and still there: a scheduler's sync rewrites it.

    Jobs gone from the code are disabled by the sync and stay the store's own until removed.
    """
    return job.spec.source == "code" and job.enabled


def code_job_guard(job: Job, change: str, force: bool) -> None:
    """Refuse to change a code job without ``force``; with it, warn that the change is undone
    at the next start. ``change`` is the past participle (``changed``, ``removed``)."""
    if not is_code_job(job):
        return
    restored = "restores it from the code" if change != "removed" else "adds it again from the code"
    if not force:
        raise CodeJobError(
            f"job {job.name!r} is defined in code and the next scheduler start {restored}; "
            f"change the code instead, or force it (--force, force=True) to have it {change} "
            "until then"
        )
    log.warning(
        "job %s is defined in code: %s by force; the next scheduler start %s",
        job.name,
        change,
        restored,
        extra={"action": f"job.{change}_by_force"},
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncReport:
    """What syncing the code's jobs changed in the store."""

    added: list[str]
    updated: list[str]
    disabled: list[str]


def _ignore(done: int, total: int) -> None:
    """The progress of a sync that shows none (a scheduler's)."""


def _options(values: Mapping[str, Any]) -> JobOptions:
    unknown = set(values) - set(JobOptions.__dataclass_fields__)
    if unknown:
        raise ConfigurationError(f"unknown job option(s): {', '.join(sorted(unknown))}")
    return JobOptions(**values)


def _following(
    spec: JobSpec, keep_at: float | None, calendars: Mapping[str, frozenset[str]], now: float
) -> float | None:
    """A job's next fire when it is stored: none while paused (planned anew on resume), the
    one it had when its schedule is unchanged, else the trigger's first after now."""
    if spec.paused:
        return None
    if keep_at is not None:
        return keep_at
    return first_fire(trigger_of(spec, calendars), now)


def _current(spec: JobSpec) -> dict[str, Any]:
    """A spec's options in the form ``JobOptions`` takes, to merge changes into."""
    return {
        "args": json.loads(spec.args_json),
        "kwargs": json.loads(spec.kwargs_json),
        "misfire": spec.misfire,
        "misfire_grace": spec.misfire_grace,
        "misfire_max": spec.misfire_max,
        "overlap": spec.overlap,
        "children": spec.children,
        "calendars": spec.calendars,
        "max_fires": spec.max_fires,
        "queue": spec.queue,
        "priority": spec.priority,
        "paused": spec.paused,
        "broadcast": spec.broadcast,
        "shards": spec.shards,
        # A stand-in schedule that validates; the stored trigger is put back unless replaced.
        "every": 1.0,
    }


def excluded_dates(days: Iterable[date | str]) -> list[str]:
    """ISO dates, validated, for a calendar."""
    out = []
    for day in days:
        text = day.isoformat() if isinstance(day, date) else str(day)
        try:
            date.fromisoformat(text)
        except ValueError:
            raise ConfigurationError(f"{text!r} is not a date (YYYY-MM-DD)") from None
        out.append(text)
    return sorted(set(out))
