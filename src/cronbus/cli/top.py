"""``cronbus top``: a live terminal view of one namespace, refreshed every second.

It shows queues (depth, net drain rate, oldest age), workers, the scheduler's lag, subscriptions
(lag, failing) and the newest dead runs. Every figure comes from the cached overview the console
and the metrics share (:class:`cronbus.services.overview.OverviewService`), so a terminal left
open costs the store what one console tab costs, however often it refreshes. ``--once`` prints
one frame (or, with ``--json``, the figures) and exits: for scripts and for a quick look.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import asdict
from typing import Any

import click
from rich.live import Live

from ..services import Services
from ..services.pages import MAX_LIMIT
from ..services.views import RunQuery
from ..states import RunState
from . import render
from .connect import Where, where_options
from .loading import CliError, resolve_app, run_with_app
from .top_view import Frame, queue_rows, queued_by_queue
from .top_view import render as render_frame

_DEAD_READ = 5


@click.command()
@where_options()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2, max=60),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the figures as JSON.")
def top(where: Where, interval: float, once: bool, as_json: bool) -> None:
    """Watch queues, workers, scheduler lag, subscriptions and dead runs live (Ctrl-C quits)."""
    if as_json and not once:
        raise click.UsageError("--json prints one set of figures: use it with --once")
    if where.remote:
        raise CliError(
            "cronbus top reads the store's shared figures: run it with --app or --store (not --url)"
        )
    app = resolve_app(where.app_spec, where.store_url)
    if where.namespace is not None:
        app.use_namespace(where.namespace)

    async def work(opened: Any) -> None:
        services = Services(opened, namespace=where.namespace)
        if once:
            frame = await _read(services, None)
            if as_json:
                render.print_json(_frame_json(frame))
            else:
                render.console().print(render_frame(frame))
            return
        await _watch(services, interval)

    with contextlib.suppress(KeyboardInterrupt):
        run_with_app(app, work, create=False)


async def _read(services: Services, before: Frame | None) -> Frame:
    """One frame: the cached overview, the subscriptions and the newest dead runs."""
    overview = await services.overview.snapshot()
    subs = await services.subscriptions.list(limit=MAX_LIMIT)
    dead = await services.runs.list(RunQuery(states=[RunState.DEAD]), limit=_DEAD_READ)
    if before is None or before.overview.taken_at == overview.taken_at:
        # The snapshot has not changed yet: keep measuring the rate from the older frame.
        previous = before.previous if before is not None else {}
        previous_at = before.previous_at if before is not None else None
    else:
        previous, previous_at = queued_by_queue(before.overview), before.overview.taken_at
    return Frame(
        overview=overview,
        subscriptions=subs.items,
        dead=dead.items,
        previous=previous,
        previous_at=previous_at,
    )


async def _watch(services: Services, interval: float) -> None:
    """Redraw every ``interval`` seconds until Ctrl-C."""
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    # Ctrl-C sets an event the view looks at between frames, rather than cancelling whatever
    # await it lands in: on a loaded machine one such cancel was lost, and the view went on.
    # (Where the loop cannot take signal handlers, asyncio's own cancel stays.)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
    try:
        frame = await _read(services, None)
        with Live(render_frame(frame), console=render.console(), auto_refresh=False) as live:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await stop.wait()
                if stop.is_set():
                    break
                frame = await _read(services, frame)
                live.update(render_frame(frame), refresh=True)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def _frame_json(frame: Frame) -> dict[str, Any]:
    overview = frame.overview
    return {
        "namespace": overview.namespace,
        "taken_at": render.iso(overview.taken_at),
        "queues": [asdict(row) for row in queue_rows(frame)],
        "workers": {state.value: count for state, count in overview.workers.items()},
        "scheduler_lag": asdict(overview.lag),
        "dead_letters": overview.dead_letters,
        "subscriptions": [
            {
                "name": view.subscription.name,
                "topic": view.subscription.topic,
                "state": view.state,
                "lag": view.lag,
                "failing": view.subscription.name in overview.failing_subscriptions,
            }
            for view in frame.subscriptions
        ],
        "dead_runs": [render.run_json(run) for run in frame.dead],
    }
