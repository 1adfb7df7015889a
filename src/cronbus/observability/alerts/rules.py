"""The pure core of alerting, part one: what a rule finds in the figures.

:func:`findings` turns one rule and one namespace's :class:`Figures` into the alerts that hold
now, one :class:`Finding` per subject (a queue, a job, a worker...); what each alert does next
is :mod:`.lifecycle`'s. Nothing here does I/O or reads a clock: the evaluator (:mod:`.engine`)
reads the figures and passes ``now`` in them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...fairness import EVERY_QUEUE
from ...model import QueueDepth, WorkerInfo, WorkerState
from ...states import RunState
from .records import (
    WHOLE,
    AlertRule,
    RuleKind,
)

DEFAULT_FAILURES = 3
"""job-failures: dead runs in a row that fire the rule when ``count`` is not given."""
_WAITING = (RunState.QUEUED, RunState.SCHEDULED)
_FINISHED = (RunState.SUCCEEDED, RunState.DEAD)
"""The run endings a job's streak counts (cancelled and skipped runs are neither)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadRuns:
    """The dead runs of one task waiting for an operator (among the newest ones read)."""

    task: str
    queues: tuple[str, ...]
    count: int
    newest: int
    """The newest one's id."""
    error: str | None = None
    """The newest one's last error, first line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRuns:
    """A job and the states of its newest runs, newest first."""

    name: str
    states: tuple[RunState, ...]
    next_fire_at: float | None = None
    """When it fires next, if it is active (scheduler-lag watches an overdue fire)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionHealth:
    """What an operator needs to know about one subscription."""

    name: str
    failing: bool
    reasons: tuple[str, ...] = ()
    """Why it fails: disabled, deliveries retrying or dead."""
    circuit_open: bool = False
    circuit_failures: int = 0
    """The failed pushes in a row that open its circuit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """One namespace's figures at ``now``, read once per evaluation for every rule.

    Each field is filled only when a rule needs it (the evaluator reads nothing else).
    """

    namespace: str
    now: float
    queues: tuple[QueueDepth, ...] = ()
    workers: tuple[WorkerInfo, ...] = ()
    dead: tuple[DeadRuns, ...] = ()
    jobs: tuple[JobRuns, ...] = ()
    fire_lags: tuple[float, ...] = ()
    """How late the recent job runs were created, in seconds."""
    lag_window: float = 300.0
    subscriptions: tuple[SubscriptionHealth, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """A rule holding for one subject, described for a human."""

    subject: str
    message: str


# -- findings ------------------------------------------------------------------------------
def findings(rule: AlertRule, figures: Figures) -> list[Finding]:
    """The alerts ``rule`` finds in ``figures`` (none for a custom rule: the evaluator calls
    its function, see :func:`custom_findings`)."""
    finder = _FINDERS.get(rule.kind)
    return [] if finder is None else finder(rule, figures)


def custom_findings(result: object) -> list[Finding]:
    """A custom check's answer as findings: None or an empty value (all well), a message (one
    alert about the whole namespace), or a mapping of subject to message."""
    if result is None or result is False or result == "" or result == {}:
        return []
    if isinstance(result, Mapping):
        return [Finding(subject=str(k), message=str(v)) for k, v in result.items() if v]
    return [Finding(subject=WHOLE, message=str(result))]


def _job_failures(rule: AlertRule, figures: Figures) -> list[Finding]:
    needed = rule.count or DEFAULT_FAILURES
    found = []
    for job in figures.jobs:
        if rule.job is not None and job.name != rule.job:
            continue
        ended = [state for state in job.states if state in _FINISHED][:needed]
        if len(ended) == needed and all(state is RunState.DEAD for state in ended):
            message = f"job {job.name}: its last {needed} runs failed (dead) in a row"
            found.append(Finding(subject=job.name, message=message))
    return found


def _dead_runs(rule: AlertRule, figures: Figures) -> list[Finding]:
    above = rule.threshold or 0
    found = []
    for dead in figures.dead:
        if rule.task is not None and dead.task != rule.task:
            continue
        if rule.queue is not None and rule.queue not in dead.queues:
            continue
        if dead.count > above:
            runs = "run" if dead.count == 1 else "runs"
            error = f": {dead.error}" if dead.error else ""
            message = (
                f"task {dead.task}: {dead.count} dead {runs} waiting "
                f"(newest: run {dead.newest}{error})"
            )
            found.append(Finding(subject=dead.task, message=message))
    return found


def queued(figures: Figures) -> dict[str, QueueDepth]:
    """Each queue's queued runs (due, waiting for a worker), by queue."""
    return {d.queue: d for d in figures.queues if d.state is RunState.QUEUED}


def _queue_depth(rule: AlertRule, figures: Figures) -> list[Finding]:
    limit = rule.threshold or 0
    return [
        Finding(
            subject=queue,
            message=f"queue {queue}: {depth.count} runs queued (threshold {limit:g})",
        )
        for queue, depth in sorted(queued(figures).items())
        if (rule.queue is None or queue == rule.queue) and depth.count > limit
    ]


def _queue_age(rule: AlertRule, figures: Figures) -> list[Finding]:
    limit = rule.threshold or 0
    found = []
    for queue, depth in sorted(queued(figures).items()):
        if (rule.queue is not None and queue != rule.queue) or depth.oldest is None:
            continue
        age = figures.now - depth.oldest
        if age > limit:
            message = (
                f"queue {queue}: its oldest queued run has waited {_seconds(age)} "
                f"(threshold {_seconds(limit)}; {depth.count} queued)"
            )
            found.append(Finding(subject=queue, message=message))
    return found


def p99(values: Sequence[float]) -> float | None:
    """The 99th percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(max(0.0, v) for v in values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def _scheduler_lag(rule: AlertRule, figures: Figures) -> list[Finding]:
    limit = rule.threshold or 0
    worst = p99(figures.fire_lags)
    overdue = [
        (figures.now - job.next_fire_at, job.name)
        for job in figures.jobs
        if job.next_fire_at is not None and figures.now - job.next_fire_at > limit
    ]
    parts = []
    if worst is not None and worst > limit:
        parts.append(
            f"job runs were created {_seconds(worst)} late (p99 of {len(figures.fire_lags)} "
            f"fires in the last {_seconds(figures.lag_window)})"
        )
    if overdue:
        late, name = max(overdue)
        # A fire overdue means no scheduler fires at all (none running, or stuck).
        parts.append(f"job {name}'s fire is {_seconds(late)} overdue")
    if not parts:
        return []
    message = f"scheduler lag over {_seconds(limit)}: " + "; ".join(parts)
    return [Finding(subject=WHOLE, message=message)]


def _subscription_failing(rule: AlertRule, figures: Figures) -> list[Finding]:
    return [
        Finding(
            subject=sub.name,
            message=f"subscription {sub.name} is failing: {', '.join(sub.reasons) or 'failing'}",
        )
        for sub in figures.subscriptions
        if sub.failing and (rule.subscription is None or sub.name == rule.subscription)
    ]


def _circuit_open(rule: AlertRule, figures: Figures) -> list[Finding]:
    return [
        Finding(
            subject=sub.name,
            message=(
                f"subscription {sub.name}: circuit open (its last {sub.circuit_failures} "
                "pushes failed; the target is probed, not pushed)"
            ),
        )
        for sub in figures.subscriptions
        if sub.circuit_open and (rule.subscription is None or sub.name == rule.subscription)
    ]


def _worker_lost(rule: AlertRule, figures: Figures) -> list[Finding]:
    return [
        Finding(
            subject=worker.id,
            message=(
                f"worker {worker.id} (host {worker.host}, pid {worker.pid}) is lost: no "
                f"heartbeat since {_clock(worker.heartbeat_at)} UTC"
            ),
        )
        for worker in sorted(figures.workers, key=lambda w: w.id)
        if worker.state is WorkerState.LOST and (rule.worker is None or worker.id == rule.worker)
    ]


def served(queue: str, workers: Iterable[WorkerInfo]) -> bool:
    """True when a live (alive, not draining) worker serves ``queue``."""
    return any(
        w.state is WorkerState.ALIVE and (queue in w.queues or EVERY_QUEUE in w.queues)
        for w in workers
    )


def _queue_unserved(rule: AlertRule, figures: Figures) -> list[Finding]:
    waiting: dict[str, int] = {}
    for depth in figures.queues:
        if depth.state in _WAITING:
            waiting[depth.queue] = waiting.get(depth.queue, 0) + depth.count
    names = [rule.queue] if rule.queue is not None else sorted(waiting)
    found = []
    for queue in names:
        if not served(queue, figures.workers):
            count = waiting.get(queue, 0)
            message = f"queue {queue}: no live worker serves it ({count} runs waiting)"
            found.append(Finding(subject=queue, message=message))
    return found


_FINDERS = {
    RuleKind.JOB_FAILURES: _job_failures,
    RuleKind.DEAD_RUNS: _dead_runs,
    RuleKind.QUEUE_DEPTH: _queue_depth,
    RuleKind.QUEUE_AGE: _queue_age,
    RuleKind.SCHEDULER_LAG: _scheduler_lag,
    RuleKind.SUBSCRIPTION_FAILING: _subscription_failing,
    RuleKind.CIRCUIT_OPEN: _circuit_open,
    RuleKind.WORKER_LOST: _worker_lost,
    RuleKind.QUEUE_UNSERVED: _queue_unserved,
}


def _seconds(value: float) -> str:
    if value >= 120:
        return f"{value / 60:.0f} min"
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _clock(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
