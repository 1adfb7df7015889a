"""``/v1/workers`` as the workers service's methods: list, get, drain, unknown_tasks (prune is
not served)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from urllib.parse import quote

from ..errors import ForbiddenError
from ..model import WorkerState
from ..services.views import WorkerView
from .http import Transport, decode
from .pages import page


class RemoteWorkers:
    """Workers of one namespace, on a server (the methods of
    :class:`~cronbus.services.workers.WorkersService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(
        self, states: Sequence[WorkerState | str] = (), include_stopped: bool = False
    ) -> builtins.list[WorkerView]:
        """Workers of the namespace, newest first, with the runs each holds."""
        params = {
            "state": [str(state) for state in states],
            "include_stopped": include_stopped or None,
        }
        return page(WorkerView, await self._http.get("/v1/workers", params)).items

    async def get(self, worker_id: str) -> WorkerView:
        """One worker with every run it holds."""
        return decode(WorkerView, await self._http.get(_path(worker_id)))

    async def drain(self, worker_id: str) -> WorkerView:
        """Ask a worker to drain at its next heartbeat."""
        return decode(WorkerView, await self._http.post(_path(worker_id) + "/drain"))

    async def unknown_tasks(self) -> builtins.list[str]:
        """Tasks of queued runs that no live worker knows, by name."""
        return page(str, await self._http.get("/v1/workers/unknown-tasks")).items

    async def prune(self, older_than: float = 86_400.0) -> builtins.list[str]:
        """Not served by the API: the registry is shared by every namespace, so its rows are
        pruned on the store itself (``cronbus workers prune --store ...``) or by workers."""
        raise ForbiddenError(
            "pruning worker rows is not offered through the API; run `cronbus workers prune` "
            "on the store (workers also prune rows silent for a day)"
        )


def _path(worker_id: str) -> str:
    return "/v1/workers/" + quote(worker_id, safe="")
