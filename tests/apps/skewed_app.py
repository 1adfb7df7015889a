"""``apps.cluster_app``'s app and tasks with a wrong clock: ``CRONBUS_TEST_CLOCK_OFFSET`` seconds
ahead (or behind, when negative) of the machine's, as on a machine whose clock is off.

Everything the worker reads the time for goes through ``app.clock``: the ``now`` it passes to
the store for claims, heartbeats and the reaper, and the times it records.
"""

from __future__ import annotations

import os
import time

from apps.cluster_app import app
from cronbus.clock import SystemClock

OFFSET_ENV = "CRONBUS_TEST_CLOCK_OFFSET"

__all__ = ["OFFSET_ENV", "SkewedClock", "app"]


class SkewedClock(SystemClock):
    """The system clock, ``offset`` seconds off."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        """``time.time()`` plus the offset."""
        return time.time() + self.offset


app.clock = SkewedClock(float(os.environ.get(OFFSET_ENV, "0")))
