"""``/v1/jobs`` as the jobs service's methods."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from ..job_specs import JobOptions
from ..model import Job, Run
from ..services.pages import DEFAULT_LIMIT, Page
from .http import Transport, decode
from .pages import page


class RemoteJobs:
    """Jobs of one namespace, on a server (the methods of
    :class:`~cronbus.services.jobs.JobsService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(self, limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> Page[Job]:
        """Jobs of the namespace by name, a page at a time."""
        return page(Job, await self._http.get("/v1/jobs", {"limit": limit, "cursor": cursor}))

    async def get(self, name: str) -> Job:
        """One job."""
        return decode(Job, await self._http.get(_path(name)))

    async def recent_runs(self, name: str, limit: int = 10) -> builtins.list[Run]:
        """The job's latest runs, newest first."""
        params = {"job": name, "limit": limit}
        found = page(Run, await self._http.get("/v1/runs", params))
        return found.items

    async def next_fires(self, name: str, count: int = 10) -> builtins.list[float]:
        """The job's next ``count`` fire times (epoch seconds)."""
        body = await self._http.get(_path(name) + "/next", {"count": count})
        return [float(t) for t in body.get("fires", [])] if isinstance(body, dict) else []

    async def create(self, name: str, task: str, options: JobOptions | None = None) -> Job:
        """Create a job running ``task`` (a task of the server's app) with ``options``."""
        given = _options(options or JobOptions(), only_set=True)
        return decode(Job, await self._http.post("/v1/jobs", {"name": name, "task": task, **given}))

    async def update(self, name: str, changes: Mapping[str, Any], force: bool = False) -> Job:
        """Change the options given; the others stay as they are."""
        body = {key: _json(value) for key, value in changes.items()}
        return decode(
            Job,
            await self._http.request(
                "PATCH", _path(name), params={"force": force or None}, body=body
            ),
        )

    async def delete(self, name: str, force: bool = False) -> Job:
        """Delete a job (its runs stay) and return it as it was."""
        return decode(Job, await self._http.delete(_path(name), {"force": force or None}))

    async def pause(self, name: str) -> Job:
        """Stop a job from firing until it is resumed."""
        return decode(Job, await self._http.post(_path(name) + "/pause"))

    async def resume(self, name: str) -> Job:
        """Let a paused job fire again."""
        return decode(Job, await self._http.post(_path(name) + "/resume"))

    async def trigger(self, name: str) -> Run:
        """Fire a job now, once, outside its schedule; returns the new run."""
        return decode(Run, await self._http.post(_path(name) + "/trigger"))


def _path(name: str) -> str:
    return "/v1/jobs/" + quote(name, safe="")


def _options(options: JobOptions, *, only_set: bool) -> dict[str, Any]:
    """The options that differ from their defaults, as JSON values."""
    defaults = JobOptions()
    return {
        item.name: _json(getattr(options, item.name))
        for item in dataclasses.fields(JobOptions)
        if not only_set or getattr(options, item.name) != getattr(defaults, item.name)
    }


def _json(value: Any) -> Any:
    """A job option as JSON: a naive time stays naive (the trigger reads it in its tz)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, tuple):
        return list(value)
    return value
