"""One loop per watched namespace, fanning the overview out to every open tab.

Each open console tab holds one live stream (:mod:`.routes.live`). The streams of one
namespace do not each compute what they send: they listen to one *feed* of the process's
:data:`HUB`, whose loop computes the tick once per :data:`TICK` seconds and hands it to every
listener. Twenty tabs on a namespace cost one computation per tick; a namespace nobody
listens to any more costs nothing (its loop ends with its last listener, as when a hidden tab
closes its stream). :meth:`Hub.close` ends the streams of a server that is stopping, so its
graceful shutdown does not wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field

log = logging.getLogger("cronbus.console")

TICK = 2.0
"""Seconds between two ticks of a feed."""


@dataclass(frozen=True, slots=True)
class Tick:
    """What a live stream sends: the overview's version and its figures as shown."""

    version: str
    figures: dict[str, str] = field(default_factory=dict)

    def event(self) -> str:
        """The tick as a server-sent event named ``tick``."""
        data = json.dumps({"version": self.version, "figures": self.figures}, sort_keys=True)
        return f"event: tick\ndata: {data}\n\n"


class Listener:
    """One stream's place on a feed: the latest tick not yet taken, and whether the stream
    must end (its server stops)."""

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.closed = False
        self._tick: Tick | None = None
        self._ready = asyncio.Event()

    def put(self, tick: Tick) -> None:
        """Hand over a tick; one not taken yet is replaced (a slow client skips ticks)."""
        self._tick = tick
        self._ready.set()

    def close(self) -> None:
        """End the stream at its next wait."""
        self.closed = True
        self._ready.set()

    async def next(self, timeout: float) -> Tick | None:
        """The next tick, or None after ``timeout`` seconds without one or once closed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        self._ready.clear()
        tick, self._tick = self._tick, None
        return None if self.closed else tick


@dataclass(eq=False)
class _Feed:
    """The listeners of one key and the loop computing their ticks."""

    compute: Callable[[], Awaitable[Tick]]
    listeners: set[Listener] = field(default_factory=set)
    latest: Tick | None = None
    task: asyncio.Task[None] | None = None


class Hub:
    """The process's feeds, one per watched key (an event loop, a store, a namespace)."""

    def __init__(self, interval: float = TICK) -> None:
        self.interval = interval
        self.computations = 0
        """Ticks computed since the process started, over every feed (tests count them)."""
        self._feeds: dict[Hashable, _Feed] = {}

    def watched(self) -> list[Hashable]:
        """The keys some stream listens to now (their loops run)."""
        return list(self._feeds)

    @contextlib.asynccontextmanager
    async def listen(
        self, key: Hashable, compute: Callable[[], Awaitable[Tick]], owner: object
    ) -> AsyncIterator[Listener]:
        """Listen to the feed of ``key`` while the block runs, starting its loop with
        ``compute`` when nobody listened to it. The listener gets the feed's latest tick at
        once when there is one. ``owner`` is what :meth:`close` ends the listener with (the
        API serving the stream)."""
        full_key = (id(asyncio.get_running_loop()), key)
        feed = self._feeds.get(full_key)
        if feed is None:
            feed = self._feeds[full_key] = _Feed(compute=compute)
            feed.task = asyncio.create_task(self._run(feed), name=f"console feed {key!r}")
        listener = Listener(owner)
        feed.listeners.add(listener)
        if feed.latest is not None:
            listener.put(feed.latest)
        try:
            yield listener
        finally:
            feed.listeners.discard(listener)
            if not feed.listeners and self._feeds.get(full_key) is feed:
                del self._feeds[full_key]
                if feed.task is not None:
                    feed.task.cancel()

    async def _run(self, feed: _Feed) -> None:
        """Compute a tick, give it to every listener, wait, again: until nobody listens."""
        while feed.listeners:
            try:
                self.computations += 1
                tick = await feed.compute()
            except Exception:  # a store down: the streams wait, the next tick tries again
                log.warning("the console's live figures failed", exc_info=True)
            else:
                feed.latest = tick
                for listener in list(feed.listeners):
                    listener.put(tick)
            await asyncio.sleep(self.interval)

    def close(self, owner: object) -> int:
        """End every stream ``owner`` serves (its server stops); returns how many."""
        ended = 0
        for feed in list(self._feeds.values()):
            for listener in list(feed.listeners):
                if listener.owner is owner:
                    listener.close()
                    ended += 1
        return ended


HUB = Hub()
"""The process's hub: every live stream listens through it."""
