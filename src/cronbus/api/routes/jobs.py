"""``/v1/jobs``: create, read, update, delete, pause, resume, trigger now, next fire times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Query, Request, Response

from ...model import Job, Run
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import JobChanges, JobCreate, changes, job_options
from .common import Name, router

jobs = router("jobs")

Force = Annotated[
    bool,
    Query(description="Change or delete a job defined in code (its next sync restores it)."),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class NextFires:
    """A job's next fire times (epoch seconds), as its trigger plans them."""

    name: str
    fires: list[float]


@jobs.get("/jobs", summary="List jobs", response_model=PageOut[Job])
async def list_jobs(
    request: Request,
    response: Response,
    services: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Jobs of the namespace, by name."""
    return page_body(request, response, await services.jobs.list(limit=limit, cursor=cursor))


@jobs.post("/jobs", summary="Create a job", status_code=201, responses=responses(404, 409))
async def create_job(body: JobCreate, response: Response, services: Caller) -> Job:
    """A new job: its task (registered in the app), one trigger and its options."""
    job = await services.jobs.create(body.name, body.task, job_options(body))
    response.headers["Location"] = f"/v1/jobs/{job.name}"
    return job


@jobs.post("/jobs/{name:path}/pause", summary="Pause a job", responses=responses(404))
async def pause_job(name: Name, services: Caller) -> Job:
    """Stop the job from firing until it is resumed."""
    return await services.jobs.pause(name)


@jobs.post("/jobs/{name:path}/resume", summary="Resume a job", responses=responses(404))
async def resume_job(name: Name, services: Caller) -> Job:
    """Let a paused job fire again, from its first fire after now."""
    return await services.jobs.resume(name)


@jobs.post(
    "/jobs/{name:path}/trigger", summary="Run a job now", status_code=201, responses=responses(404)
)
async def trigger_job(name: Name, response: Response, services: Caller) -> Run:
    """Fire the job once now, outside its schedule; returns the new run."""
    run = await services.jobs.trigger(name)
    response.headers["Location"] = f"/v1/runs/{run.id}"
    return run


@jobs.get("/jobs/{name:path}/next", summary="A job's next fire times", responses=responses(404))
async def next_fires(
    name: Name,
    services: Caller,
    count: Annotated[int, Query(ge=1, le=1000, description="How many fire times.")] = 10,
) -> NextFires:
    """The next fire times (epoch seconds); none for a paused or finished job."""
    return NextFires(name=name, fires=await services.jobs.next_fires(name, count))


@jobs.get("/jobs/{name:job}", summary="Show a job", responses=responses(404))
async def get_job(name: Name, services: Caller) -> Job:
    """One job with where its schedule stands."""
    return await services.jobs.get(name)


@jobs.patch("/jobs/{name:job}", summary="Change a job", responses=responses(404, 409))
async def update_job(name: Name, body: JobChanges, services: Caller, force: Force = False) -> Job:
    """Change the options given (the others stay); a new trigger is given whole."""
    return await services.jobs.update(name, changes(body), force=force)


@jobs.delete("/jobs/{name:job}", summary="Delete a job", responses=responses(404, 409))
async def delete_job(name: Name, services: Caller, force: Force = False) -> Job:
    """Delete a job (its runs stay); returns it as it was."""
    return await services.jobs.delete(name, force=force)
