"""Group commit: concurrent single defers share one transaction and one fsync.

A durable defer costs one commit, and a commit costs one fsync: one caller deferring runs one
at a time is bound by the disk, however fast the rest is. Callers who defer *at the same time*
(threads of a web server, tasks of an async app) need not each pay it: :class:`GroupCommit`
queues their runs and writes everything queued in one transaction, and each ``defer`` still
returns only once its own run is durable, with its own id.

The first caller to find no write in flight starts one; runs that arrive while it commits wait
for the next, which takes all of them (up to :data:`MAX_BATCH`). A lone caller pays one extra
turn of the event loop, nothing more: a write starts as soon as the loop is free.

A batch is all-or-none in the store. So that one refused run cannot fail the runs that came with
it, a batch that fails is tried again run by run, and each caller gets its own run's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .model import Deferred, NewRun

if TYPE_CHECKING:
    from .store import Store

__all__ = ["MAX_BATCH", "GroupCommit"]

MAX_BATCH = 500
"""Runs written in one transaction at most: a bigger backlog is written in several."""

_Waiting = tuple[NewRun, "asyncio.Future[Deferred]"]


class GroupCommit:
    """Defers of single runs, written in shared transactions (see the module's docstring).

    ``store`` and ``now`` are read at each write, so the object outlives a store reopened
    under it. One instance serves one event loop (the app's).
    """

    def __init__(self, store: Callable[[], Store], now: Callable[[], float]) -> None:
        self._store = store
        self._now = now
        self._waiting: list[_Waiting] = []
        self._writer: asyncio.Task[None] | None = None

    async def defer(self, run: NewRun) -> Deferred:
        """Create ``run``; return once it is durable (or raise what refused it)."""
        done: asyncio.Future[Deferred] = asyncio.get_running_loop().create_future()
        self._waiting.append((run, done))
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())
        # A caller cancelled here leaves its run in the queue: it is written all the same, as
        # a defer cancelled during its commit may be.
        return await asyncio.shield(done)

    async def _write(self) -> None:
        """Write what is queued, batch after batch, until nothing is."""
        batch: Sequence[_Waiting] = ()
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                await self._commit(batch)
        except BaseException:
            # Cancelled with the loop: no caller may be left waiting for ever.
            for _, done in [*batch, *self._waiting]:
                done.cancel()
            self._waiting = []
            raise
        finally:
            self._writer = None

    async def _commit(self, batch: Sequence[_Waiting]) -> None:
        try:
            created = await self._store().defer([run for run, _ in batch], self._now())
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], error=exc)
                return
            # All or none: find out whose run was refused, and write the others.
            for one in batch:
                await self._commit([one])
            return
        for (_, done), deferred in zip(batch, created, strict=True):
            _settle(done, result=deferred)


def _settle(
    done: asyncio.Future[Deferred],
    *,
    result: Deferred | None = None,
    error: BaseException | None = None,
) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    elif result is not None:
        done.set_result(result)
