"""The overview: one namespace's health in one snapshot, computed once for every viewer.

A snapshot counts runs by state, queue depths, workers by state, dead letters waiting (dead
runs and dead deliveries), subscriptions failing, the scheduler's lag over the last hour and
the runs ended per minute, and carries a ``version`` that changes whenever any of these does.
It is computed at most once per :data:`TTL` seconds per store and namespace and shared by every
caller of the process: twenty console tabs cost one computation. The web console shows it (its
live stream sends the ``version`` and the figures); Prometheus gauges can be read off the same
plain dataclass.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from enum import Enum
from typing import Any

from ..events.records import Subscription
from ..events.states import DeliveryState
from ..model import QueueDepth, WorkerState
from ..states import RunState
from .context import Context
from .stats import CACHE, Bucket, StatsService

TTL = 1.8
"""Seconds a snapshot is served before it is computed again (a little under the console's
2 s tick, so each tick sees a fresh one)."""
LAG_WINDOW = 3600.0
"""Seconds of job fires the scheduler's lag is measured over."""
LAG_SAMPLES = 1000
"""The newest fires of the window the lag is measured on, at most."""
_WORKER_STATES = (WorkerState.ALIVE, WorkerState.DRAINING, WorkerState.LOST)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerLag:
    """How late the scheduler created job runs (creation time minus due time), in seconds,
    over the fires of the last hour; None when there were none."""

    p50: float | None = None
    p99: float | None = None
    max: float | None = None
    samples: int = 0
    """How many fires the figures are measured on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Overview:
    """One namespace's figures at ``taken_at`` (epoch seconds)."""

    namespace: str
    taken_at: float
    runs: dict[RunState, int] = field(default_factory=dict)
    """Runs in each state (every state present)."""
    queues: tuple[QueueDepth, ...] = ()
    """Runs per queue and live state, by queue then state."""
    workers: dict[WorkerState, int] = field(default_factory=dict)
    """Workers alive, draining and lost (stopped ones are history, not counted)."""
    dead_runs: int = 0
    dead_deliveries: int = 0
    failing_subscriptions: tuple[str, ...] = ()
    """Subscriptions disabled by cronbus, or holding deliveries that are retrying or dead,
    by name."""
    lag: SchedulerLag = field(default_factory=SchedulerLag)
    minutes: tuple[Bucket, ...] = ()
    """Runs ended in each minute of the last hour, oldest first."""
    version: str = ""
    """Changes whenever any figure above does (``taken_at`` aside)."""

    @property
    def dead_letters(self) -> int:
        """Dead letters waiting for an operator: dead runs and dead deliveries."""
        return self.dead_runs + self.dead_deliveries


class OverviewService:
    """The overview of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def snapshot(self) -> Overview:
        """The namespace's figures, computed at most :data:`TTL` seconds ago (shared by every
        caller of the process)."""
        self._c.read()
        store = self._c.store
        key = ("overview", store.url, id(store), self._c.namespace)
        return await CACHE.get(key, self._compute, ttl=TTL)

    async def _compute(self) -> Overview:
        store, namespace, now = self._c.store, self._c.namespace, self._c.now()
        stats = StatsService(self._c)
        runs = await stats.counts(max_age=TTL)
        minutes = await stats.per_minute(3600, max_age=TTL)
        queues = await store.queue_depths(namespace)
        found = await store.list_workers(now, namespace=namespace)
        workers = dict.fromkeys(_WORKER_STATES, 0)
        for worker in found:
            if worker.state in workers:
                workers[worker.state] += 1
        dead_deliveries, failing = await self._subscriptions()
        lags = await store.fire_lags(namespace, now - LAG_WINDOW, LAG_SAMPLES)
        figures = Overview(
            namespace=namespace,
            taken_at=now,
            runs=runs,
            queues=tuple(queues),
            workers=workers,
            dead_runs=runs.get(RunState.DEAD, 0),
            dead_deliveries=dead_deliveries,
            failing_subscriptions=failing,
            lag=scheduler_lag(lags),
            minutes=tuple(minutes),
        )
        return _versioned(figures)

    async def _subscriptions(self) -> tuple[int, tuple[str, ...]]:
        """Dead deliveries of the namespace's subscriptions, and the failing ones' names."""
        store = self._c.store
        dead = 0
        failing = []
        subs = await store.list_subscriptions(namespace=self._c.namespace)
        for sub in sorted(subs, key=lambda s: s.name):
            counts = await store.count_deliveries(sub.name)
            dead += counts.get(DeliveryState.DEAD, 0)
            if failing_subscription(sub, counts):
                failing.append(sub.name)
        return dead, tuple(failing)


def failing_subscription(sub: Subscription, deliveries: dict[DeliveryState, int]) -> bool:
    """True when ``sub`` needs an operator: cronbus disabled it (paused with a reason), or
    deliveries of it are retrying (its target fails: the dispatcher backs off and opens its
    circuit) or dead. A subscription paused by an operator is not failing."""
    if sub.paused and sub.disabled_reason:
        return True
    return deliveries.get(DeliveryState.RETRY, 0) > 0 or deliveries.get(DeliveryState.DEAD, 0) > 0


def scheduler_lag(lags: Sequence[float]) -> SchedulerLag:
    """p50, p99 (nearest rank) and the maximum of ``lags``; a negative lag (a run created a
    hair before its due time by another clock) counts as 0."""
    if not lags:
        return SchedulerLag()
    ordered = sorted(max(0.0, lag) for lag in lags)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

    return SchedulerLag(p50=rank(0.5), p99=rank(0.99), max=ordered[-1], samples=len(ordered))


def _versioned(figures: Overview) -> Overview:
    """``figures`` with its version: a digest of every figure but the time it was taken."""
    content = _plain(replace(figures, taken_at=0.0, version=""))
    text = json.dumps(content, sort_keys=True, default=str)
    return replace(figures, version=hashlib.sha256(text.encode()).hexdigest()[:16])


_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready lists, dicts and scalars, every dataclass field included.

    Not ``dataclasses.asdict``, which deep-copies every value on the way: with a thousand
    queues it took most of the overview's time (80 ms of 110 on a small machine), once per
    computation, for the console and for the metrics alike.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, Enum):
        return value.value
    if kind is dict:
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    names = _FIELDS.get(kind)
    if names is None and is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS[kind] = tuple(f.name for f in fields(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    return str(value)
