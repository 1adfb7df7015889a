"""Console section: the overview of a namespace (``GET /``).

Cards show the figures an operator looks at first (runs running and queued, dead letters,
workers alive, subscriptions failing, the scheduler's lag), each in an element marked
``data-figure`` that the live stream (:mod:`.live`) keeps current. Below, the runs ended per
minute by outcome (``?window=3600``, the last hour, or ``86400``, the last day in quarters of
an hour) and the depth of each queue, which fetch themselves again when the overview's version
changes. Every figure comes from the namespace's shared snapshot
(:meth:`~cronbus.services.overview.OverviewService.snapshot`): twenty tabs cost one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request, Response

from ...errors import InvalidArgumentError
from ...model import QueueDepth
from ...services import Overview
from ...states import RunState
from .. import chart
from ..session import Console
from ..templates import duration, page
from .common import console_router

router = console_router()
DEFAULT_WINDOW = 3600
QUEUE_STATES: tuple[RunState, ...] = (
    RunState.QUEUED,
    RunState.RUNNING,
    RunState.SCHEDULED,
    RunState.WAITING,
    RunState.CANCELLING,
)
"""The columns of the queue depths table, most wanted first."""


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue of the depths table: runs per live state, and since when the oldest queued
    run is due."""

    queue: str
    counts: dict[RunState, int] = field(default_factory=dict)
    oldest_queued: float | None = None


def figures(snapshot: Overview) -> dict[str, str]:
    """The snapshot's figures as the page shows them, by ``data-figure`` name (the live
    stream sends the same, so a tab shows what a reload would)."""
    shown = {f"runs_{state.value}": str(count) for state, count in snapshot.runs.items()}
    shown.update(
        {f"workers_{state.value}": str(count) for state, count in snapshot.workers.items()}
    )
    lag = snapshot.lag
    shown.update(
        dead_letters=str(snapshot.dead_letters),
        dead_runs=str(snapshot.dead_runs),
        dead_deliveries=str(snapshot.dead_deliveries),
        subscriptions_failing=str(len(snapshot.failing_subscriptions)),
        scheduler_lag=duration(lag.p99),
        scheduler_lag_p50=duration(lag.p50),
        scheduler_lag_max=duration(lag.max),
        scheduler_lag_samples=str(lag.samples),
    )
    return shown


def queue_rows(depths: tuple[QueueDepth, ...]) -> list[QueueRow]:
    """The depths (one per queue and state) as one row per queue, by queue name."""
    rows: dict[str, QueueRow] = {}
    for depth in depths:
        row = rows.setdefault(depth.queue, QueueRow(depth.queue, dict.fromkeys(QUEUE_STATES, 0)))
        row.counts[depth.state] = depth.count
        if depth.state is RunState.QUEUED:
            rows[depth.queue] = QueueRow(row.queue, row.counts, depth.oldest)
    return [rows[name] for name in sorted(rows)]


def check_window(value: str | None) -> int:
    """The chart's window in seconds: one of :data:`~cronbus.console.chart.WINDOWS`."""
    if value is None or value == "":
        return DEFAULT_WINDOW
    allowed = ", ".join(str(w) for w in chart.WINDOWS)
    if not value.isdigit() or int(value) not in chart.WINDOWS:
        raise InvalidArgumentError(
            f"window must be one of {allowed} (seconds), got {value[:40]!r}", field="window"
        )
    return int(value)


@router.get("/")
async def overview(request: Request, session: Console) -> Response:
    """The overview of the namespace: cards, the chart, the queue depths."""
    window = check_window(request.query_params.get("window"))
    snapshot = await session.services.overview.snapshot()
    if window == 3600:
        minutes = list(snapshot.minutes)
    else:
        minutes = await session.services.stats.per_minute(window)
    size = chart.minutes_per_bar(window)
    bars = chart.bars(minutes, size)
    per = "minute" if size == 1 else f"{size} minutes"
    label = f"Runs ended per {per} by outcome, {chart.WINDOWS[window]} (UTC)"
    return page(
        request,
        session,
        "overview.html",
        partial="_overview_live.html",
        title="Overview",
        nav="overview",
        snapshot=snapshot,
        figures=figures(snapshot),
        window=window,
        windows=chart.WINDOWS,
        label=label,
        svg=chart.svg(bars, label=label),
        bars=[bar for bar in bars if bar.total],
        series=chart.SERIES,
        totals=chart.totals(bars),
        queues=queue_rows(snapshot.queues),
        queue_states=QUEUE_STATES,
        now=session.services.context.now(),
    )
