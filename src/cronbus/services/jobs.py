"""Jobs: list, get, create, update, delete, pause, resume, trigger now, next fire times.

The rules live here once for every door: a definition is validated whole (through
:func:`cronbus.job_specs.build_spec`) before the store changes; a trigger with no fire left is
refused (the job would be stored finished and never run); calendars go only with ``cron`` and
``every`` jobs; a job defined in code is changed or deleted only with ``force`` (the next
scheduler start restores it). Errors name the option at fault (``field``).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from ..errors import ConfigurationError, InvalidArgumentError, JobExistsError, JobNotFoundError
from ..job_specs import JobOptions, build_spec, check_job_name
from ..jobs import NEXT_LIMIT, _current, _following, code_job_guard, first_fire, trigger_of
from ..model import Job, JobSpec, Run, RunFilter
from ..states import RunState
from ..store.logic import job_run
from ..task import Task
from ..triggers import next_fires
from ..validation import check_int, check_label, shorten
from .context import Context, guess_field, naming
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, page_of
from .redaction import Redactor

TRIGGER_KINDS = ("cron", "every", "after", "at")
"""The options that each give a whole trigger (exactly one per job)."""
TRIGGER_OPTIONS = (*TRIGGER_KINDS, "tz", "start", "end", "jitter")
"""The options of a trigger: a change of any of them gives the trigger whole."""
OPTION_NAMES = tuple(f.name for f in fields(JobOptions))
"""Every option a job definition takes besides its name and task."""
_CURSOR = {"n": str}
_WORDS = {
    **{name: name for name in OPTION_NAMES},
    "job name": "name",
    "queue name": "queue",
    "task name": "task",
    "calendar name": "calendars",
    "exclude": "calendars",
    "time zone": "tz",
    "cron expression": "cron",
}


def field_of(message: str, default: str = "options") -> str:
    """The option a job definition's error is about (``jitter must be...`` is ``jitter``)."""
    return guess_field(message, _WORDS, default)


class JobsService:
    """Jobs of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    # -- reads -----------------------------------------------------------------------------------
    async def list(self, limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> Page[Job]:
        """Jobs of the namespace by name, a page at a time (keyset on the name)."""
        self._c.read()
        limit = check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor, _CURSOR)["n"]
        found = await self._c.store.list_jobs(namespace=self._c.namespace)
        ordered = sorted(found, key=lambda job: job.name)
        if after is not None:
            ordered = [job for job in ordered if job.name > after]
        return page_of(ordered[: limit + 1], limit, lambda job: {"n": job.name})

    async def get(self, name: str) -> Job:
        """One job of the namespace, or :class:`~cronbus.errors.JobNotFoundError`."""
        self._c.read()
        return await self._get(name)

    async def _get(self, name: str) -> Job:
        with naming("name"):
            name = check_job_name(name)
        job = await self._c.store.get_job(name)
        self._c.owns(job.spec.namespace, JobNotFoundError(f"no job named {name!r}"))
        return job

    async def recent_runs(self, name: str, limit: int = 10) -> builtins.list[Run]:
        """The job's latest runs, newest first."""
        self._c.read()
        job = await self._get(name)
        wanted = RunFilter(job_id=job.id, namespace=self._c.namespace, limit=check_limit(limit))
        return Redactor(self._c).runs(await self._c.store.list_runs(wanted))

    async def recent_outcomes(
        self, jobs: Sequence[Job], per_job: int = 10
    ) -> dict[int, builtins.list[tuple[int, RunState]]]:
        """The newest ``per_job`` runs of each of ``jobs`` (by job id: run id and state,
        newest first), in one store call: the strip of outcomes a job list shows."""
        self._c.read()
        with naming("per_job"):
            per_job = check_int(per_job, "per_job", 1, 100)
        for job in jobs:
            self._c.owns(job.spec.namespace, JobNotFoundError(f"no job named {job.name!r}"))
        if not jobs:
            return {}
        ids = sorted({job.id for job in jobs})
        return await self._c.store.recent_job_runs(self._c.namespace, ids, per_job)

    async def next_fires(self, name: str, count: int = 10) -> builtins.list[float]:
        """The job's next ``count`` fire times (epoch seconds), as its trigger plans them.

        A paused, disabled or finished job has none; an ``after`` job only its next one, since
        the fire after it waits for that run to end."""
        self._c.read()
        with naming("count"):
            count = check_int(count, "count", 1, NEXT_LIMIT)
        job = await self._get(name)
        if not job.enabled or job.spec.paused or job.next_fire_at is None:
            return []
        if job.spec.after_seconds is not None:
            return [job.next_fire_at]
        trigger = trigger_of(job.spec, await self._c.store.get_calendars())
        return [job.next_fire_at, *next_fires(trigger, job.next_fire_at, count - 1)]

    # -- changes ---------------------------------------------------------------------------------
    async def create(
        self, name: str, task: str | Task[Any, Any], options: JobOptions | None = None
    ) -> Job:
        """Create a job running ``task`` with ``options`` (one trigger: cron, every, after or
        at); the name must be new in the store (:class:`~cronbus.errors.JobExistsError`)."""
        self._c.write()
        options = options or JobOptions()
        if not any(getattr(options, kind) is not None for kind in TRIGGER_KINDS):
            raise InvalidArgumentError("give a trigger: cron, every, after or at", field="trigger")
        spec = self._spec(name, self._task(task), options, "api")
        check_calendars(spec.trigger.get("kind"), spec.calendars)
        calendars = await self._c.store.get_calendars()
        now = self._c.now()
        # Paused or not: a trigger without a fire left would never fire after a resume either.
        refuse_dead_trigger(spec, calendars, now)
        try:
            job = await self._c.store.put_job(
                spec, _following(spec, None, calendars, now), now, create=True
            )
        except JobExistsError:
            raise JobExistsError(
                f"a job named {spec.name!r} exists; use update to change it"
            ) from None
        await self._c.audit("jobs.create", job.name, {"task": spec.task, "trigger": spec.trigger})
        return job

    async def update(self, name: str, changes: Mapping[str, Any], force: bool = False) -> Job:
        """Change the options given; the others stay as they are. To change the schedule give
        the trigger whole (cron, every, after or at, with its tz, start, end and jitter): it
        replaces the old one. A job defined in code needs ``force`` (and the next scheduler
        start restores it: :class:`~cronbus.errors.CodeJobError`)."""
        self._c.write()
        job = await self._get(name)
        changes = dict(changes)
        if not changes:
            raise InvalidArgumentError("give at least one option to change", field="changes")
        unknown = sorted(set(changes) - set(OPTION_NAMES) - {"task"})
        if unknown:
            raise InvalidArgumentError(
                f"unknown job option(s): {', '.join(map(shorten, unknown))}", field=unknown[0]
            )
        task = self._task(changes.pop("task", job.spec.task))
        new_trigger = any(changes.get(k) is not None for k in TRIGGER_KINDS)
        if not new_trigger and any(k in changes for k in TRIGGER_OPTIONS):
            given = next(k for k in TRIGGER_OPTIONS if k in changes)
            raise InvalidArgumentError(
                "to change a job's schedule give cron, every, after or at, with its tz, start, "
                "end and jitter",
                field=given,
            )
        current = _current(job.spec)
        if new_trigger:
            del current["every"]
        merged = {**current, **changes}
        # A code job changed by force stays a code job, so a sync still restores or disables it.
        spec = self._spec(name, task, JobOptions(**merged), job.spec.source)
        spec = replace(spec, namespace=job.spec.namespace)
        if not new_trigger:
            spec = replace(spec, trigger=job.spec.trigger)
        check_calendars(spec.trigger.get("kind"), spec.calendars)
        now = self._c.now()
        calendars = await self._c.store.get_calendars()
        if new_trigger:
            refuse_dead_trigger(spec, calendars, now)
        # After the checks, so a bad option is reported as what it is, force or not.
        code_job_guard(job, "changed", force)
        keep_at = None if new_trigger else job.next_fire_at
        following = _following(spec, keep_at, {} if spec.paused else calendars, now)
        changed = await self._c.store.put_job(spec, following, now)
        await self._c.audit("jobs.update", job.name, {"changes": sorted(changes), "force": force})
        return changed

    async def delete(self, name: str, force: bool = False) -> Job:
        """Delete a job (its runs stay) and return it as it was. A job still defined in code
        needs ``force``: the next scheduler start brings it back from the code."""
        self._c.write()
        job = await self._get(name)
        code_job_guard(job, "removed", force)
        await self._c.store.delete_job(job.name)
        await self._c.audit("jobs.delete", job.name, {"force": force})
        return job

    async def pause(self, name: str) -> Job:
        """Stop a job from firing until it is resumed (its runs are left alone)."""
        self._c.write()
        job = await self._get(name)
        paused = await self._c.store.set_job_paused(job.name, True, None, self._c.now())
        await self._c.audit("jobs.pause", job.name)
        return paused

    async def resume(self, name: str) -> Job:
        """Let a paused job fire again, from its first fire after now (missed fires skipped)."""
        self._c.write()
        job = await self._get(name)
        if not job.spec.paused:
            return job
        now = self._c.now()
        trigger = trigger_of(job.spec, await self._c.store.get_calendars())
        resumed = await self._c.store.set_job_paused(job.name, False, first_fire(trigger, now), now)
        await self._c.audit("jobs.resume", job.name)
        return resumed

    async def trigger(self, name: str) -> Run:
        """Fire a job now, once, outside its schedule (the schedule is unchanged and the run
        counts as no fire of the job); returns the new run."""
        self._c.write()
        job = await self._get(name)
        now = self._c.now()
        (done,) = await self._c.store.defer([job_run(job, now, now)], now)
        await self._c.audit("jobs.trigger", job.name, {"run": done.id})
        return Redactor(self._c).run(await self._c.store.get_run(done.id))

    # -- helpers ---------------------------------------------------------------------------------
    def _task(self, task: str | Task[Any, Any]) -> Task[Any, Any]:
        if isinstance(task, Task):
            return task
        with naming("task"):
            name = check_label(task, "task")
        return self._c.app.get_task(name)

    def _spec(self, name: str, task: Task[Any, Any], options: JobOptions, source: str) -> JobSpec:
        with naming("name"):
            check_job_name(name)
        try:
            spec = build_spec(name, task, options, source)
        except (InvalidArgumentError, ConfigurationError) as exc:
            field = getattr(exc, "field", None) or field_of(str(exc))
            if field == "options" and "argument" in str(exc):
                field = "kwargs" if options.kwargs and not options.args else "args"
            raise InvalidArgumentError(str(exc), field=field) from None
        return replace(spec, namespace=self._c.namespace)


def check_calendars(kind: object, calendars: Sequence[str]) -> None:
    """Refuse calendars on an ``after`` or ``at`` job: their triggers have no dates to skip."""
    if calendars and kind in ("after", "at"):
        raise InvalidArgumentError(
            f"calendars ({', '.join(calendars)}) skip dates of cron and every jobs only, "
            f"not of an {kind} job",
            field="calendars",
        )


def refuse_dead_trigger(spec: JobSpec, calendars: Mapping[str, frozenset[str]], now: float) -> None:
    """Refuse a trigger with no fire left (an ``at`` in the past, an ``end`` gone): the job
    would be stored finished and never run, which is nothing but a silent drop."""
    trigger = trigger_of(spec, calendars)
    if first_fire(trigger, now) is None:
        kind = str(spec.trigger.get("kind", "trigger"))
        raise InvalidArgumentError(
            f"job {spec.name!r} would never fire: its {trigger.describe()} has no fire left "
            "after now",
            field=kind if kind in TRIGGER_KINDS else "trigger",
        )
