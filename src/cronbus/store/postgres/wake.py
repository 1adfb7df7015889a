"""Wake-ups between processes on PostgreSQL: LISTEN/NOTIFY on channels named after the schema.

The NOTIFY goes inside the transaction that made the work (see :mod:`.connection`); here is the
other end: one listening connection per store, outside the pool, that reconnects with backoff by
itself and feeds this process's listeners.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ...errors import StoreError
from ..ports import Listener
from ..wake import ENDED_CHANNEL, LocalListener, WakeHub
from . import sql as q
from .connection import NOT_OPEN, Conn, Connected, describe, stopped

log = logging.getLogger("cronbus.store")
_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0
_SUBSCRIBE_SECONDS = 10.0
# Notice a silently dead server (no FIN, no RST) within about half a minute.
_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def listening_conninfo(conninfo: str) -> str:
    """``conninfo`` with TCP keepalives, unless it sets its own."""
    params = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in _KEEPALIVES.items() if k not in params})


class LocalHub(WakeHub):
    """The in-process half of :class:`~cronbus.store.wake.WakeHub`: PostgreSQL carries the
    wake-ups between processes, so no socket is bound."""

    def _bind(self) -> None:
        return None


class Listening:
    """A store's one LISTEN connection (not from the pool), feeding this process's listeners.

    A supervising task connects, LISTENs on every channel a local listener wants and reads the
    notifications. When the connection breaks (a server restart, a network cut) it reconnects
    with backoff and then wakes every listener, since what was sent meanwhile is lost. psycopg
    holds the connection while it waits for notifications, so a new channel interrupts the
    reading to run its LISTEN.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        names: Callable[[str], str],
        wake: Callable[[Iterable[str]], None],
        token: str,
        lost: Callable[[], None],
    ) -> None:
        self._conninfo = conninfo
        self._names = names
        self._wake = wake
        self._token = token
        self._lost = lost
        self._wanted: set[str] = set()
        self._listening: set[str] = set()
        self._by_name: dict[str, str] = {}
        self._changed = asyncio.Event()
        self._subscribed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def wanted(self) -> frozenset[str]:
        """The channels listened on, or to be."""
        return frozenset(self._wanted)

    async def subscribe(self, channels: Iterable[str]) -> None:
        """LISTEN on ``channels``; returns once the server has them (or after a while: polling
        covers the time until the connection is back)."""
        wanted = set(channels)
        self._wanted |= wanted  # first: it may be in _listening only until an UNLISTEN
        if wanted <= self._listening:
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._supervise(), name="cronbus-listen"
            )
        self._changed.set()
        try:
            async with asyncio.timeout(_SUBSCRIBE_SECONDS), self._subscribed:
                await self._subscribed.wait_for(lambda: self._closed or wanted <= self._listening)
        except TimeoutError:
            log.warning(
                "not listening on %s yet; wake-ups fall back to polling until reconnected",
                ", ".join(sorted(wanted)),
            )

    def unsubscribe(self, channels: Iterable[str]) -> None:
        """Stop listening on ``channels`` (soon: the supervising task UNLISTENs)."""
        gone = set(channels) & self._wanted
        if gone:
            self._wanted -= gone
            self._changed.set()

    async def close(self) -> None:
        """Stop the supervising task and close the connection."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await stopped(self._task)
            self._task = None
        async with self._subscribed:
            self._subscribed.notify_all()

    async def _supervise(self) -> None:
        delay, broken = _BACKOFF_FIRST, False
        while True:
            connected = False
            try:
                async with await AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                    connected = True
                    await self._listen(conn)
                    delay = _BACKOFF_FIRST
                    if broken:
                        log.warning("listening again", extra={"action": "store.listen"})
                        # Notifications sent while disconnected are lost: look for work now.
                        self._wake(self._wanted)
                    await self._serve(conn)
            except psycopg.Error as exc:
                what = "listening connection lost" if connected else "cannot connect to listen"
                log.warning(
                    "%s (%s); retrying in %.1fs",
                    what,
                    describe(exc),
                    delay,
                    extra={"action": "store.listen"},
                )
                if connected:
                    self._lost()
            except Exception:
                # Whatever it was, wake-ups must come back: polling alone is only the safety net.
                log.exception("listening failed; retrying in %.1fs", delay)
            finally:
                self._listening = set()
            broken = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    async def _listen(self, conn: Conn) -> None:
        for channel in sorted(self._listening - self._wanted):
            name = self._names(channel)
            await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(name)))
            if channel == ENDED_CHANNEL:
                await conn.execute(q.ENDED_WAITERS_UNLOCK)
            self._listening.discard(channel)
        for channel in sorted(self._wanted - self._listening):
            name = self._names(channel)
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            if channel == ENDED_CHANNEL:
                # Held while listening: completions NOTIFY "ended" only while someone holds it
                # (see sql.NOTIFY). Taken after the LISTEN, and it waits for the completions
                # that found it free to commit, so a waiter that reads its run after this
                # returned either sees it ended or is sure to be notified.
                await conn.execute(q.ENDED_WAITERS_LOCK)
            self._by_name[name] = channel
            self._listening.add(channel)
        async with self._subscribed:
            self._subscribed.notify_all()

    async def _serve(self, conn: Conn) -> None:
        """Read notifications; stop reading to LISTEN when new channels are wanted."""
        while True:
            self._changed.clear()
            await self._listen(conn)
            reader = asyncio.create_task(self._read(conn))
            changed = asyncio.create_task(self._changed.wait())
            try:
                await asyncio.wait((reader, changed), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (reader, changed):
                    task.cancel()
                await asyncio.gather(reader, changed, return_exceptions=True)
            if not reader.cancelled() and (error := reader.exception()) is not None:
                raise error

    async def _read(self, conn: Conn) -> None:
        async for note in conn.notifies():
            channel = self._by_name.get(note.channel)
            if channel is not None and note.payload != self._token:
                self._wake((channel,))


class PostgresWakeUps(Connected):
    """The wake-ups role (:class:`~cronbus.store.ports.WakeUps`) of the PostgreSQL store."""

    _token: str
    _listening: Listening | None

    async def listen(self, channels: Sequence[str]) -> Listener:
        """Receive wake-ups for ``channels``, from this process and (by LISTEN) from others."""
        if not self._db.is_open:
            raise StoreError(NOT_OPEN)
        listener = self._hub.add(channels)
        if self._listening is None:
            self._listening = Listening(
                listening_conninfo(self._db.conninfo),
                names=self._db.channel_name,
                wake=self._hub.wake_local,
                token=self._token,
                # The listening connection is the first to see a server restart: replace the
                # pool's idle connections before anyone runs into them.
                lost=self._db.check_pool,
            )
        await self._listening.subscribe(channels)
        return _Unlistening(self, listener)

    def _unlisten(self) -> None:
        """UNLISTEN the channels no local listener waits on any more (after a close)."""
        if self._listening is not None:
            self._listening.unsubscribe(set(self._listening.wanted) - self._hub.channels())

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake this process's listeners directly and the others' by NOTIFY."""
        self._hub.wake_local(channels)
        await self._db.execute(q.NOTIFY, self._db.notify_params(channels))


class _Unlistening:
    """A listener whose close also UNLISTENs the channels nobody here waits on any more."""

    def __init__(self, store: PostgresWakeUps, listener: LocalListener) -> None:
        self._store = store
        self._listener = listener
        self.channels = listener.channels

    @property
    def active(self) -> bool:
        """False once closed, or once the store was closed."""
        return self._listener.active

    async def wait(self, timeout: float) -> bool:
        """See :meth:`~cronbus.store.wake.LocalListener.wait`."""
        return await self._listener.wait(timeout)

    async def close(self) -> None:
        """Stop receiving wake-ups."""
        await self._listener.close()
        self._store._unlisten()
