"""Running roles in a process until a signal: what ``cronbus worker`` and ``cronbus server`` do.

SIGTERM or SIGINT starts a drain (claim nothing more, let running attempts finish within the
grace period, requeue the rest); a second signal shortens the grace to nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence

from .app import App
from .worker.engine import Worker

log = logging.getLogger("cronbus.runner")


async def serve(
    app: App,
    *,
    queues: str | Sequence[str] = "default",
    concurrency: int | None = None,
    startup: bool = True,
    install_signals: bool = True,
) -> None:
    """Open ``app``, run its startup hooks and a worker until a stop signal, then close."""
    async with app:
        worker = Worker(app, queues=queues, concurrency=concurrency)
        if install_signals:
            _on_signals(worker)
        try:
            if startup:
                await app.run_startup_hooks()
            await worker.run()
        finally:
            await _cancel_background()


async def _cancel_background() -> None:
    """Stop what startup hooks left running, before the store they use closes."""
    current = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _on_signals(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        if received == 1:
            log.info("received %s: draining", signal.Signals(signum).name)
            worker.request_stop()
        else:
            log.info("second signal: requeueing running attempts now")
            worker.request_stop(hurry=True)

    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, handle, signum)


def run(
    app: App,
    *,
    queues: str | Sequence[str] = "default",
    concurrency: int | None = None,
    startup: bool = True,
) -> None:
    """Blocking form of :func:`serve`, with signal handlers."""
    asyncio.run(serve(app, queues=queues, concurrency=concurrency, startup=startup))
