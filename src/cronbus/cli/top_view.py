"""What ``cronbus top`` draws: one frame from one set of figures, with no I/O.

:class:`Frame` holds what a refresh read (the overview snapshot, the subscriptions with their
lag, the newest dead runs) and the queue depths of the frame before, from which each queue's
net rate is computed: how fast its backlog shrinks (positive) or grows (negative). Rendering is
a pure function of a frame and the time, so it is tested without a terminal.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..model import Run, WorkerState
from ..services.overview import Overview
from ..services.views import SubscriptionView
from ..states import RunState

__all__ = ["Frame", "QueueRow", "queue_rows", "render"]

_DEAD_SHOWN = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRow:
    """One queue as top shows it."""

    queue: str
    queued: int
    running: int
    scheduled: int
    oldest_age: float | None
    """Seconds since the oldest queued run was due (None: nothing queued)."""
    rate: float | None
    """Queued runs drained per second since the previous frame, net of new ones (None on the
    first frame)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """The figures of one refresh."""

    overview: Overview
    subscriptions: Sequence[SubscriptionView] = ()
    dead: Sequence[Run] = ()
    """The newest dead runs, newest first."""
    previous: Mapping[str, int] = field(default_factory=dict)
    """Queued runs per queue in the previous frame."""
    previous_at: float | None = None
    """When the previous frame's overview was taken."""


def queued_by_queue(overview: Overview) -> dict[str, int]:
    """Queued runs per queue in ``overview``."""
    return {d.queue: d.count for d in overview.queues if d.state is RunState.QUEUED}


def queue_rows(frame: Frame) -> list[QueueRow]:
    """Every queue of the overview, busiest first (most queued, then most running)."""
    now = frame.overview.taken_at
    counts: dict[str, dict[RunState, int]] = {}
    oldest: dict[str, float] = {}
    for depth in frame.overview.queues:
        counts.setdefault(depth.queue, {})[depth.state] = depth.count
        if depth.state is RunState.QUEUED and depth.oldest is not None:
            oldest[depth.queue] = depth.oldest
    elapsed = None if frame.previous_at is None else now - frame.previous_at
    rows = []
    for queue, by_state in counts.items():
        queued = by_state.get(RunState.QUEUED, 0)
        rate = None
        if elapsed is not None and elapsed > 0:
            rate = (frame.previous.get(queue, 0) - queued) / elapsed
        rows.append(
            QueueRow(
                queue=queue,
                queued=queued,
                running=by_state.get(RunState.RUNNING, 0) + by_state.get(RunState.CANCELLING, 0),
                scheduled=by_state.get(RunState.SCHEDULED, 0),
                oldest_age=max(0.0, now - oldest[queue]) if queue in oldest else None,
                rate=rate,
            )
        )
    return sorted(rows, key=lambda r: (-r.queued, -r.running, r.queue))


def render(frame: Frame) -> RenderableType:
    """The whole screen: a header line, then queues, workers, subscriptions and dead runs."""
    return Group(
        _header(frame.overview),
        _queues(queue_rows(frame)),
        _subscriptions(frame.subscriptions, frame.overview.failing_subscriptions),
        _dead(frame.dead, frame.overview.taken_at),
    )


def _header(overview: Overview) -> Text:
    workers = overview.workers
    lag = overview.lag
    line = Text()
    line.append(f"namespace {overview.namespace}", style="bold")
    line.append("   workers ")
    line.append(f"{workers.get(WorkerState.ALIVE, 0)} alive", style="green")
    line.append(f", {workers.get(WorkerState.DRAINING, 0)} draining")
    lost = workers.get(WorkerState.LOST, 0)
    line.append(f", {lost} lost", style="bold red" if lost else "")
    line.append("   scheduler lag ")
    if lag.samples:
        line.append(f"p50 {_seconds(lag.p50)}  p99 {_seconds(lag.p99)}  ({lag.samples} fires/h)")
    else:
        line.append("no fires in the last hour", style="dim")
    # The newest bucket is the minute under way: the one before it is whole.
    ended = overview.minutes[-2].total if len(overview.minutes) > 1 else 0
    line.append(f"   ended last minute {ended}")
    dead = overview.dead_letters
    line.append("   dead letters ")
    line.append(str(dead), style="bold red" if dead else "")
    return line


def _queues(rows: Sequence[QueueRow]) -> Table:
    table = _table("Queues", "QUEUE", "QUEUED", "RUNNING", "SCHEDULED", "OLDEST", "RATE/s")
    for row in rows:
        table.add_row(
            row.queue,
            str(row.queued),
            str(row.running),
            str(row.scheduled),
            _seconds(row.oldest_age),
            "-" if row.rate is None else f"{row.rate:+.1f}",
        )
    if not rows:
        table.add_row("(no live runs)", "", "", "", "", "")
    return table


def _subscriptions(subs: Sequence[SubscriptionView], failing: Collection[str]) -> Table:
    table = _table("Subscriptions", "SUBSCRIPTION", "TOPIC", "STATE", "LAG")
    for view in sorted(subs, key=lambda v: (-v.lag, v.subscription.name)):
        name = view.subscription.name
        state = "failing" if name in failing and view.state == "active" else view.state
        style = "bold red" if state in ("failing", "disabled") else ""
        table.add_row(name, view.subscription.topic, Text(state, style=style), str(view.lag))
    if not subs:
        table.add_row("(none)", "", "", "")
    return table


def _dead(runs: Sequence[Run], now: float) -> Table:
    table = _table("Recent dead runs", "ID", "TASK", "QUEUE", "DIED", "ERROR")
    for run in runs[:_DEAD_SHOWN]:
        error = run.error.type if run.error is not None else ""
        died = run.finished_at if run.finished_at is not None else run.updated_at
        table.add_row(str(run.id), run.task, run.queue, f"{_seconds(now - died)} ago", error)
    if not runs:
        table.add_row("(none)", "", "", "", "")
    return table


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", expand=False, pad_edge=False)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
    return table


def _seconds(value: float | None) -> str:
    """A duration for people: 850ms, 12.3s, 4m05s, 2h10m."""
    if value is None or math.isnan(value):
        return "-"
    if value < 1:
        return f"{value * 1000:.0f}ms"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
