"""Waiting for runs to end, woken by their completion rather than by polling.

Every ``handle.wait()`` of a process (of one store) shares one listener on the store's "ended"
wake-up channel (:data:`~cronbus.store.wake.ENDED_CHANNEL`) and one checker task: when a run
ends anywhere, the stores nudge the processes that listen (SQLite through its registry of
sockets, which filters by channel; PostgreSQL by NOTIFY, sent only while some process waits),
and the checker reads every awaited run in one query and releases the waits whose runs ended.

Nobody pays while nobody waits: the listener is opened by the first wait and closed a while
after the last one (:data:`LINGER_SECONDS`, so a loop of waits keeps it). A nudge may be lost
(a full socket buffer, a reconnecting LISTEN connection): the checker also reads the awaited
runs every :data:`SAFETY_POLL_SECONDS`, the safety net, never the source of latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import TYPE_CHECKING

from .errors import CronbusError
from .store.ports import Listener, wait_any
from .store.wake import ENDED_CHANNEL

if TYPE_CHECKING:
    from .model import Run
    from .store.ports import Store

log = logging.getLogger("cronbus.wait")

SAFETY_POLL_SECONDS = 1.0
"""How often the checker reads the awaited runs without a wake-up (the safety net)."""
LINGER_SECONDS = 5.0
"""How long the listener stays after the last wait ended (waits in a loop keep it)."""


class RunWaiters:
    """The waits of one process on one store (see the module's documentation)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._loop = asyncio.get_running_loop()
        self._waits: dict[int, set[asyncio.Future[Run | None]]] = {}
        self._listener: Listener | None = None
        self._opening: asyncio.Lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._checker: asyncio.Task[None] | None = None
        self._closer: asyncio.TimerHandle | None = None

    async def until_ended(self, run_id: int, timeout: float | None) -> Run | None:
        """Wait until run ``run_id`` ends, and return it as the checker read it, ended; None
        after ``timeout`` seconds, or when the run is gone or could not be read (read it then
        to learn which)."""
        future: asyncio.Future[Run | None] = self._loop.create_future()
        self._waits.setdefault(run_id, set()).add(future)
        try:
            await self._listening()
            self._start()
            try:
                async with asyncio.timeout(timeout):
                    # The run as read at its end: the wait need not read it once more.
                    return await future
            except TimeoutError:
                return None
        finally:
            futures = self._waits.get(run_id)
            if futures is not None:
                futures.discard(future)
                if not futures:
                    del self._waits[run_id]
            if not self._waits:
                self._kick.set()  # the checker stops
                self._close_later()

    async def _listening(self) -> None:
        """Open the listener unless it is open (one per process, shared by every wait)."""
        if self._closer is not None:
            self._closer.cancel()
            self._closer = None
        if self._listener is not None and getattr(self._listener, "active", True):
            return
        async with self._opening:
            if self._listener is None or not getattr(self._listener, "active", True):
                self._listener = await self._store.listen([ENDED_CHANNEL])
                # A run that ended before the listener was there: read the runs once now.
                self._kick.set()

    def _start(self) -> None:
        self._kick.set()  # a new wait: its run is read at once (after listening)
        if self._checker is None or self._checker.done():
            self._checker = self._loop.create_task(self._check(), name="cronbus-wait")

    async def _check(self) -> None:
        """Read the awaited runs at each wake-up (and each safety poll); release the ended."""
        while self._waits:
            listener = self._listener
            if not self._kick.is_set() and listener is not None:
                await wait_any([listener], self._kick, SAFETY_POLL_SECONDS)
            self._kick.clear()
            ids = list(self._waits)
            if not ids:
                break
            try:
                runs = await self._store.get_runs(ids)
            except CronbusError as exc:
                # The store is closing or failing: let every wait read its run for itself.
                log.debug("reading awaited runs failed: %s", exc)
                self._release(dict.fromkeys(ids))
                return
            found = {run.id: run for run in runs}
            self._release({run.id: run for run in runs if run.state.terminal})
            # Gone: the wait reads it and reports that.
            self._release(dict.fromkeys(i for i in ids if i not in found))

    def _release(self, ended: dict[int, Run | None]) -> None:
        for run_id, run in ended.items():
            for future in self._waits.get(run_id, ()):
                if not future.done():
                    future.set_result(run)

    def _close_later(self) -> None:
        if self._closer is None and self._listener is not None:
            self._closer = self._loop.call_later(LINGER_SECONDS, self._close_idle)

    def _close_idle(self) -> None:
        self._closer = None
        if self._waits or self._listener is None:
            return
        listener, self._listener = self._listener, None
        task = self._loop.create_task(_close(listener), name="cronbus-wait-close")
        _closing.add(task)
        task.add_done_callback(_closing.discard)


_closing: set[asyncio.Task[None]] = set()


async def _close(listener: Listener) -> None:
    with contextlib.suppress(CronbusError):
        await listener.close()


_WAITERS: weakref.WeakKeyDictionary[Store, RunWaiters] = weakref.WeakKeyDictionary()


def waiters(store: Store) -> RunWaiters:
    """The waits of this process on ``store`` (on the running loop)."""
    found = _WAITERS.get(store)
    if found is None or found._loop is not asyncio.get_running_loop():
        found = _WAITERS[store] = RunWaiters(store)
    return found
