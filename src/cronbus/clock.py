"""Clocks: everything that waits, expires or backs off asks one of these for the time.

The store reads no time of its own but one: engines pass ``now`` in, so tests can jump time
with :class:`cronbus.testing.FakeClock` instead of sleeping. The exception is lease expiry on
PostgreSQL, which is timed by the database server's clock so that workers on machines whose
clocks disagree neither steal nor keep leases wrongly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time in epoch seconds, and a way to wait for some of it to pass."""

    def now(self) -> float:
        """Return the current wall time as seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        """Return ``time.time()``."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Sleep with asyncio."""
        await asyncio.sleep(max(0.0, seconds))
