"""The worker's reaper: requeues the runs of lost workers, ages retries, routes again the runs
pinned to workers that are gone, expands or gives up the broadcasts that wait for a live worker,
and prunes the registry.

Every worker runs one, at random intervals around half a lease, so a cluster reaps promptly
without all its workers hitting the store at the same moment.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING

from ..clock import Clock
from ..config import Settings
from ..store import Store

if TYPE_CHECKING:
    from ..observability.metrics import Metrics

log = logging.getLogger("cronbus.worker")
PRUNE_AFTER_SECONDS = 24 * 3600.0
"""Registry rows of workers silent this long (stopped, or lost and gone) are deleted."""


async def reap_forever(
    store: Store, clock: Clock, settings: Settings, metrics: Metrics | None = None
) -> None:
    """Reap expired leases, age retries, reroute runs of gone workers and prune silent
    workers until cancelled; count the runs reaped as lost in ``metrics``."""
    while True:
        try:
            now = clock.now()
            reaped = await store.reap(now, settings.max_lost)
            if reaped:
                log.warning(
                    "requeued %d runs of lost workers: %s",
                    len(reaped),
                    reaped[:10],
                    extra={"action": "runs.reaped"},
                )
                if metrics is not None:
                    # Reaping is rare: one read of the runs names their task and queue.
                    metrics.runs_lost(await store.get_runs(reaped))
            await store.age_retries(now, settings.retry_aging_seconds)
            await store.prune_workers(now - PRUNE_AFTER_SECONDS)
        except Exception:
            log.exception("reaping expired leases failed")
        await _reroute(store, clock.now())
        await settle_broadcasts(store, clock.now(), settings)
        pause = settings.lease_seconds / 2
        await asyncio.sleep(pause * (0.5 + random.random()))


async def _reroute(store: Store, now: float) -> None:
    """Route again the waiting runs pinned to workers that are gone (apart from the reaping,
    so that one failing does not hold back the other)."""
    try:
        rerouted = await store.reroute(now)
    except Exception:
        log.exception("routing again the runs of gone workers failed")
        return
    if rerouted:
        log.info(
            "routed %d waiting runs again: their worker is gone",
            rerouted,
            extra={"action": "runs.rerouted"},
        )


async def settle_broadcasts(store: Store, now: float, settings: Settings) -> None:
    """Expand the broadcasts that waited for a live worker and have one now, or end them dead
    once ``settings.broadcast_wait_seconds`` passed (apart, so a failure holds back nothing)."""
    try:
        changed = await store.settle_broadcasts(now, settings.broadcast_wait_seconds)
    except Exception:
        log.exception("settling the broadcasts that wait for a live worker failed")
        return
    if changed:
        log.info(
            "settled %d broadcasts that waited for a live worker",
            changed,
            extra={"action": "runs.broadcasts_settled"},
        )


async def settle_broadcasts_forever(store: Store, clock: Clock, settings: Settings) -> None:
    """:func:`settle_broadcasts` until cancelled, every half wait (half a lease at most): the
    scheduler runs it, so a broadcast fired when no worker is up still ends, saying so."""
    pause = max(min(settings.broadcast_wait_seconds, settings.lease_seconds) / 2, 0.05)
    while True:
        await settle_broadcasts(store, clock.now(), settings)
        await asyncio.sleep(pause)
