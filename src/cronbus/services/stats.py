"""Stats: runs counted by state, and runs ended per minute over a window.

Counting runs is an aggregate over a large table, so it is never done per request: each figure
is computed once per few seconds (:data:`TTL`) per store, namespace and window, and shared by
every caller in the process; concurrent callers of a stale figure wait for one computation
instead of each starting their own.
"""

from __future__ import annotations

import asyncio
import builtins
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..states import RunState
from ..validation import check_int
from .context import Context, naming

T = TypeVar("T")
TTL = 3.0
"""Seconds a computed figure is served before it is computed again."""
_FORGET_AFTER = 60.0
"""Seconds after which a stale figure is dropped from the cache."""
MAX_WINDOW = 7 * 86_400
"""The longest window of ``per_minute``: a week."""
_MINUTE = 60.0
_TERMINAL = tuple(s for s in RunState if s.terminal)


@dataclass(frozen=True, slots=True, kw_only=True)
class Bucket:
    """Runs that ended in one minute, by terminal state (every state present, zeros too)."""

    start: float
    """The minute's first second (epoch seconds, a multiple of 60)."""
    counts: dict[str, int] = field(default_factory=dict)
    total: int = 0


class SharedCache:
    """Values by key, each computed at most once per its time to live, shared process-wide.

    Concurrent callers of a missing or stale key wait for one computation instead of each
    starting their own; a value long stale is dropped, so keys that change over time (a minute,
    a namespace nobody looks at any more) do not pile up in a server that runs for weeks.
    """

    def __init__(self) -> None:
        self._values: dict[tuple[Any, ...], tuple[float, float, Any]] = {}
        self._locks: dict[tuple[Any, ...], asyncio.Lock] = {}

    async def get(
        self, key: tuple[Any, ...], compute: Callable[[], Awaitable[T]], ttl: float = TTL
    ) -> T:
        """The value of ``key``: the one computed less than ``ttl`` seconds ago, else
        ``compute()``'s (one computation for every concurrent caller)."""
        hit = self._fresh(key)
        if hit is not None:
            return hit[2]  # type: ignore[no-any-return]
        # A lock belongs to one event loop; tests and tools may run several in turn.
        lock = self._locks.setdefault((id(asyncio.get_running_loop()), *key), asyncio.Lock())
        async with lock:
            hit = self._fresh(key)  # another caller may have computed it meanwhile
            if hit is not None:
                return hit[2]  # type: ignore[no-any-return]
            value = await compute()
            self._values[key] = (time.monotonic(), ttl, value)
            self._forget_stale()
            return value

    def _forget_stale(self) -> None:
        """Drop values long stale and the locks nobody holds."""
        now = time.monotonic()
        stale = [
            k for k, (at, ttl, _) in self._values.items() if now - at > max(ttl, _FORGET_AFTER)
        ]
        for key in stale:
            del self._values[key]
        for key in [k for k, lock in self._locks.items() if not lock.locked()]:
            if key[1:] not in self._values:
                del self._locks[key]

    def _fresh(self, key: tuple[Any, ...]) -> tuple[float, float, Any] | None:
        hit = self._values.get(key)
        if hit is None or time.monotonic() - hit[0] > hit[1]:
            return None
        return hit

    def clear(self) -> None:
        """Forget every value (tests that change the store and read at once)."""
        self._values.clear()


CACHE = SharedCache()
"""The process's figures, shared by every :class:`StatsService` (and the console's
:func:`cronbus.console.cache.shared`)."""


class StatsService:
    """Figures of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def counts(self, max_age: float = TTL) -> dict[RunState, int]:
        """How many runs of the namespace are in each state (every state present), as
        counted at most ``max_age`` seconds ago."""
        self._c.read()
        store = self._c.store
        namespace = self._c.namespace

        async def compute() -> dict[RunState, int]:
            found = await store.count_runs(namespace)
            return {state: found.get(state, 0) for state in RunState}

        key = ("counts", store.url, id(store), namespace)
        return dict(await CACHE.get(key, compute, ttl=max_age))

    async def per_minute(
        self, window_seconds: int = 3600, max_age: float = TTL
    ) -> builtins.list[Bucket]:
        """Runs of the namespace that ended in each minute of the last ``window_seconds``
        (60 to a week), oldest minute first, by terminal state; every minute is present; as
        counted at most ``max_age`` seconds ago."""
        self._c.read()
        with naming("window_seconds"):
            window = check_int(window_seconds, "window_seconds", 60, MAX_WINDOW)
        store = self._c.store
        namespace = self._c.namespace
        # Whole minutes, so callers within the same minute share one figure.
        until = (math.floor(self._c.now() / _MINUTE) + 1) * _MINUTE
        since = until - math.ceil(window / _MINUTE) * _MINUTE

        async def compute() -> builtins.list[Bucket]:
            rows = await store.runs_per_minute(namespace, since, until)
            return buckets(rows, since, until)

        key = ("per_minute", store.url, id(store), namespace, since)
        return list(await CACHE.get(key, compute, ttl=max_age))


def buckets(
    rows: builtins.list[tuple[float, str, int]], since: float, until: float
) -> builtins.list[Bucket]:
    """Every minute of ``[since, until)`` with its counts, from the store's sparse rows."""
    counts: dict[float, dict[str, int]] = {}
    for start, state, count in rows:
        minute = math.floor(start / _MINUTE) * _MINUTE
        per = counts.setdefault(minute, {})
        per[str(state)] = per.get(str(state), 0) + int(count)
    out = []
    minute = since
    while minute < until:
        per = counts.get(minute, {})
        full = {state.value: per.get(state.value, 0) for state in _TERMINAL}
        out.append(Bucket(start=minute, counts=full, total=sum(full.values())))
        minute += _MINUTE
    return out
