"""Console section: runs.

``/runs`` searches runs with qualifiers (:mod:`..search`; the search stays in the URL and in
every link of the page) and pages through them newest first, the table refreshing itself when
the namespace's figures change; writers retry or cancel everything a search matches as one
background operation (``POST /runs/bulk``). ``/runs/{id}`` shows one run: its facts, its
arguments and result (as the services show them to this token: redacted where they must be),
why it waits, the timeline of its attempts with their errors, tracebacks and log tails, and its
first children; writers cancel or retry it there. The page refreshes itself until the run ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Form, Request, Response

from ...errors import CronbusError, InvalidArgumentError, RunNotFoundError
from ...model import Attempt, Run
from ...services.pages import MAX_LIMIT, Page
from ...services.runs import can_cancel, can_retry
from ...states import RunState
from ..cache import shared
from ..errors import status_of
from ..search import RunSearch, format, parse
from ..session import Console, Session
from ..templates import page, query
from .common import console_router, done

router = console_router()

PAGE_SIZE = 50
"""Runs per page of ``/runs`` and of a run's children."""
LIST_TTL = 2.0
"""Seconds a page of a search is shared by every tab showing it (one tick of the live feed)."""
JOBS_TTL = 5.0
"""Seconds the namespace's job names (for the job column) are shared by every tab."""
LOG_LINES = 200
"""Lines of an attempt's log shown until "show all" is asked for."""
_MOST_JOBS = 20
"""Pages of jobs read to name the runs' jobs (250 each: 5,000 jobs)."""
_BULK = {"retry": "runs.retry", "cancel": "runs.cancel"}
_BULK_STATES = {
    "retry": "dead or cancelled",
    "cancel": "scheduled, queued or running",
}


@dataclass(frozen=True, slots=True)
class AttemptView:
    """An attempt as the timeline shows it: its log tail and how many lines were left out."""

    attempt: Attempt
    logs: str
    cut: int

    @property
    def duration(self) -> float | None:
        """How long it ran (None while it runs)."""
        a = self.attempt
        return None if a.finished_at is None else a.finished_at - a.started_at


def tail(logs: str, lines: int | None) -> tuple[str, int]:
    """The last ``lines`` lines of ``logs`` (all of them for None), and how many were cut."""
    if lines is None:
        return logs, 0
    split = logs.splitlines()
    if len(split) <= lines:
        return logs, 0
    return "\n".join(split[-lines:]), len(split) - lines


def bulk_filter(search: RunSearch) -> dict[str, Any]:
    """The operation filter of a search (what it names only)."""
    q = search.query()
    found: dict[str, Any] = {}
    if q.states:
        found["states"] = [s.value for s in q.states]
    for name in ("task", "queue", "job", "id", "created_after", "created_before"):
        value = getattr(q, name)
        if value is not None:
            found[name] = value
    if q.args:
        found["args"] = [list(match) for match in q.args]
    return found


def _here(request: Request, path: str) -> str:
    """``path`` with the request's query, minus the last change's notice."""
    rest = query(request, notice=None)
    return path if rest == "?" else path + rest


def _run_id(value: str) -> int:
    """A run id from the path; anything else is a run that does not exist."""
    if not value.isdigit() or len(value) > 19:
        raise RunNotFoundError(f"no run has id {value!r}")
    return int(value)


async def _job_names(session: Session, runs: list[Run]) -> dict[int, str]:
    """Names of the jobs that fired ``runs`` (shared by every tab for :data:`JOBS_TTL`)."""
    if not any(run.job_id is not None for run in runs):
        return {}
    services = session.services

    async def names() -> dict[int, str]:
        found: dict[int, str] = {}
        cursor = None
        for _ in range(_MOST_JOBS):
            jobs = await services.jobs.list(limit=MAX_LIMIT, cursor=cursor)
            found.update((job.id, job.name) for job in jobs.items)
            if jobs.next is None:
                break
            cursor = jobs.next
        return found

    services.context.read()  # the shared value is only for those who may read it
    key = ("runs.job-names", services.context.store, session.namespace)
    return await shared(key, JOBS_TTL, names)


async def _search(session: Session, search: RunSearch, cursor: str | None) -> Page[Run]:
    """A page of a search, shared by every tab of the namespace showing it for
    :data:`LIST_TTL` seconds (tokens that may not see payloads share another copy)."""
    services = session.services
    services.context.read()
    key = (
        "runs.search",
        services.context.store,
        session.namespace,
        format(search),
        cursor,
        session.sees_payloads,
    )
    return await shared(
        key, LIST_TTL, lambda: services.runs.list(search.query(), PAGE_SIZE, cursor)
    )


@router.get("/runs")
async def runs_page(
    request: Request, session: Console, q: str = "", cursor: str | None = None
) -> Response:
    """Runs matching the search ``q``, newest first, a page at a time. A search that cannot
    be read (or that the services refuse) is said above the newest runs, unfiltered."""
    error = ""
    status = 200
    search = RunSearch()
    try:
        search = parse(q)
        found = await _search(session, search, cursor or None)
    except CronbusError as exc:
        error, status = str(exc), status_of(exc)
        search = RunSearch()
        found = await _search(session, search, None)
    described = format(search)
    return page(
        request,
        session,
        "runs.html",
        partial="_runs_table.html",
        status=status,
        title="Runs",
        nav="runs",
        q=q,
        error=error,
        described=described,
        bulk_states=_BULK_STATES,
        runs=found.items,
        jobs=await _job_names(session, found.items),
        next_cursor=found.next,
        paged=bool(cursor) and not error,
        here="/runs" if error else _here(request, "/runs"),
        first="/runs" + (f"?{urlencode({'q': q})}" if q and not error else ""),
    )


@router.post("/runs/bulk")
async def bulk(
    session: Console,
    action: Annotated[str, Form()] = "",
    q: Annotated[str, Form()] = "",
) -> Response:
    """Retry or cancel every run the search ``q`` matches (not only the page shown), as a
    background operation; on to its page."""
    kind = _BULK.get(action)
    if kind is None:
        raise InvalidArgumentError(
            f"action must be retry or cancel, got {action!r}", field="action"
        )
    search = parse(q)
    operation = await session.services.operations.start(kind, filter=bulk_filter(search))
    what = format(search) or "every run"
    return done(
        f"/operations/{operation.id}",
        f"Started operation {operation.id}: {action} of runs matching {what}",
    )


@router.get("/runs/{run_id}")
async def run_page(request: Request, session: Console, run_id: str, logs: str = "") -> Response:
    """One run: facts, arguments, result, why it waits, attempts and first children."""
    detail = await session.services.runs.show(_run_id(run_id))
    run = detail.run
    whole = logs == "all"
    attempts = []
    for attempt in detail.attempts:
        text, cut = tail(attempt.logs, None if whole else LOG_LINES)
        attempts.append(AttemptView(attempt=attempt, logs=text, cut=cut))
    jobs = await _job_names(session, [run])
    return page(
        request,
        session,
        "run.html",
        partial="_run.html",
        title=f"Run {run.id}",
        nav="runs",
        detail=detail,
        run=run,
        attempts=attempts,
        job_name=jobs.get(run.job_id) if run.job_id is not None else None,
        may_cancel=session.can_write and can_cancel(run),
        may_retry=session.can_write and can_retry(run),
        live=not run.state.terminal,
        here=_here(request, f"/runs/{run.id}"),
        log_lines=LOG_LINES,
        counts=_child_counts(run),
    )


def _child_counts(run: Run) -> list[tuple[str, int]]:
    """A fan-out parent's children by outcome, from its counters."""
    children = run.children
    if children is None:
        return []
    failed = children.ended - children.succeeded
    return [
        ("total", children.total),
        ("succeeded", children.succeeded),
        ("failed or cancelled", failed),
        ("not ended", children.total - children.ended),
    ]


@router.get("/runs/{run_id}/children")
async def children_page(
    request: Request, session: Console, run_id: str, cursor: str | None = None
) -> Response:
    """A fan-out parent's children by index, a page at a time."""
    parent = await session.services.runs.get(_run_id(run_id))
    found = await session.services.runs.children(parent.id, limit=PAGE_SIZE, cursor=cursor)
    return page(
        request,
        session,
        "run_children.html",
        partial="_run_children.html",
        title=f"Children of run {parent.id}",
        nav="runs",
        parent=parent,
        runs=found.items,
        jobs=await _job_names(session, found.items),
        next_cursor=found.next,
        paged=bool(cursor),
        here=_here(request, f"/runs/{parent.id}/children"),
        counts=_child_counts(parent),
    )


@router.post("/runs/{run_id}/cancel")
async def cancel(session: Console, run_id: str) -> Response:
    """Cancel a run: at once if it waits, by asking its worker if it runs."""
    run = await session.services.runs.cancel(_run_id(run_id))
    if run.state is RunState.CANCELLING:
        notice = f"Run {run.id} is cancelling: its worker was asked to stop it"
    else:
        notice = f"Run {run.id} is {run.state.value}"
    return done(f"/runs/{run.id}", notice)


@router.post("/runs/{run_id}/retry")
async def retry(session: Console, run_id: str) -> Response:
    """Queue a dead or cancelled run again, with a fresh retry budget."""
    run = await session.services.runs.retry(_run_id(run_id))
    return done(f"/runs/{run.id}", f"Run {run.id} is {run.state.value} again")
