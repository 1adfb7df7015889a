"""``/v1/connectors`` as the connectors service's methods: list, get, create, pause, resume,
stop, restart, remove, dead_records (records rebuilt from JSON; configs masked, as the service
shows them)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from ..connectors.records import DeadRecord
from ..services.connectors import ConnectorView
from ..services.context import naming
from ..services.pages import MAX_LIMIT, encode_cursor
from ..validation import check_int
from .http import Transport, decode
from .pages import page

DEAD_RECORDS_MAX = 1000
"""The most dead records one call returns (as the service)."""


class RemoteConnectors:
    """Connectors of one namespace, on a server (the methods of
    :class:`~cronbus.services.connectors.ConnectorsService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(self) -> builtins.list[ConnectorView]:
        """Every connector of the namespace, by name."""
        return page(ConnectorView, await self._http.get("/v1/connectors")).items

    async def get(self, name: str) -> ConnectorView:
        """One connector with its tasks."""
        return decode(ConnectorView, await self._http.get(_path(name)))

    async def create(
        self,
        name: str,
        kind: str,
        config: Mapping[str, Any],
        *,
        tolerance: str = "none",
        max_tasks: int = 1,
    ) -> ConnectorView:
        """Create a connector; the same definition again is a no-op (``created`` False),
        another under the same name a conflict."""
        body = {
            "name": name,
            "kind": kind,
            "config": dict(config),
            "tolerance": tolerance,
            "max_tasks": max_tasks,
        }
        return decode(ConnectorView, await self._http.post("/v1/connectors", body))

    async def pause(self, name: str) -> ConnectorView:
        """Pause every task (they keep their positions)."""
        return decode(ConnectorView, await self._http.post(_path(name) + "/pause"))

    async def resume(self, name: str) -> ConnectorView:
        """Resume paused or stopped tasks."""
        return decode(ConnectorView, await self._http.post(_path(name) + "/resume"))

    async def stop(self, name: str) -> ConnectorView:
        """Stop every task until resumed (they keep their positions)."""
        return decode(ConnectorView, await self._http.post(_path(name) + "/stop"))

    async def restart(self, name: str, task: int | None = None) -> ConnectorView:
        """Restart every task (or one) from their committed positions."""
        body = None if task is None else {"task": task}
        return decode(ConnectorView, await self._http.post(_path(name) + "/restart", body))

    async def remove(self, name: str) -> None:
        """Delete the connector, its tasks, positions and dead records."""
        await self._http.delete(_path(name))

    async def dead_records(
        self, name: str, limit: int = 100, before: int | None = None
    ) -> builtins.list[DeadRecord]:
        """The connector's dead records, newest first (below id ``before``), read a page at a
        time."""
        with naming("limit"):
            limit = check_int(limit, "limit", low=1, high=DEAD_RECORDS_MAX)
        # The server's dead-records cursor is the id the listing goes on below.
        cursor = None if before is None else encode_cursor({"b": before})
        found: builtins.list[DeadRecord] = []
        while len(found) < limit:
            params = {"limit": min(MAX_LIMIT, limit - len(found)), "cursor": cursor}
            got = page(DeadRecord, await self._http.get(_path(name) + "/dead-records", params))
            found.extend(got.items)
            if got.next is None or not got.items:
                break
            cursor = got.next
        return found


def _path(name: str) -> str:
    return "/v1/connectors/" + quote(name, safe="")
