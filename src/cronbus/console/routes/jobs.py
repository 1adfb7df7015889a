"""Console section: jobs.

``/jobs`` lists the namespace's jobs with their trigger, their next fire and a strip of their
latest outcomes (read for the whole page in one store call, shared by every open tab for a
couple of seconds); ``/jobs/{name}`` shows one job: its definition, its next ten fires in its
own time zone and its latest runs. Writers pause, resume and trigger jobs from both. Job names
may hold ``/``: the name is the rest of the path, as in the HTTP API.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Form, Request, Response

from ...job_views import describe, job_state, planned_fire, zone_of
from ...model import Job
from ...states import RunState
from ..cache import shared
from ..search import RunSearch
from ..search import format as format_search
from ..session import Console, Session
from ..templates import page, query
from .common import console_router, done, safe_next

router = console_router()

PAGE_SIZE = 50
"""Jobs per page of ``/jobs``."""
STRIP = 10
"""Latest runs shown per job in the outcome strip."""
STRIP_TTL = 2.0
"""Seconds the strips of a page of jobs are shared by every tab showing that page."""
HISTORY = 20
"""Latest runs shown on a job's page."""
FIRES = 10
"""Next fire times shown on a job's page."""
REDACTED = "[redacted]"


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as a row of ``#jobs``: where it stands and its latest runs (newest first)."""

    job: Job
    href: str
    state: str
    schedule: str
    next_fire: float | None
    recent: list[tuple[int, RunState]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PlannedFire:
    """One coming fire: the instant (epoch seconds) and its wall time in the job's zone."""

    at: float
    local: dt.datetime

    @property
    def local_iso(self) -> str:
        """The wall time with its UTC offset, e.g. ``2026-03-30T06:00:00+02:00``."""
        return self.local.isoformat(timespec="seconds")

    @property
    def local_text(self) -> str:
        """The wall time for people, with the zone's abbreviation (``CEST``)."""
        return self.local.strftime("%Y-%m-%d %H:%M:%S %Z")


def job_href(name: str) -> str:
    """The path of a job's page (its name quoted, its slashes kept)."""
    return "/jobs/" + quote(name, safe="/")


def runs_href(name: str) -> str:
    """The runs page searching for a job's runs."""
    return "/runs?q=" + quote(format_search(RunSearch(job=name)), safe="")


def _here(request: Request, path: str) -> str:
    """``path`` with the request's query, minus what only the last change's redirect said."""
    rest = query(request, notice=None, triggered=None)
    return path if rest == "?" else path + rest


def _triggered(request: Request) -> int | None:
    """The run the last "trigger now" made, to link to (from the redirect's query)."""
    value = request.query_params.get("triggered", "")
    return int(value) if value.isdigit() and len(value) < 20 else None


async def _recent(session: Session, jobs: Sequence[Job]) -> dict[int, list[tuple[int, RunState]]]:
    """The latest runs of each of ``jobs`` (newest first), in one store call shared by every
    tab showing the same jobs for :data:`STRIP_TTL` seconds."""
    if not jobs:
        return {}
    store = session.services.context.store
    ids = tuple(sorted(job.id for job in jobs))
    # The store itself, not its id: a closed store's id may be reused by a new one.
    key = ("jobs.recent", store, session.namespace, ids)
    return await shared(key, STRIP_TTL, lambda: session.services.jobs.recent_outcomes(jobs, STRIP))


def _row(job: Job, recent: dict[int, list[tuple[int, RunState]]]) -> JobRow:
    return JobRow(
        job=job,
        href=job_href(job.name),
        state=job_state(job),
        schedule=describe(job),
        next_fire=planned_fire(job),
        recent=list(recent.get(job.id, [])),
    )


@router.get("/jobs")
async def jobs_page(request: Request, session: Console, cursor: str | None = None) -> Response:
    """The namespace's jobs by name, a page at a time, with their latest outcomes."""
    found = await session.services.jobs.list(limit=PAGE_SIZE, cursor=cursor or None)
    recent = await _recent(session, found.items)
    return page(
        request,
        session,
        "jobs.html",
        partial="_jobs_table.html",
        title="Jobs",
        nav="jobs",
        rows=[_row(job, recent) for job in found.items],
        next_cursor=found.next,
        paged=bool(cursor),
        here=_here(request, "/jobs"),
        triggered=_triggered(request),
    )


def _payload(session: Session, text: str) -> str:
    """A job's stored arguments as indented JSON, or ``[redacted]`` for a token that may not
    read payloads (the rule runs follow)."""
    if not session.sees_payloads:
        return REDACTED
    value: Any = json.loads(text)
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@router.get("/jobs/{name:path}")
async def job_page(request: Request, session: Console, name: str) -> Response:
    """One job: its definition, its next fires in its time zone, its latest runs."""
    services = session.services
    job = await services.jobs.get(name)
    zone = zone_of(job)
    fires = [
        PlannedFire(at=at, local=dt.datetime.fromtimestamp(at, zone))
        for at in await services.jobs.next_fires(job.name, FIRES)
    ]
    runs = await services.jobs.recent_runs(job.name, HISTORY)
    href = job_href(job.name)
    return page(
        request,
        session,
        "job.html",
        partial="_job_detail.html",
        title=f"Job {job.name}",
        nav="jobs",
        row=_row(job, {job.id: [(run.id, run.state) for run in runs]}),
        zone=str(zone),
        fires=fires,
        runs=runs,
        args=_payload(session, job.spec.args_json),
        kwargs=_payload(session, job.spec.kwargs_json),
        all_runs=runs_href(job.name),
        here=_here(request, href),
        triggered=_triggered(request),
    )


Next = Annotated[str, Form()]


@router.post("/jobs/{name:path}/pause")
async def pause_job(session: Console, name: str, next: Next = "") -> Response:
    """Stop a job from firing until it is resumed."""
    job = await session.services.jobs.pause(name)
    return done(safe_next(next, job_href(job.name)), f"Paused {job.name}")


@router.post("/jobs/{name:path}/resume")
async def resume_job(session: Console, name: str, next: Next = "") -> Response:
    """Let a paused job fire again, from its first fire after now."""
    job = await session.services.jobs.resume(name)
    fire = planned_fire(job)
    when = (
        dt.datetime.fromtimestamp(fire, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if fire is not None
        else "none planned"
    )
    return done(safe_next(next, job_href(job.name)), f"Resumed {job.name}: next fire {when}")


@router.post("/jobs/{name:path}/trigger")
async def trigger_job(session: Console, name: str, next: Next = "") -> Response:
    """Fire a job once now, outside its schedule; the notice links to the new run."""
    run = await session.services.jobs.trigger(name)
    where = safe_next(next, job_href(name))
    where += ("&" if "?" in where else "?") + f"triggered={run.id}"
    return done(where, f"Triggered {name}: run {run.id}")
