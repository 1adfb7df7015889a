"""Gauges: what is true now, read at scrape time.

Two kinds:

* **local** gauges describe this process: its workers' slots (:class:`WorkerSlots`) and the
  circuits of the subscriptions its dispatcher holds (:class:`Circuits`); they read the
  engines' own state, no store call;
* **store-wide** gauges (queue depths, oldest queued run, workers by state, subscription lag)
  count rows of the store. Those come from :class:`Aggregate`: one shared, cached set of
  figures (:mod:`.figures`), refreshed at most every few seconds however many scrapes, roles
  and console tabs ask; never a ``count(*)`` per scrape.

Every role of a cluster exports the store-wide gauges (each process's /metrics is complete on
its own); they are the same figures, so aggregate them with ``max``, not ``sum``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..model import WorkerState
from ..store.ports import LIVE_STATES
from .figures import Figures, shared_figures

if TYPE_CHECKING:
    from ..app import App

__all__ = ["Aggregate", "Circuits", "WorkerSlots"]

log = logging.getLogger("cronbus.metrics")
MAX_QUEUES = 10_000
"""Queues remembered (and exported at 0 once empty) per process; more are shown while busy."""
_WORKER_STATES = (WorkerState.ALIVE, WorkerState.DRAINING, WorkerState.LOST)


class _Worker(Protocol):
    concurrency: int

    @property
    def busy(self) -> int: ...


class _Dispatcher(Protocol):
    @property
    def circuits(self) -> dict[str, bool]: ...


class WorkerSlots(Collector):
    """``cronbus_worker_slots{state}``: busy and free slots of this process's workers."""

    def __init__(self) -> None:
        self.workers: set[_Worker] = set()

    def add(self, worker: _Worker) -> None:
        """Count ``worker``'s slots (while it runs)."""
        self.workers.add(worker)

    def discard(self, worker: _Worker) -> None:
        """Stop counting ``worker`` (it stopped)."""
        self.workers.discard(worker)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The busy and free slots now."""
        family = GaugeMetricFamily(
            "cronbus_worker_slots",
            "Attempt slots of this process's workers: busy (running an attempt) or free.",
            labels=["state"],
        )
        busy = sum(w.busy for w in self.workers)
        total = sum(w.concurrency for w in self.workers)
        family.add_metric(["busy"], busy)
        family.add_metric(["free"], max(0, total - busy))
        yield family


class Circuits(Collector):
    """``cronbus_circuit_open{subscription}``: 1 while the circuit of a subscription held by
    this process's dispatcher is open (or probing), else 0. A circuit lives in the dispatcher
    that holds the subscription's pusher, so only that process exports it."""

    def __init__(self) -> None:
        self.dispatchers: set[_Dispatcher] = set()

    def add(self, dispatcher: _Dispatcher) -> None:
        """Export ``dispatcher``'s circuits (while it runs)."""
        self.dispatchers.add(dispatcher)

    def discard(self, dispatcher: _Dispatcher) -> None:
        """Stop exporting ``dispatcher``'s circuits."""
        self.dispatchers.discard(dispatcher)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The circuits now."""
        family = GaugeMetricFamily(
            "cronbus_circuit_open",
            "1 while the circuit of a subscription this process pushes is open or probing "
            "(its target kept failing), else 0.",
            labels=["subscription"],
        )
        for dispatcher in self.dispatchers:
            for name, is_open in sorted(dispatcher.circuits.items()):
                family.add_metric([name], 1.0 if is_open else 0.0)
        yield family


class Aggregate(Collector):
    """The store-wide gauges of an app's namespace, from the shared figures.

    :meth:`refresh` (awaited by the exposition before each scrape is rendered) takes the
    figures computed at most a few seconds ago, in this process or, through the store's
    snapshots, in another; :meth:`collect` only reads what it took.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.figures: Figures | None = None
        self._queues: dict[str, None] = {}
        """Queues seen, so a queue that empties shows 0 instead of vanishing."""

    async def refresh(self) -> None:
        """Take the shared figures (computed again when older than a few seconds)."""
        self.figures = await shared_figures(self.app)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges from the figures last taken (none before the first refresh)."""
        figures = self.figures
        if figures is None:
            return
        now = self.app.clock.now()
        yield from self._queue_gauges(figures, now)
        workers = GaugeMetricFamily(
            "cronbus_workers",
            "Registered workers of the namespace by state (alive, draining, lost).",
            labels=["state"],
        )
        for state in _WORKER_STATES:
            workers.add_metric([state.value], figures.workers.get(state.value, 0))
        yield workers
        lag = GaugeMetricFamily(
            "cronbus_subscription_lag_events",
            "Events of a subscription's topic past its cursor (not matched yet).",
            labels=["subscription"],
        )
        for name, behind in sorted(figures.lags.items()):
            lag.add_metric([name], behind)
        yield lag
        yield GaugeMetricFamily(
            "cronbus_metrics_figures_age_seconds",
            "How old the store-wide figures of this scrape are.",
            value=max(0.0, now - figures.taken_at),
        )

    def _queue_gauges(self, figures: Figures, now: float) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "cronbus_queue_depth",
            "Runs of a queue in each live state (scheduled, queued, running, cancelling, waiting).",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "cronbus_queue_oldest_age_seconds",
            "How long the oldest queued run of a queue has been due (0: none queued).",
            labels=["queue"],
        )
        counts = {(queue, state): count for queue, state, count in figures.depths}
        for queue, _, _ in figures.depths:
            if queue not in self._queues and len(self._queues) < MAX_QUEUES:
                self._queues[queue] = None
        shown = dict.fromkeys(sorted({*self._queues, *(q for q, _, _ in figures.depths)}))
        for queue in shown:
            for state in LIVE_STATES:
                depth.add_metric([queue, state.value], counts.get((queue, state.value), 0))
            due = figures.oldest.get(queue)
            oldest.add_metric([queue], max(0.0, now - due) if due is not None else 0.0)
        yield depth
        yield oldest
