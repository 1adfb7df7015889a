"""Wake-ups in the SQLite store: a datagram socket per listening process (see
:mod:`cronbus.store.wake`), registered in the store's ``wakeups`` table.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..ports import Listener
from . import sql as q
from .connection import Connected, read_wakeups
from .rows import execute, execute_many

_WAKEUP_CACHE_SECONDS = 1.0


class SqliteWakeUps(Connected):
    """The wake-ups role (:class:`~cronbus.store.ports.WakeUps`) of the SQLite store."""

    async def listen(self, channels: Sequence[str]) -> Listener:
        """Receive nudges for ``channels`` from this and other processes."""
        listener = self._hub.add(channels)
        wanted = frozenset(self._hub.channels())
        if wanted != self._registered:
            self._registered = wanted
            row = (self._hub.address, self._hub.pid, ",".join(sorted(wanted)), time.time())
            await self._transact(execute, q.REGISTER_WAKEUP, row, durable=False)
        return listener

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake this process's listeners directly and nudge the other processes' sockets."""
        self._hub.wake_local(channels)
        if time.monotonic() - self._wakeups_read > _WAKEUP_CACHE_SECONDS:
            self._wakeups = await self._call(read_wakeups, self._db)
            self._wakeups_read = time.monotonic()
        wanted = set(channels)
        targets = [address for address, chans in self._wakeups if chans & wanted]
        gone = self._hub.send(targets, channels)
        if gone:
            self._wakeups = [w for w in self._wakeups if w[0] not in gone]
            rows = [(address,) for address in gone]
            await self._transact(execute_many, q.DELETE_WAKEUP, rows, durable=False)

    async def _forget_wakeup(self) -> None:
        """Unregister this process's socket (the store is closing)."""
        await self._transact(execute, q.DELETE_WAKEUP, (self._hub.address,), durable=False)
