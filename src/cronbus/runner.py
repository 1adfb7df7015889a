"""Running roles in a process until a signal: what ``cronbus server``, ``worker``,
``scheduler`` and ``dispatcher`` do.

SIGTERM or SIGINT stops the scheduler and the dispatcher (pushes in flight get their timeout to
end, then the leases are let go) and drains the worker (claim nothing more, let running
attempts finish within the grace period, requeue the rest); a second signal ends the grace.
An operator's drain of the process's worker (``cronbus workers drain ID``) stops it the same
way: the worker drains, then every other role stops, and the process exits with status 0.

A thread task blocked outside Python code cannot be interrupted: it is abandoned, and
:func:`serve` returns how many are still running, so that the command line can end the process
at once instead of waiting for them (Python waits for such threads at exit).

While the roles run, the store is checked every heartbeat (every few seconds at most): an
SQLite file deleted, replaced or overwritten under the process is logged as an error, the roles
stop at once, and :func:`serve` raises :class:`~cronbus.store.StoreFaultError`, so the process
exits non-zero rather than working on a file that no other process sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Sequence
from typing import Protocol

from .app import App
from .connectors.allow import Reach
from .connectors.runtime import ConnectorRuntime
from .events.dispatcher import Dispatcher
from .fairness import EVERY_QUEUE
from .scheduler import Scheduler
from .store import Store, StoreFaultError
from .worker.engine import Worker

log = logging.getLogger("cronbus.runner")
CHECK_SECONDS = 5.0
"""The longest time between two checks of the store (shorter when heartbeats are)."""
FAULT_STOP_SECONDS = 10.0
"""How long roles get to stop after a store fault before they are cancelled."""


class Chore(Protocol):
    """Housekeeping for the whole store that one process of the cluster does at a time, under
    a role lease: :class:`~cronbus.observability.retention.Retention` and
    :class:`~cronbus.observability.alerts.engine.AlertEngine`."""

    async def run(self, stop: asyncio.Event) -> None:
        """Do the chore whenever this process holds its lease, until ``stop`` is set."""


class ApiRole(Protocol):
    """A server of the HTTP API run beside the other roles (``cronbus server``):
    :class:`cronbus.api.serving.ApiServer`, kept abstract so workers need not import it."""

    async def serve(self) -> None:
        """Serve until :meth:`stop`."""

    def stop(self, *, hurry: bool = False) -> None:
        """Stop serving (at once with ``hurry``)."""


async def serve(
    app: App,
    *,
    queues: str | Sequence[str] = EVERY_QUEUE,
    concurrency: int | None = None,
    startup: bool = True,
    worker: bool = True,
    scheduler: bool = False,
    dispatcher: bool = False,
    labels: Sequence[str] = (),
    install_signals: bool = True,
    api: ApiRole | None = None,
    name: str | None = None,
    connectors: bool = True,
    metrics: socket.socket | None = None,
    chores: bool = True,
) -> int:
    """Open ``app`` and run the chosen roles until a stop signal, then close it. A worker
    also runs connector tasks unless ``connectors`` is False. ``metrics`` is a listening
    socket to serve ``/metrics`` on (:func:`cronbus.observability.exposition.listen_metrics`).
    With ``chores``, the process also takes its turn at retention and alert evaluation: each
    runs in one process of the cluster at a time, whichever holds its lease.

    Returns the number of thread tasks the worker abandoned that are still running.
    """
    async with app, _metrics_served(app, metrics):
        working = (
            Worker(app, queues=queues, concurrency=concurrency, labels=labels, name=name)
            if worker
            else None
        )
        roles = Roles(
            worker=working,
            scheduler=Scheduler(app) if scheduler else None,
            dispatcher=Dispatcher(app) if dispatcher else None,
            connectors=_connectors(app, working) if connectors and working is not None else None,
            store=app.store,
            check_seconds=min(CHECK_SECONDS, app.settings.heartbeat_seconds),
            api=api,
            chores=_chores(app) if chores else (),
        )
        if install_signals:
            _on_signals(roles)
        before = asyncio.all_tasks()
        started: set[asyncio.Task[object]] = set()
        try:
            if startup:
                await app.run_startup_hooks()
                started = asyncio.all_tasks() - before
            await roles.run()
        finally:
            await _cancel(started)
    return roles.worker.abandoned if roles.worker is not None else 0


class Roles:
    """The roles one process runs, started and stopped together."""

    def __init__(
        self,
        *,
        worker: Worker | None,
        scheduler: Scheduler | None,
        dispatcher: Dispatcher | None = None,
        connectors: ConnectorRuntime | None = None,
        store: Store | None = None,
        check_seconds: float = CHECK_SECONDS,
        api: ApiRole | None = None,
        chores: Sequence[Chore] = (),
    ) -> None:
        self.worker = worker
        self.api = api
        self.chores = tuple(chores)
        self.scheduler = scheduler
        self.dispatcher = dispatcher
        self.connectors = connectors
        self.store = store
        """The store checked every ``check_seconds`` while the roles run (None: unchecked)."""
        self.check_seconds = check_seconds
        self._stop_dispatching = asyncio.Event()
        self._stopping = False
        """True once :meth:`stop` was called (a signal, a store fault, the worker's end)."""

    async def run(self) -> None:
        """Run every role until all have stopped; raise :class:`StoreFaultError` (after
        stopping them) if the store is found gone or unreadable meanwhile."""
        # Everything loaded so far (modules, the app, the store) lives as long as the process:
        # moved out of the collector's sight, it is not walked by every full collection, which
        # otherwise paused the first seconds of work by 10-20 ms.
        gc.collect()
        gc.freeze()
        roles = asyncio.ensure_future(self._run_roles())
        if self.store is None:
            await roles
            return
        watching = asyncio.ensure_future(self._watch(self.store))
        try:
            await asyncio.wait({roles, watching}, return_when=asyncio.FIRST_COMPLETED)
            if roles.done():
                roles.result()  # a role's failure, raised
                return
            fault = watching.result()
            log.error("%s; stopping", fault, extra={"action": "store.fault"})
            self.stop()
            if self.worker is not None:
                # At once: what running attempts would still write goes to a file no one sees.
                # The API is not hurried: uvicorn's forced exit skips the app's lifespan
                # shutdown, whose task is then cancelled as the loop closes and logged as an
                # error with a traceback; its requests fail fast on the missing store anyway.
                self.worker.request_stop(hurry=True)
            await asyncio.wait({roles}, timeout=FAULT_STOP_SECONDS)
            raise fault
        finally:
            watching.cancel()
            roles.cancel()
            await asyncio.gather(watching, roles, return_exceptions=True)

    async def _run_roles(self) -> None:
        running = [self.scheduler.run()] if self.scheduler is not None else []
        if self.worker is not None:
            running.append(self._work(self.worker))
        if self.dispatcher is not None:
            running.append(self.dispatcher.run(self._stop_dispatching))
        if self.connectors is not None:
            running.append(self.connectors.run(self._stop_dispatching))
        if self.api is not None:
            running.append(self.api.serve())
        running.extend(chore.run(self._stop_dispatching) for chore in self.chores)
        await asyncio.gather(*running)

    async def _work(self, worker: Worker) -> None:
        """Run the worker; when it stops, stop the other roles too.

        A worker stops on its own when an operator asks it to drain (``cronbus workers drain
        ID``, ``POST /v1/workers/{id}/drain``): its heartbeat sees the request and it drains as
        on SIGTERM. In ``cronbus server`` the worker is one role of one process, so draining
        it means stopping the process: every other role is stopped the way SIGTERM stops it,
        and the command exits with status 0. After a signal, the others are stopping already
        and this changes nothing."""
        try:
            await worker.run()
        finally:
            others = (self.scheduler, self.dispatcher, self.connectors, self.api)
            if any(role is not None for role in others) and not self._stopping:
                log.info(
                    "worker %s stopped: stopping the other roles of this process",
                    worker.id,
                    extra={"action": "process.stop"},
                )
            self.stop()

    async def _watch(self, store: Store) -> StoreFaultError:
        """Check the store every ``check_seconds`` until it fails; return its fault."""
        while True:
            await asyncio.sleep(self.check_seconds)
            try:
                await store.check()
            except StoreFaultError as fault:
                return fault
            except Exception:
                # Not a fault of the store's identity (a busy file, say): the roles see and
                # retry those themselves.
                log.warning("checking the store failed; checking again", exc_info=True)

    def stop(self, *, hurry: bool = False) -> None:
        """Stop the scheduler, the dispatcher and the API, and drain the worker (at once with
        ``hurry``)."""
        self._stopping = True
        self._stop_dispatching.set()
        if self.api is not None:
            self.api.stop(hurry=hurry)
        if self.scheduler is not None:
            self.scheduler.request_stop()
        if self.worker is not None:
            self.worker.request_stop(hurry=hurry)


def _metrics_served(
    app: App, sock: socket.socket | None
) -> contextlib.AbstractAsyncContextManager[object]:
    """Serve ``/metrics`` on ``sock`` (if any) while the roles run."""
    if sock is None:
        return contextlib.nullcontext()
    # Imported here: a process without a metrics port never loads prometheus_client for it.
    from .observability.exposition import served

    return served(app, sock)


def _chores(app: App) -> list[Chore]:
    """Retention and alert evaluation for ``app``'s store (bad alert settings fail here, before
    any role starts)."""
    from .observability.alerts.engine import AlertEngine
    from .observability.retention import Retention

    return [Retention.for_app(app), AlertEngine(app)]


def _connectors(app: App, worker: Worker) -> ConnectorRuntime:
    """The connector runtime of a worker process: it holds tasks under the worker's id, so
    ``connectors show`` names the same worker as ``workers list``."""
    return ConnectorRuntime(
        app.store,
        app.connector_kinds,
        app.clock,
        holder=worker.id,
        lease_seconds=app.settings.connector_lease_seconds,
        poll_seconds=min(1.0, app.settings.poll_seconds),
        reach=Reach.of(app),
    )


async def _cancel(tasks: set[asyncio.Task[object]]) -> None:
    """Stop what startup hooks left running, before the store they use closes (and nothing
    else: the store's own tasks are the store's to stop)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _on_signals(roles: Roles) -> None:
    loop = asyncio.get_running_loop()
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        if received == 1:
            log.info("received %s: stopping", signal.Signals(signum).name)
            roles.stop()
        else:
            log.info("second signal: requeueing running attempts now")
            roles.stop(hurry=True)

    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, handle, signum)


def run(
    app: App,
    *,
    queues: str | Sequence[str] = EVERY_QUEUE,
    concurrency: int | None = None,
    startup: bool = True,
    worker: bool = True,
    scheduler: bool = False,
    dispatcher: bool = False,
    labels: Sequence[str] = (),
    api: ApiRole | None = None,
    name: str | None = None,
    connectors: bool = True,
    metrics: socket.socket | None = None,
) -> int:
    """Blocking form of :func:`serve`, with signal handlers; returns what ``serve`` returns."""
    return asyncio.run(
        serve(
            app,
            queues=queues,
            concurrency=concurrency,
            startup=startup,
            worker=worker,
            scheduler=scheduler,
            dispatcher=dispatcher,
            labels=labels,
            api=api,
            name=name,
            connectors=connectors,
            metrics=metrics,
        )
    )
