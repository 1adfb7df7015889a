"""A cronbus API server as services: :class:`RemoteServices` has the attributes and methods of
:class:`cronbus.services.Services` (``runs.list``, ``jobs.pause``...) and returns the same
records, so a front end written against one works against the other unchanged (the CLI's
``--url`` is that).

::

    async with RemoteServices("http://127.0.0.1:8787", token, "shop") as services:
        page = await services.runs.list(RunQuery(states=[RunState.DEAD]), limit=20)
        await services.runs.retry(page.items[0].id)

Errors come back as the same exceptions (:mod:`cronbus.errors`), built from the server's
problem details: a 404 is a :class:`~cronbus.errors.NotFoundError` with the server's message.
"""

from __future__ import annotations

from types import TracebackType

import httpx

from .admin import RemoteNamespaces, RemoteTokens
from .connectors import RemoteConnectors
from .dead_letters import RemoteDeadLetters
from .http import ServerUnreachableError, Transport
from .jobs import RemoteJobs
from .runs import RemoteRuns
from .subscriptions import RemoteSubscriptions
from .topics import RemoteTopics
from .workers import RemoteWorkers

__all__ = ["RemoteServices", "ServerUnreachableError"]


class RemoteServices:
    """The services of a cronbus API at ``url``, for ``token``, in ``namespace`` (None: the
    server's choice, the token's only namespace or ``default``)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        namespace: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.http = Transport(url, token, namespace, transport=transport)
        self.runs = RemoteRuns(self.http)
        """Runs: list, show, children, cancel, retry, defer."""
        self.jobs = RemoteJobs(self.http)
        """Jobs: list, get, create, update, delete, pause, resume, trigger, next_fires."""
        self.dead_letters = RemoteDeadLetters(self.http)
        """Dead runs and deliveries: list, requeue, purge."""
        self.workers = RemoteWorkers(self.http)
        """Workers: list, get, drain, unknown_tasks (prune works on the store only)."""
        self.topics = RemoteTopics(self.http)
        """Topics: list, get, publish, read, set_retention."""
        self.subscriptions = RemoteSubscriptions(self.http)
        """Subscriptions: list, get, create, update, delete, pause, resume, replay,
        deliveries, delivery."""
        self.connectors = RemoteConnectors(self.http)
        """Connectors: list, get, create, pause, resume, stop, restart, remove, dead_records."""
        self.tokens = RemoteTokens(self.http)
        """API tokens (admin): create, list, revoke."""
        self.namespaces = RemoteNamespaces(self.http)
        """Namespaces: list, create, delete (admin)."""

    def __repr__(self) -> str:
        return f"<RemoteServices url={self.url!r} namespace={self.namespace!r}>"

    async def aclose(self) -> None:
        """Close the connections to the server."""
        await self.http.aclose()

    async def __aenter__(self) -> RemoteServices:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
