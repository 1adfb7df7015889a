"""``/v1/runs`` as the runs service's methods: list, get, show, children, cancel, retry,
purge, defer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..model import Run
from ..services import DeferResult, RunDetail, RunQuery
from ..services.pages import DEFAULT_LIMIT, Page
from ..services.retention import PURGE_LIMIT, PurgeResult
from ..states import RunState
from .http import Transport, decode
from .pages import page


class RemoteRuns:
    """Runs of one namespace, on a server (the methods of
    :class:`~cronbus.services.runs.RunsService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(
        self, query: RunQuery | None = None, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[Run]:
        """Runs matching ``query``, newest first, a page at a time."""
        query = query or RunQuery()
        params = {
            "state": [str(state) for state in query.states],
            "task": query.task,
            "queue": query.queue,
            "job": query.job,
            "created_after": query.created_after,
            "created_before": query.created_before,
            "limit": limit,
            "cursor": cursor,
        }
        return page(Run, await self._http.get("/v1/runs", params))

    async def get(self, run_id: int) -> Run:
        """One run."""
        detail = await self.show(run_id)
        return detail.run

    async def show(self, run_id: int) -> RunDetail:
        """A run with its attempts, the runs it spawned, and why it may wait for ever."""
        return decode(RunDetail, await self._http.get(f"/v1/runs/{int(run_id)}"))

    async def children(
        self,
        run_id: int,
        after_index: int | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Page[Run]:
        """A parent's children by index, its reduce run last, a page at a time."""
        params = {"after": after_index, "limit": limit, "cursor": cursor}
        return page(Run, await self._http.get(f"/v1/runs/{int(run_id)}/children", params))

    async def cancel(self, run_id: int) -> Run:
        """Cancel a run (``cancelled``, or ``cancelling`` while its worker stops it)."""
        return decode(Run, await self._http.post(f"/v1/runs/{int(run_id)}/cancel"))

    async def retry(self, run_id: int) -> Run:
        """Queue a dead or cancelled run again, with a fresh retry budget."""
        return decode(Run, await self._http.post(f"/v1/runs/{int(run_id)}/retry"))

    async def purge(
        self,
        older_than: float | str,
        states: Sequence[RunState | str] | None = None,
        *,
        limit: int = PURGE_LIMIT,
    ) -> PurgeResult:
        """Remove finished runs older than an age (admins only); call again until ``done``."""
        body: dict[str, Any] = {"older_than": older_than, "limit": limit}
        if states is not None:
            body["states"] = [str(state) for state in states]
        return decode(PurgeResult, await self._http.post("/v1/runs/purge", body))

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
        """Create a run of a task of the server's app."""
        body = {
            "task": task,
            "args": list(args),
            "kwargs": dict(kwargs or {}),
            "queue": queue,
            "delay": delay,
            "eta": eta.timestamp() if isinstance(eta, datetime) else eta,
            "priority": priority,
            "idempotency_key": idempotency_key,
            "broadcast": list(broadcast) if isinstance(broadcast, Sequence) else broadcast,
            "shards": shards,
        }
        sent = {key: value for key, value in body.items() if value is not None}
        return decode(DeferResult, await self._http.post("/v1/runs", sent))
