"""Prometheus metrics of one app: counters and histograms, bumped where things happen.

Each :class:`~cronbus.App` has its own :class:`Metrics` with its own ``CollectorRegistry`` (never
the process-wide default one: tests and tools run several apps in one process). The engines
call the ``run_*``, ``fired``, ``delivered`` ... methods below on their paths; the store calls
:meth:`Metrics.transaction` and :meth:`Metrics.published` (see :mod:`.hooks`). Gauges that need
a count over the store come from one shared, cached aggregate instead (:mod:`.gauges`).

The hot path stays cheap: each label set's child is looked up in a dict of the ones already
bound (``labels()`` costs three times an ``inc()``), and nothing else is allocated per run.
Label values are names (task, queue, job, subscription, topic, store method), never ids; each
family keeps at most :data:`MAX_SERIES` label sets, and values past that count under
``OTHER``, so a runaway set of names cannot grow a process without bound.

Switched off with ``App(metrics=False)`` or ``CRONBUS_METRICS=0``: the app then has no
:class:`Metrics` at all and the engines skip every call (the benchmark's "metrics off").
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..errors import ConfigurationError
from ..states import AttemptOutcome
from ..validation import shorten
from .gauges import Circuits, WorkerSlots

if TYPE_CHECKING:
    from ..model import ClaimedRun, Outcome, Run
    from .exposition import Exposition

__all__ = [
    "MAX_SERIES",
    "METRICS_VARIABLE",
    "OTHER",
    "Metrics",
    "metrics_enabled",
]

METRICS_VARIABLE = "CRONBUS_METRICS"
"""``0``/``false``/``off`` switches an app's metrics off unless the app says otherwise."""
MAX_SERIES = 10_000
"""Label sets one family keeps; later new ones are counted under :data:`OTHER`."""
OTHER = "_other"
_FALSE = ("0", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")
# Buckets in seconds. Runs: a no-op's milliseconds to an hour's batch job; waits (start delay,
# scheduler lag): a millisecond (an idle worker) to minutes (a backlog); pushes: a fast webhook
# to its timeout; store transactions: half a millisecond (SQLite inline) to seconds (a lock).
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
PUSH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def metrics_enabled(given: bool | None, env: Mapping[str, str] | None = None) -> bool:
    """Whether an app keeps metrics: ``given``, else ``CRONBUS_METRICS`` (default on)."""
    if given is not None:
        return bool(given)
    raw = (os.environ if env is None else env).get(METRICS_VARIABLE, "").strip().lower()
    if not raw or raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigurationError(
        f"{METRICS_VARIABLE}: expected 1 or 0 (true/false, on/off), got {shorten(raw)}"
    )


class _Family:
    """One labelled family and the children already bound, by label values."""

    __slots__ = ("children", "metric")

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def child(self, key: tuple[str, ...]) -> Any:
        """The child of ``key``, bound once (the hot path's only lookup)."""
        found = self.children.get(key)
        if found is None:
            if len(self.children) >= MAX_SERIES:
                key = (OTHER,) * len(key)
                found = self.children.get(key)
            if found is None:
                found = self.children[key] = self.metric.labels(*key)
        return found


class Metrics:
    """The counters and histograms of one app, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        """Everything this app exports: the families here, and the collectors of
        :mod:`.gauges` registered by the roles and the exposition."""
        r = self.registry
        self.slots = WorkerSlots()
        """Workers register here while they run: ``cronbus_worker_slots``."""
        self.circuits = Circuits()
        """Dispatchers register here while they run: ``cronbus_circuit_open``."""
        r.register(self.slots)
        r.register(self.circuits)
        self.exposition: Exposition | None = None
        """What renders this registry for /metrics, with the store-wide gauges (made by
        :func:`cronbus.observability.exposition.exposition_of` on first use)."""
        self._runs = _Family(
            Counter(
                "cronbus_runs",
                "Attempts recorded by this process's workers, by outcome (succeeded, failed "
                "and timed_out with a retry ahead, dead with none left, cancelled, lost).",
                ["task", "queue", "outcome"],
                registry=r,
            )
        )
        self._duration = _Family(
            Histogram(
                "cronbus_run_duration_seconds",
                "How long attempts ran, from their start to their end.",
                ["task", "queue"],
                buckets=RUN_BUCKETS,
                registry=r,
            )
        )
        self._delay = _Family(
            Histogram(
                "cronbus_run_start_delay_seconds",
                "How late attempts started: start time minus the run's due time (eta).",
                ["queue"],
                buckets=WAIT_BUCKETS,
                registry=r,
            )
        )
        self._fires = _Family(
            Counter(
                "cronbus_job_fires",
                "Job fires applied by this process's scheduler: run (runs created on time), "
                "misfired (late, handled by the misfire policy), skipped (late, no run).",
                ["job", "result"],
                registry=r,
            )
        )
        self.scheduler_lag = Histogram(
            "cronbus_scheduler_lag_seconds",
            "How late job runs were created: creation time minus fire time (0 when created "
            "ahead, as the scheduler's look-ahead does).",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self._published = _Family(
            Counter(
                "cronbus_events_published",
                "Events this process appended to topics (ids already stored not counted).",
                ["topic"],
                registry=r,
            )
        )
        self._deliveries = _Family(
            Counter(
                "cronbus_deliveries",
                "Pushes ended by this process's dispatcher: acked; failed and timed_out with a "
                "retry ahead; dead with none left; lost (cut short by a stop).",
                ["subscription", "outcome"],
                registry=r,
            )
        )
        self._push = _Family(
            Histogram(
                "cronbus_delivery_duration_seconds",
                "How long pushes to targets took.",
                ["subscription"],
                buckets=PUSH_BUCKETS,
                registry=r,
            )
        )
        self._store = _Family(
            Histogram(
                "cronbus_store_transaction_seconds",
                "Write transactions of the store by store method, as the caller waited for "
                "them (the database's lock included).",
                ["op"],
                buckets=STORE_BUCKETS,
                registry=r,
            )
        )

    # -- worker ----------------------------------------------------------------------------------
    def run_started(self, queue: str, delay: float) -> None:
        """An attempt started ``delay`` seconds after its run's due time."""
        self._delay.child((queue,)).observe(delay if delay > 0.0 else 0.0)

    def attempt_ended(self, task: str, queue: str, seconds: float) -> None:
        """An attempt ran for ``seconds``."""
        self._duration.child((task, queue)).observe(seconds)

    def runs_recorded(
        self, ended: Sequence[tuple[ClaimedRun, Outcome]], done: Sequence[bool]
    ) -> None:
        """Count the ended attempts the store recorded (``done``), one each."""
        child = self._runs.child
        for (claimed, outcome), recorded in zip(ended, done, strict=True):
            if recorded:
                child((claimed.task, claimed.queue, outcome_label(outcome))).inc()

    def runs_lost(self, runs: Sequence[Run]) -> None:
        """Count runs whose worker was lost (requeued, or dead past ``max_lost``)."""
        for run in runs:
            self._runs.child((run.task, run.queue, AttemptOutcome.LOST.value)).inc()

    # -- scheduler ---------------------------------------------------------------------------------
    def fired(self, job: str, result: str, lags: Sequence[float]) -> None:
        """A job's fire was applied (``result``: run, misfired or skipped), creating runs
        ``lags`` seconds after their fire times."""
        self._fires.child((job, result)).inc()
        for lag in lags:
            self.scheduler_lag.observe(lag if lag > 0.0 else 0.0)

    # -- events ------------------------------------------------------------------------------------
    def published(self, topic: str, count: int) -> None:
        """``count`` new events were appended to ``topic``."""
        if count:
            self._published.child((topic,)).inc(count)

    def delivered(self, subscription: str, outcome: str, seconds: float | None) -> None:
        """A push of ``subscription`` ended (``seconds``: how long it took, None when it never
        reached the target)."""
        self._deliveries.child((subscription, outcome)).inc()
        if seconds is not None:
            self._push.child((subscription,)).observe(seconds)

    # -- store -------------------------------------------------------------------------------------
    def transaction(self, op: str, seconds: float) -> None:
        """A write transaction of store method ``op`` took ``seconds``."""
        self._store.child((op,)).observe(seconds)


def outcome_label(outcome: Outcome) -> str:
    """The ``outcome`` label of one recorded attempt: its own outcome, but ``dead`` for a
    failure or timeout that leaves the run no retry (so each attempt counts once, and a sum
    over outcomes is the attempts recorded)."""
    kind = outcome.outcome
    if kind in (AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT) and outcome.retry_at is None:
        return "dead"
    return kind.value
