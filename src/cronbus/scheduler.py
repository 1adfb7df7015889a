"""The scheduler: turns time into runs, exactly once per fire, however many schedulers run.

A short loop over the store and the pure planning of :mod:`cronbus.jobs`: find the jobs due
within a look-ahead window (through an index, never a scan of every job), plan each fire
(misfire policy, next fire), and apply the plans in one transaction where each job advances by
compare-and-set. Runs are created up to ``lookahead`` seconds (0.5) before their fire time, due
at it, so idle workers, which sleep until the earliest due run, start them on time; half a second
also keeps the pass that creates the next second's runs away from the claim of this second's.
Between fires the scheduler sleeps until the next one is due, or until a job changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, CronbusError, JobNotFoundError
from .jobs import plan, trigger_of
from .model import Fire, Job
from .store import JOBS_CHANNEL, Listener
from .triggers import Trigger
from .worker.reaping import settle_broadcasts_forever

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("cronbus.scheduler")
DEFAULT_LOOKAHEAD = 0.5
"""Seconds before its fire time that a fire's run is created (see the module docstring)."""
_RETRY_SECONDS = 0.5
_CALENDARS_SECONDS = 5.0
_JOB_FAULTS = (CronbusError, ArithmeticError, ValueError)
"""What one job's stored data can make its planning raise (a trigger this cronbus refuses)."""


class Scheduler:
    """Fires the due jobs of an app's store, of every namespace: it needs no code of theirs,
    and each run is created in its job's namespace."""

    def __init__(
        self,
        app: App,
        *,
        lookahead: float = DEFAULT_LOOKAHEAD,
        batch: int = 500,
        poll_seconds: float | None = None,
        sync: bool = True,
    ) -> None:
        if not 0 <= lookahead <= 60:
            raise ConfigurationError(f"lookahead must be 0 to 60 seconds, got {lookahead}")
        if batch < 1:
            raise ConfigurationError(f"batch must be at least 1, got {batch}")
        self.app = app
        self.lookahead = lookahead
        self.batch = batch
        self.poll_seconds = poll_seconds or app.settings.poll_seconds
        self.sync = sync
        self.fired = 0
        self._stopping = asyncio.Event()
        self._triggers: dict[tuple[int, str], Trigger] = {}
        self._calendars: dict[str, frozenset[str]] = {}
        self._calendars_read = 0.0
        self._reported: set[tuple[int, str]] = set()
        self.metrics = app.metrics
        """The app's metrics (None when switched off): fires applied and their lag."""

    def request_stop(self) -> None:
        """Stop after the current pass."""
        self._stopping.set()

    async def run(self) -> None:
        """Sync the code's jobs, then fire due jobs until :meth:`request_stop`."""
        store = self.app.store
        listener = await store.listen([JOBS_CHANNEL])
        # Broadcasts fired before any worker registered wait for one; with no worker at all,
        # only the scheduler is there to end them, saying so, when their wait is over.
        settling = asyncio.create_task(
            settle_broadcasts_forever(store, self.app.clock, self.app.settings),
            name="cronbus-broadcasts",
        )
        try:
            if self.sync:
                report = await self.app.jobs.sync()
                log.info(
                    "scheduler started: %d jobs in code (%d added, %d updated, %d disabled)",
                    len(self.app.code_jobs),
                    len(report.added),
                    len(report.updated),
                    len(report.disabled),
                    extra={"action": "scheduler.start"},
                )
            while not self._stopping.is_set():
                try:
                    busy = await self.tick()
                except Exception:
                    log.exception("firing jobs failed; trying again")
                    await self._sleep(listener, _RETRY_SECONDS)
                    continue
                if not busy:
                    await self._sleep(listener, await self._idle_timeout())
        finally:
            settling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await settling
            await listener.close()
        log.info("scheduler stopped", extra={"action": "scheduler.stop"})

    async def tick(self) -> bool:
        """Fire what is due within the look-ahead window; True if a full batch was due."""
        store, now = self.app.store, self.app.clock.now()
        due = await store.due_jobs(now + self.lookahead, self.batch)
        if not due:
            return False
        await self._refresh_calendars()
        fires: list[Fire] = []
        invalid: list[tuple[Job, Exception, str]] = []
        for job in due:
            try:
                planned = plan(job, self._trigger(job), now)
            except _JOB_FAULTS as exc:
                invalid.append((job, exc, "an invalid trigger"))
                continue
            try:
                fires.append(self._shaped(planned))
            except _JOB_FAULTS as exc:
                invalid.append((job, exc, "arguments its task's route or limits cannot use"))
        done = await store.fire(fires, now)
        for job, fault, what in invalid:
            await self._set_aside(job, fault, what, now)
        late = [f for f, ok in zip(fires, done, strict=True) if ok and f.missed]
        if late:
            # One line a pass, not one a job: a backlog must not be fed by its own warnings.
            log.warning(
                "%d job(s) fired later than their grace period; handled by their misfire "
                "policies (%d catch-up run(s))",
                len(late),
                sum(len(f.runs) for f in late),
                extra={"action": "jobs.misfire"},
            )
        self.fired += sum(len(f.runs) for f, ok in zip(fires, done, strict=True) if ok)
        if self.metrics is not None:
            self._count(due, fires, done, now)
        return len(due) == self.batch or any(
            f.next_fire_at is not None and f.next_fire_at <= now + self.lookahead
            for f, ok in zip(fires, done, strict=True)
            if ok
        )

    def _count(self, due: list[Job], fires: list[Fire], done: list[bool], now: float) -> None:
        """Count the fires applied, and how late their runs were created (``now``)."""
        assert self.metrics is not None
        names = {job.id: job.name for job in due}
        for fire, ok in zip(fires, done, strict=True):
            if not ok:
                continue  # another scheduler applied it: counted there
            lags = [now - run.fire_at for run in fire.runs if run.fire_at is not None]
            self.metrics.fired(names.get(fire.job_id, "?"), fire_result(fire), lags)

    def _shaped(self, fire: Fire) -> Fire:
        """The fire with its runs' routes and limits, from the task's code when this app has
        it (a scheduler without the code fires runs with neither, as the CLI defers them)."""
        if not any(run.task in self.app.tasks for run in fire.runs):
            return fire
        return replace(fire, runs=[self.app.shape_run(run) for run in fire.runs])

    async def _set_aside(self, job: Job, exc: Exception, what: str, now: float) -> None:
        """Pause a job whose stored trigger or arguments cannot be planned (a key its task's
        policy cannot take from them), so it neither stops the other jobs from firing nor
        comes back due on every pass; say so once."""
        key = (job.id, job.spec_digest)
        if key not in self._reported:
            self._reported.add(key)
            log.error(
                "job %r has %s and is paused: %s; fix it with `cronbus jobs update %s` and "
                "resume it",
                job.name,
                what,
                exc,
                job.name,
                extra={"action": "job.invalid_trigger", "job": job.name},
            )
        # Another process may have removed the job meanwhile: then there is nothing to pause.
        with contextlib.suppress(JobNotFoundError):
            await self.app.store.set_job_paused(job.name, True, None, now)

    def _trigger(self, job: Job) -> Trigger:
        key = (job.id, job.spec_digest)
        trigger = self._triggers.get(key)
        if trigger is None:
            if len(self._triggers) > 200_000:
                self._triggers.clear()
            trigger = self._triggers[key] = trigger_of(job.spec, self._calendars)
        return trigger

    async def _refresh_calendars(self) -> None:
        if time.monotonic() - self._calendars_read < _CALENDARS_SECONDS:
            return
        calendars = await self.app.store.get_calendars()
        if calendars != self._calendars:
            self._calendars = calendars
            self._triggers.clear()
        self._calendars_read = time.monotonic()

    async def _idle_timeout(self) -> float:
        """How long to sleep: until the next planned fire is within the lookahead, at most
        ``poll_seconds``. A store that fails here (a server restarting) is looked at again
        after the poll, as a failed tick is: the scheduler must not stop for it."""
        try:
            following = await self.app.store.next_job_fire()
        except Exception:
            log.warning("reading the next fire failed; looking again in %gs", self.poll_seconds)
            return self.poll_seconds
        if following is None:
            return self.poll_seconds
        wait = following - self.lookahead - self.app.clock.now()
        return min(self.poll_seconds, max(0.0, wait))

    async def _sleep(self, listener: Listener, timeout: float) -> None:
        waits: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(listener.wait(timeout)),
            asyncio.ensure_future(self._stopping.wait()),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*waits, return_exceptions=True)


def fire_result(fire: Fire) -> str:
    """The ``result`` label of an applied fire: ``run`` (on time), ``misfired`` (later than
    the job's grace, its runs created by the misfire policy), ``skipped`` (no run: the misfire
    policy skipped it, or the job reached its ``max_fires``)."""
    if not fire.runs:
        return "skipped"
    return "misfired" if fire.missed else "run"
