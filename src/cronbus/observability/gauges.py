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

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..model import WorkerState
from ..states import RunState
from .figures import Figures, shared_figures

if TYPE_CHECKING:
    from ..app import App

__all__ = ["Aggregate", "Circuits", "WorkerSlots"]

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


class Aggregate:
    """The store-wide gauges of an app's namespace, from the shared figures.

    :meth:`refresh` (awaited by the exposition before each scrape is rendered) takes the
    figures computed at most a few seconds ago, in this process or, through the store's
    snapshots, in another; :meth:`text` renders them. A thousand queues make thousands of
    lines, which ``prometheus_client`` would build and format again at every scrape (200 ms
    on a small machine): the lines of the counts are rendered once per figures instead, and
    only the ages, which grow between two computations, at each scrape.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.figures: Figures | None = None
        self._queues: dict[str, None] = {}
        """Queues seen, so a queue that empties shows 0 instead of vanishing."""
        self._rendered: tuple[Figures, str] | None = None

    async def refresh(self) -> None:
        """Take the shared figures (computed again when older than a few seconds)."""
        self.figures = await shared_figures(self.app)

    def text(self) -> bytes:
        """The gauges in Prometheus's text format (nothing before the first refresh)."""
        figures = self.figures
        if figures is None:
            return b""
        if self._rendered is None or self._rendered[0] is not figures:
            self._rendered = (figures, self._counts(figures))
        return (self._rendered[1] + self._ages(figures, self.app.clock.now())).encode()

    def _counts(self, figures: Figures) -> str:
        for queue, _, _ in figures.depths:
            if queue not in self._queues and len(self._queues) < MAX_QUEUES:
                self._queues[queue] = None
        counts = {(queue, state): count for queue, state, count in figures.depths}
        lines = _header("cronbus_queue_depth", _DEPTH_HELP)
        for queue in self._shown(figures):
            # Queued and running always (0 once empty); the rarer states while they hold runs.
            name = _esc(queue)
            for state in _ALWAYS:
                count = counts.get((queue, state), 0)
                lines.append(f'cronbus_queue_depth{{queue="{name}",state="{state}"}} {count}')
        for (queue, state), count in counts.items():
            if state not in _ALWAYS:
                name = _esc(queue)
                lines.append(f'cronbus_queue_depth{{queue="{name}",state="{state}"}} {count}')
        lines += _header("cronbus_workers", "Registered workers of the namespace by state.")
        for worker_state in _WORKER_STATES:
            count = figures.workers.get(worker_state.value, 0)
            lines.append(f'cronbus_workers{{state="{worker_state.value}"}} {count}')
        lines += _header("cronbus_subscription_lag_events", _LAG_HELP)
        for name, behind in sorted(figures.lags.items()):
            lines.append(f'cronbus_subscription_lag_events{{subscription="{_esc(name)}"}} {behind}')
        return "\n".join(lines) + "\n"

    def _ages(self, figures: Figures, now: float) -> str:
        lines = _header("cronbus_queue_oldest_age_seconds", _AGE_HELP)
        for queue in self._shown(figures):
            due = figures.oldest.get(queue)
            age = max(0.0, now - due) if due is not None else 0.0
            lines.append(f'cronbus_queue_oldest_age_seconds{{queue="{_esc(queue)}"}} {age:.3f}')
        lines += _header("cronbus_metrics_figures_age_seconds", _FIGURES_HELP)
        lines.append(f"cronbus_metrics_figures_age_seconds {max(0.0, now - figures.taken_at):.3f}")
        return "\n".join(lines) + "\n"

    def _shown(self, figures: Figures) -> list[str]:
        return sorted({*self._queues, *(queue for queue, _, _ in figures.depths)})


_ALWAYS = (RunState.QUEUED.value, RunState.RUNNING.value)
_DEPTH_HELP = (
    "Runs of a queue by live state: queued and running always, scheduled, cancelling and "
    "waiting while they hold runs."
)
_AGE_HELP = "How long the oldest queued run of a queue has been due (0: none queued)."
_LAG_HELP = "Events of a subscription's topic past its cursor (not matched yet)."
_FIGURES_HELP = "How old the store-wide figures of this scrape are."


def _header(name: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]


def _esc(value: str) -> str:
    """A label value escaped for the text format (names are plain, but never trust them)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
