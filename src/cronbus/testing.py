"""Helpers for testing code that uses cronbus: a throwaway store, a fake clock, and a way to
execute due runs in the test's own process.

::

    from cronbus.testing import FakeClock, MEMORY_STORE, run_until_idle_async

    clock = FakeClock()
    app = App(store=MEMORY_STORE, clock=clock)   # or point an existing app at it
    async with app:
        await send_email.defer_async("a@example.com")
        await run_until_idle_async(app)           # raises RunFailedError if a run died
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from .app import App
from .handle import RunEndedError
from .model import ClaimRequest, QueueShare, Run
from .states import RunState
from .worker import capture
from .worker.execution import Executor

MEMORY_STORE = "sqlite:///:memory:"
"""A store that lives as long as the app is open, in memory (one process only)."""
_TESTING_WORKER = "testing"


class FakeClock:
    """A clock that moves only when told to; ``sleep`` waits for :meth:`advance`."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._moved = asyncio.Condition()

    def now(self) -> float:
        """The fake time."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Return once the clock was advanced by ``seconds`` (at once for zero or less)."""
        until = self._now + seconds
        async with self._moved:
            await self._moved.wait_for(lambda: self._now >= until)

    def advance(self, seconds: float) -> None:
        """Move time forward (sleepers are woken on their next chance to run)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._moved:
            self._moved.notify_all()


async def run_until_idle_async(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    raise_errors: bool = True,
    max_runs: int = 100_000,
) -> list[Run]:
    """Execute every due run here, one at a time, until none is due (of every queue, or of
    ``queues`` when given).

    Returns the runs it executed, as they ended. With ``raise_errors``, a run that ends dead
    raises :class:`~cronbus.handle.RunEndedError` (a :class:`~cronbus.errors.RunFailedError`)
    with the task's error type, message and traceback as attributes, as ``handle.wait()`` does.
    Retries scheduled in the future are left alone: advance the app's clock and call again.
    """
    executor = Executor(app.tasks, clock=app.clock, concurrency=1, log_limit=app.settings.log_limit)
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    ran: list[Run] = []
    capture.install()
    try:
        while len(ran) < max_runs:
            # Without named queues, every queue is served, as a worker without --queues does.
            names = (
                list(queues)
                if queues
                else await app.store.ready_queues(app.clock.now(), app.namespace)
            )
            request = ClaimRequest(
                worker_id=_TESTING_WORKER,
                namespace=app.namespace,
                queues=[QueueShare(name=n, limit=1) for n in names],
                limit=1,
                lease_seconds=app.settings.lease_seconds,
            )
            claimed = await app.store.claim(request, app.clock.now()) if names else []
            if not claimed:
                break
            outcome = await executor.run(claimed[0], never)
            if outcome is not None:
                await app.store.complete([outcome], app.clock.now())
            run = await app.store.get_run(claimed[0].run_id)
            ran.append(run)
            if raise_errors and run.state is RunState.DEAD:
                raise RunEndedError(run)
    finally:
        capture.uninstall()
        executor.shutdown()
    return ran


def run_until_idle(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    raise_errors: bool = True,
    max_runs: int = 100_000,
) -> list[Run]:
    """Blocking form of :func:`run_until_idle_async`, for an app opened with ``with app:``."""
    return app.blocking(
        run_until_idle_async(app, queues=queues, raise_errors=raise_errors, max_runs=max_runs)
    )
