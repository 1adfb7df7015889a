"""Runs: list with filters, show with attempts, children and hints, page through a parent's
children, cancel, retry, defer.

The rules the front ends used to hold live here: which runs may be cancelled or retried and
what the refusal says, and why a run waits (:mod:`.waiting`: no live worker of its namespace
serves its queue or knows its task, its target worker is gone, its limits, its children).
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
from ..job_specs import check_job_name
from ..model import Run, RunFilter, check_match_depth
from ..states import ACTIVE, RunEvent, RunState, sources
from ..task import check_key, check_priority, check_queue, resolve_eta
from ..task_policy import check_fanout
from ..validation import check_label, check_time, shorten
from .context import ID_LIMIT, Context, check_id, naming
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, page_of
from .redaction import Redactor
from .retention import PURGE_LIMIT, PurgeResult, purge_runs
from .views import DeferResult, RunDetail, RunQuery
from .waiting import PENDING, Limits, explain

RETRYABLE = sources(RunEvent.REQUEUE)
"""States a run can be retried from (dead, cancelled)."""
CANCELLABLE = sources(RunEvent.CANCEL) - {RunState.CANCELLING}
"""States a run can be cancelled from (a cancelling run is being cancelled already)."""
CHILDREN_SHOWN = 20
"""Children a run's detail holds (the first by index); :meth:`RunsService.children` pages."""
_CURSOR = {"b": int}
_CHILD_CURSOR = {"i": int}
_COUNT_PAGE = 500
_COUNT_MOST = 5_000
"""The most active runs read to count a concurrency key's (a limit is far below it)."""
_INDEX_DIGITS = 9
"""The longest positional index a payload match names (PostgreSQL indexes arrays by int4)."""


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


def check_matches(matches: object, field: str = "args") -> tuple[tuple[str, Any], ...]:
    """Payload matches: (key, JSON value) pairs, each key a keyword argument's name or a
    position in digits (``"0"``), each key once."""
    if isinstance(matches, str | bytes | Mapping) or not isinstance(matches, Sequence):
        raise InvalidArgumentError(
            f"{field} must be a list of (argument, value) pairs, got {shorten(matches)}",
            field=field,
        )
    chosen: dict[str, Any] = {}
    for match in matches:
        if isinstance(match, str | bytes) or not isinstance(match, Sequence) or len(match) != 2:
            raise InvalidArgumentError(
                f"{field} must be (argument, value) pairs, got {shorten(match)}", field=field
            )
        key, value = match
        index = isinstance(key, str) and key.isascii() and key.isdigit()
        if not isinstance(key, str) or not (
            key.isidentifier() or (index and len(key) <= _INDEX_DIGITS and str(int(key)) == key)
        ):
            raise InvalidArgumentError(
                f"{field}: a match names a keyword argument or a position from 0, got "
                f"{shorten(key)}",
                field=field,
            )
        if key in chosen:
            raise InvalidArgumentError(f"{field}: argument {key!r} is matched twice", field=field)
        check_match_depth(key, value, field)
        chosen[key] = value
    return tuple(chosen.items())


def can_cancel(run: Run) -> bool:
    """Whether :meth:`RunsService.cancel` would act on ``run`` now."""
    return run.state in CANCELLABLE


def can_retry(run: Run) -> bool:
    """Whether :meth:`RunsService.retry` would queue ``run`` again now."""
    return run.state in RETRYABLE


class RunsService:
    """Runs of one namespace; their payloads as the caller may see them
    (:mod:`.redaction`)."""

    def __init__(self, context: Context) -> None:
        self._c = context
        self._redact = Redactor(context)

    async def list(
        self, query: RunQuery | None = None, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[Run]:
        """Runs matching ``query``, newest first, a page at a time (keyset on the run id)."""
        self._c.read()
        query = query or RunQuery()
        wanted = await self._filter(query, check_limit(limit), cursor)
        if query.id is not None:
            # One run at most: the keyset starts just above it, and a run found below it is
            # not it. Its filters still apply, so the search reads the same as any other.
            before = min(wanted.before_id or ID_LIMIT, query.id + 1)
            wanted = replace(wanted, before_id=before, limit=1)
            found = [r for r in await self._c.store.list_runs(wanted) if r.id == query.id]
            page: Page[Run] = Page(items=found, next=None)
        else:
            page = page_of(await self._c.store.list_runs(wanted), limit, lambda r: {"b": r.id})
        # A run matched by an argument its task hides is left out (the cursor still moves past
        # it, so a page may hold fewer runs than the limit).
        shown = [run for run in page.items if self._redact.found(run, query)]
        return replace(page, items=self._redact.runs(shown))

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
        matches = check_matches(query.args)
        if query.id is not None:
            check_run_id(query.id, "id")
        self._redact.check_search(replace(query, args=matches))
        job_id = None
        if query.job is not None:
            with naming("job"):
                name = check_job_name(query.job)
            job = await self._c.store.get_job(name)
            self._c.owns(job.spec.namespace, JobNotFoundError(f"no job named {name!r}"))
            job_id = job.id
        with naming("args"):
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
                args=matches,
            )

    async def get(self, run_id: int) -> Run:
        """One run of this namespace (:class:`~cronbus.errors.RunNotFoundError` otherwise)."""
        self._c.read()
        return self._redact.run(await self._get(run_id))

    def shown(self, run: Run) -> Run:
        """A run read from the store elsewhere (a wait's checker read it as it ended), as
        :meth:`get` would return it: of this namespace, redacted."""
        self._c.read()
        self._c.owns(run.namespace, RunNotFoundError(f"no run has id {run.id}"))
        return self._redact.run(run)

    async def _get(self, run_id: int) -> Run:
        run = await self._c.store.get_run(check_run_id(run_id))
        self._c.owns(run.namespace, RunNotFoundError(f"no run has id {run_id}"))
        return run

    async def show(self, run_id: int) -> RunDetail:
        """A run with its attempts, its first children (a fan-out parent: by index, up to
        :data:`CHILDREN_SHOWN`; :meth:`children` pages through all), and why it waits."""
        self._c.read()
        run = await self._get(run_id)
        attempts = await self._c.store.list_attempts(run.id)
        detail = RunDetail(
            run=run,
            attempts=attempts,
            children=await self._first_children(run),
            waiting=await self.waiting(run),
        )
        return self._redact.detail(detail)

    async def _first_children(self, run: Run) -> builtins.list[Run]:
        if run.children is None:
            return []  # not a fan-out parent: no fanouts row, no children
        return await self._c.store.list_children(run.id, None, CHILDREN_SHOWN)

    async def children(
        self,
        run_id: int,
        after_index: int | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Page[Run]:
        """A parent's children by index (shard index, map item index or broadcast ordinal),
        the reduce run (which has no index) last, a page at a time: after ``after_index``, or
        from ``cursor`` (the ``next`` of the previous page). A run of another namespace is not
        found; a run that is no parent has no children (an empty page)."""
        self._c.read()
        limit = check_limit(limit)
        start = _child_start(after_index, cursor)
        run = await self._get(run_id)
        found = await self._c.store.list_children(run.id, start, limit + 1)
        page = page_of(found, limit, _child_position)
        return replace(page, items=self._redact.runs(page.items))

    async def waiting(self, run: Run) -> builtins.list[str]:
        """Why a run waits (:func:`~.waiting.explain`): no live worker of its namespace serves
        its queue, knows its task or carries its labels; it is pinned to a worker, alive or
        gone; it is at its concurrency limit or under a rate; or, a fan-out parent, it waits
        for its children. Empty for a run that waits for nothing in particular.

        Checked when a run is shown rather than at ``defer``, where reading the workers would
        cost every call. A worker is live when the registry has it alive with a heartbeat
        within its lease; a draining one claims nothing more.
        """
        self._c.read()
        if run.state not in PENDING:
            return explain(run, [], self._c.now())
        now = self._c.now()
        workers = await self._c.store.list_workers(now, namespace=run.namespace)
        return explain(run, workers, now, await self._limits(run, now))

    async def _limits(self, run: Run, now: float) -> Limits:
        """The run's limits as far as they are known, with the count of active runs under
        its concurrency key when it is due and has one."""
        known = self._sizes(run)
        if run.limit_key is None or run.eta > now:
            return known
        return replace(known, running=await self._active(run, known.limit_max))

    def _sizes(self, run: Run) -> Limits:
        """The sizes of the run's limits: from the run record when it holds them, else from
        the task's policy when this app registers the task (its keys came from it: ``using``
        changes routing only); unknown otherwise."""
        limit_max = _optional_int(run, "limit_max")
        rate_max = _optional_int(run, "rate_max")
        rate_period = _optional_float(run, "rate_period")
        task = self._c.app.tasks.get(run.task)
        if task is not None:
            policy = task.policy.limits
            if limit_max is None and run.limit_key is not None:
                limit_max = policy.concurrency or 1  # a key without a number means one
            if rate_max is None and run.rate_key is not None and policy.rate is not None:
                rate_max, rate_period = policy.rate.max, policy.rate.period
        return Limits(limit_max=limit_max, rate_max=rate_max, rate_period=rate_period)

    async def _active(self, run: Run, enough: int | None) -> int:
        """Runs of the run's concurrency key running or cancelling now (counted up to
        ``enough`` when known, else up to :data:`_COUNT_MOST`). A key is built from the
        namespace and the task, so only the task's active runs are read."""
        count, before = 0, None
        for _ in range(_COUNT_MOST // _COUNT_PAGE):
            wanted = RunFilter(
                states=tuple(ACTIVE),
                task=run.task,
                namespace=run.namespace,
                limit=_COUNT_PAGE,
                before_id=before,
            )
            found = await self._c.store.list_runs(wanted)
            count += sum(1 for r in found if r.limit_key == run.limit_key)
            if len(found) < _COUNT_PAGE or (enough is not None and count >= enough):
                break
            before = found[-1].id
        return count

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
        return self._redact.run(changed)

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
        return self._redact.run(await self._c.store.get_run(run.id))

    async def purge(
        self,
        older_than: float | str,
        states: Sequence[RunState | str] | None = None,
        *,
        limit: int = PURGE_LIMIT,
    ) -> PurgeResult:
        """Remove finished runs that ended ``older_than`` ago or earlier (seconds, or like
        ``"1d"``, ``"12h"``; 0: all of them), of ``states`` (default every finished state), at
        most ``limit``: call again while the result is not ``done``. Admins only; see
        :mod:`.retention`."""
        return await purge_runs(self._c, older_than, states, limit)

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
        broadcast: bool | Sequence[str] | None = None,
        shards: int | None = None,
    ) -> DeferResult:
        """Create a run of a task of the app, in this namespace; the arguments are checked
        against the task's function before anything is stored. A known idempotency key
        returns the run it created (``created=False``). ``broadcast`` (True, or labels) or
        ``shards`` (a count) make it a fan-out parent, as ``task.defer`` does."""
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
        fanout = check_fanout(broadcast, shards)
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
                namespace=self._c.namespace,  # limit keys are built with the namespace
                fanout=fanout,
            )
        (done,) = await self._c.store.defer([new], self._c.now())
        # The store looks a key up in the run's namespace only, so the run is this one's.
        run = await self._c.store.get_run(done.id)
        if done.created:
            await self._c.audit("runs.defer", run.id, {"task": run.task, "queue": run.queue})
        return DeferResult(run=self._redact.run(run), created=done.created)


def retryable_states() -> str:
    """``cancelled or dead``: the states a run can be retried from, in words."""
    return " or ".join(sorted(s.value for s in RETRYABLE))


def _child_start(after_index: object, cursor: str | None) -> int | None:
    """Where a page of children starts: after ``after_index`` or at ``cursor``, not both."""
    if cursor is not None:
        if after_index is not None:
            raise InvalidArgumentError(
                "give after or cursor, not both: the cursor already says where the page starts",
                field="cursor",
            )
        index: int = decode_cursor(cursor, _CHILD_CURSOR)["i"]
        return index
    if after_index is None:
        return None
    if isinstance(after_index, bool) or not isinstance(after_index, int):
        raise InvalidArgumentError(
            f"after must be a child index (a whole number), got {shorten(after_index)}",
            field="after",
        )
    if not -1 <= after_index <= ID_LIMIT:
        raise InvalidArgumentError(
            f"after must be a child index from -1 to {ID_LIMIT}, got {after_index}",
            field="after",
        )
    return after_index


def _child_position(run: Run) -> dict[str, int]:
    # The reduce run has no index but comes last, so no page ends before it with more to read.
    return {"i": run.child_index if run.child_index is not None else ID_LIMIT}


def _optional_int(run: Run, name: str) -> int | None:
    """A limit's size from the run record, when the record has the field."""
    value = getattr(run, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_float(run: Run, name: str) -> float | None:
    value = getattr(run, name, None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _time(value: float | None, field: str) -> float | None:
    if value is None:
        return None
    with naming(field):
        return check_time(value, field)
