"""Running roles in a process until a signal: what ``cronbus server``, ``worker``,
``scheduler`` and ``dispatcher`` do.

SIGTERM or SIGINT stops the scheduler and the dispatcher (pushes in flight get their timeout to
end, then the leases are let go) and drains the worker (claim nothing more, let running
attempts finish within the grace period, requeue the rest); a second signal ends the grace.

A thread task blocked outside Python code cannot be interrupted: it is abandoned, and
:func:`serve` returns how many are still running, so that the command line can end the process
at once instead of waiting for them (Python waits for such threads at exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Sequence

from .app import App
from .events.dispatcher import Dispatcher
from .scheduler import Scheduler
from .worker.engine import Worker

log = logging.getLogger("cronbus.runner")


async def serve(
    app: App,
    *,
    queues: str | Sequence[str] = "default",
    concurrency: int | None = None,
    startup: bool = True,
    worker: bool = True,
    scheduler: bool = False,
    dispatcher: bool = False,
    labels: Sequence[str] = (),
    install_signals: bool = True,
) -> int:
    """Open ``app`` and run the chosen roles until a stop signal, then close it.

    Returns the number of thread tasks the worker abandoned that are still running.
    """
    async with app:
        roles = Roles(
            worker=Worker(app, queues=queues, concurrency=concurrency, labels=labels)
            if worker
            else None,
            scheduler=Scheduler(app) if scheduler else None,
            dispatcher=Dispatcher(app) if dispatcher else None,
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
    ) -> None:
        self.worker = worker
        self.scheduler = scheduler
        self.dispatcher = dispatcher
        self._stop_dispatching = asyncio.Event()

    async def run(self) -> None:
        """Run every role until all have stopped."""
        # Everything loaded so far (modules, the app, the store) lives as long as the process:
        # moved out of the collector's sight, it is not walked by every full collection, which
        # otherwise paused the first seconds of work by 10-20 ms.
        gc.collect()
        gc.freeze()
        running = [role.run() for role in (self.scheduler, self.worker) if role is not None]
        if self.dispatcher is not None:
            running.append(self.dispatcher.run(self._stop_dispatching))
        await asyncio.gather(*running)

    def stop(self, *, hurry: bool = False) -> None:
        """Stop the scheduler and the dispatcher, and drain the worker (at once with
        ``hurry``)."""
        self._stop_dispatching.set()
        if self.scheduler is not None:
            self.scheduler.request_stop()
        if self.worker is not None:
            self.worker.request_stop(hurry=hurry)


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
    queues: str | Sequence[str] = "default",
    concurrency: int | None = None,
    startup: bool = True,
    worker: bool = True,
    scheduler: bool = False,
    dispatcher: bool = False,
    labels: Sequence[str] = (),
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
        )
    )
