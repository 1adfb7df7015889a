"""Runs: list with filters, show with attempts and hints, cancel, retry, defer.

The rules the front ends used to hold live here: which runs may be cancelled or retried and
what the refusal says, and why a waiting run may wait for ever (no live worker of its namespace
serves its queue, or none knows its task).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidTransitionError,
    JobNotFoundError,
    RunNotFoundError,
)
from ..fairness import serves
from ..job_specs import check_job_name
from ..model import Run, RunFilter, WorkerInfo, WorkerState
from ..states import RunEvent, RunState, sources
from ..task import check_key, check_priority, check_queue, resolve_eta
from ..validation import check_label, check_time, shorten
from .context import Context, check_id, naming
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, page_of
from .views import DeferResult, RunDetail, RunQuery

WAITING = sources(RunEvent.CLAIM) | sources(RunEvent.DUE)
"""States of a run that waits for a worker: queued, or scheduled for later."""
RETRYABLE = sources(RunEvent.REQUEUE)
"""States a run can be retried from (dead, cancelled)."""
_CURSOR = {"b": int}


def check_run_id(run_id: object, field: str = "run_id") -> int:
    """A run id: a whole number from 1 (bool refused)."""
    return check_id(run_id, field)


def check_states(states: Sequence[RunState | str], field: str = "states") -> tuple[RunState, ...]:
    """Run states by name (``queued``...), each known."""
    if isinstance(states, str):
        states = [states]
    chosen = []
    for state in states:
        try:
            chosen.append(RunState(state))
        except ValueError:
            allowed = ", ".join(s.value for s in RunState)
            raise InvalidArgumentError(
                f"{field} must be run states ({allowed}), got {shorten(state)}", field=field
            ) from None
    return tuple(dict.fromkeys(chosen))


class RunsService:
    """Runs of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def list(
        self, query: RunQuery | None = None, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[Run]:
        """Runs matching ``query``, newest first, a page at a time (keyset on the run id)."""
        self._c.read()
        wanted = await self._filter(query or RunQuery(), check_limit(limit), cursor)
        found = await self._c.store.list_runs(wanted)
        return page_of(found, limit, lambda run: {"b": run.id})

    async def _filter(self, query: RunQuery, limit: int, cursor: str | None) -> RunFilter:
        before = None if cursor is None else decode_cursor(cursor, _CURSOR)["b"]
        with naming("states"):
            states = check_states(query.states)
        with naming("task"):
            task = None if query.task is None else check_label(query.task, "task")
        with naming("queue"):
            queue = None if query.queue is None else check_queue(query.queue)
        after_time = _time(query.created_after, "created_after")
        before_time = _time(query.created_before, "created_before")
        job_id = None
        if query.job is not None:
            with naming("job"):
                name = check_job_name(query.job)
            job = await self._c.store.get_job(name)
            self._c.owns(job.spec.namespace, JobNotFoundError(f"no job named {name!r}"))
            job_id = job.id
        return RunFilter(
            states=states,
            task=task,
            queue=queue,
            job_id=job_id,
            limit=limit + 1,  # one more than shown tells whether a next page exists
            before_id=before,
            namespace=self._c.namespace,
            created_after=after_time,
            created_before=before_time,
        )

    async def get(self, run_id: int) -> Run:
        """One run of this namespace (:class:`~cronbus.errors.RunNotFoundError` otherwise)."""
        self._c.read()
        return await self._get(run_id)

    async def _get(self, run_id: int) -> Run:
        run = await self._c.store.get_run(check_run_id(run_id))
        self._c.owns(run.namespace, RunNotFoundError(f"no run has id {run_id}"))
        return run

    async def show(self, run_id: int) -> RunDetail:
        """A run with its attempts, the runs it spawned, and why it may wait for ever."""
        self._c.read()
        run = await self._get(run_id)
        attempts = await self._c.store.list_attempts(run.id)
        return RunDetail(
            run=run,
            attempts=attempts,
            children=await self._children(run),
            waiting=await self.waiting(run),
        )

    async def _children(self, run: Run) -> builtins.list[Run]:
        # Parent runs (fan-out, map) come with issue 11; until the filter knows a parent, a
        # run has no children to show.
        if "parent_id" not in RunFilter.__dataclass_fields__:
            return []
        parent: dict[str, Any] = {"parent_id": run.id}
        wanted = RunFilter(namespace=self._c.namespace, limit=1000, **parent)
        return list(reversed(await self._c.store.list_runs(wanted)))

    async def waiting(self, run: Run) -> builtins.list[str]:
        """Why a waiting run may wait for ever: no live worker of its namespace serves its
        queue, or none of those that do knows its task.

        Checked when a run is shown rather than at ``defer``, where reading the workers would
        cost every call. A worker is live when the registry has it alive with a heartbeat
        within the lease (``CRONBUS_LEASE_SECONDS``); a draining one claims nothing more.
        """
        self._c.read()
        if run.state not in WAITING:
            return []
        workers = await self._c.store.list_workers(
            self._c.now(), self._c.settings.lease_seconds, namespace=run.namespace
        )
        serving = [w for w in workers if _live(w, run.namespace) and serves(w.queues, run.queue)]
        if not serving:
            return [
                f"no live worker serves queue {run.queue!r}"
                + ("" if run.namespace == "default" else f" in namespace {run.namespace!r}")
                + "; the run waits until one does (a worker started without --queues serves "
                "every queue)"
            ]
        # Workers of older versions register no task list: they may know it, so no warning.
        if all(w.tasks and run.task not in w.tasks for w in serving):
            return [
                f"no live worker serving queue {run.queue!r} knows task {run.task!r}; the run "
                "waits until one with that task in its code does"
            ]
        return []

    async def cancel(self, run_id: int) -> Run:
        """Cancel a run: at once if it waits (``cancelled``), or ask its worker to stop it if
        it runs (``cancelling``, then ``cancelled``, or ``succeeded`` if the work ends first).
        A run that already ended is a :class:`~cronbus.errors.ConflictError`."""
        self._c.write()
        run = await self._get(run_id)
        try:
            await self._c.store.cancel(run.id, self._c.now())
        except InvalidTransitionError:
            now = await self._c.store.get_run(run.id)
            raise InvalidTransitionError(
                f"run {run.id} is already {now.state} and cannot be cancelled"
            ) from None
        changed = await self._c.store.get_run(run.id)
        await self._c.audit("runs.cancel", run.id, {"state": changed.state.value})
        return changed

    async def retry(self, run_id: int) -> Run:
        """Queue a dead or cancelled run again, with a fresh retry budget; a run in another
        state is a :class:`~cronbus.errors.ConflictError` saying which states can be."""
        self._c.write()
        run = await self._get(run_id)
        if not await self._c.store.requeue([run.id], self._c.now()):
            now = await self._c.store.get_run(run.id)
            raise ConflictError(
                f"run {run.id} is {now.state}; only {retryable_states()} runs can be retried"
            )
        await self._c.audit("runs.retry", run.id)
        return await self._c.store.get_run(run.id)

    async def defer(
        self,
        task: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
    ) -> DeferResult:
        """Create a run of a task of the app, in this namespace; the arguments are checked
        against the task's function before anything is stored. A known idempotency key
        returns the run it created (``created=False``)."""
        self._c.write()
        with naming("task"):
            name = check_label(task, "task")
        found = self._c.app.get_task(name)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise InvalidArgumentError(
                f"args must be a list of arguments, got {shorten(args)}", field="args"
            )
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise InvalidArgumentError(
                f"kwargs must be an object of keyword arguments, got {shorten(kwargs)}",
                field="kwargs",
            )
        now = self._c.now()
        # Each option is checked under its own name first, so an error names the field.
        with naming("queue"):
            queue = None if queue is None else check_queue(queue)
        with naming("priority"):
            priority = None if priority is None else check_priority(priority)
        with naming("idempotency_key"):
            idempotency_key = check_key(idempotency_key)
        with naming("delay" if delay is not None else "eta"):
            when = resolve_eta(now, delay, eta)
        with naming("kwargs" if kwargs and not args else "args"):
            new = found.prepare(
                args,
                kwargs or {},
                now=now,
                eta=when,
                priority=priority,
                queue=queue,
                idempotency_key=idempotency_key,
            )
        new = replace(new, namespace=self._c.namespace)
        (done,) = await self._c.store.defer([new], self._c.now())
        run = await self._c.store.get_run(done.id)
        if run.namespace != self._c.namespace:
            # The key names a run of another namespace: refuse without showing it.
            raise ConflictError(
                f"idempotency key {idempotency_key!r} is taken by a run of another namespace"
            )
        if done.created:
            await self._c.audit("runs.defer", run.id, {"task": run.task, "queue": run.queue})
        return DeferResult(run=run, created=done.created)


def retryable_states() -> str:
    """``cancelled or dead``: the states a run can be retried from, in words."""
    return " or ".join(sorted(s.value for s in RETRYABLE))


def _live(worker: WorkerInfo, namespace: str) -> bool:
    return worker.state is WorkerState.ALIVE and worker.namespace == namespace


def _time(value: float | None, field: str) -> float | None:
    if value is None:
        return None
    with naming(field):
        return check_time(value, field)
