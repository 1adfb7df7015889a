"""Wake-ups in the SQLite store: a datagram socket per listening process (see
:mod:`cronbus.store.wake`), registered in the store's ``wakeups`` table.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

from ...errors import StoreError
from ..ports import Listener
from ..wake import ENDED_CHANNEL, LocalListener
from . import sql as q
from .connection import Connected, read_wakeups
from .rows import execute, execute_many

_WAKEUP_CACHE_SECONDS = 1.0
_ENDED_ONLY = [ENDED_CHANNEL]


class SqliteWakeUps(Connected):
    """The wake-ups role (:class:`~cronbus.store.ports.WakeUps`) of the SQLite store."""

    async def listen(self, channels: Sequence[str]) -> Listener:
        """Receive nudges for ``channels`` from this and other processes (the registry row is
        narrowed again when the listener closes, so nobody nudges channels no longer heard)."""
        listener = _Registered(self, self._hub.add(channels))
        await self._register()
        return listener

    async def _register(self) -> None:
        """Write this process's channels to the registry when they changed."""
        wanted = frozenset(self._hub.channels())
        if wanted != self._registered and self._hub.bound:
            self._registered = wanted
            row = (self._hub.address, self._hub.pid, ",".join(sorted(wanted)), time.time())
            await self._transact(execute, q.REGISTER_WAKEUP, row, durable=False)

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake this process's listeners directly and nudge the other processes' sockets."""
        if channels == _ENDED_ONLY and not self._ended_heard():
            return  # a run ended and nobody waits for ends: the common case costs nothing
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

    def _ended_heard(self) -> bool:
        """Whether a listener here or (by the registry as last read) elsewhere waits for ends."""
        if time.monotonic() - self._wakeups_read > _WAKEUP_CACHE_SECONDS:
            return True  # the registry is old: notify() reads it again
        return ENDED_CHANNEL in self._hub.local_channels or any(
            ENDED_CHANNEL in chans for _, chans in self._wakeups
        )

    async def _forget_wakeup(self) -> None:
        """Unregister this process's socket (the store is closing)."""
        await self._transact(execute, q.DELETE_WAKEUP, (self._hub.address,), durable=False)


class _Registered:
    """A listener whose close also narrows the process's registered channels."""

    def __init__(self, store: SqliteWakeUps, listener: LocalListener) -> None:
        self._store = store
        self._listener = listener
        self.channels = listener.channels

    @property
    def active(self) -> bool:
        """False once closed, or once the store was closed."""
        return self._listener.active

    async def wait(self, timeout: float) -> bool:
        """See :meth:`LocalListener.wait`."""
        return await self._listener.wait(timeout)

    async def close(self) -> None:
        """Stop receiving nudges, and tell the other processes (while the store is open)."""
        active = self._listener.active
        await self._listener.close()
        if active and self._store._database.is_open:
            with contextlib.suppress(StoreError):
                await self._store._register()
