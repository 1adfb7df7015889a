"""The `cronbus workers` commands: list the registered workers, show one.

A worker's state is what the registry says (``alive``, ``draining`` after SIGTERM, ``stopped``
once it deregistered), except that a worker silent for longer than its own registered lease is
reported ``lost`` (:mod:`cronbus.liveness`): it was killed, paused or cut off, and its runs are
requeued by any other worker's reaper. The lease of this command's process plays no part.

Stopped workers are history, not the cluster: ``list`` hides them unless ``--all`` or
``--state stopped`` asks for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from rich.cells import cell_len
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from .. import run_figures
from ..errors import WorkerNotFoundError
from ..fairness import EVERY_QUEUE
from ..model import Run, WorkerState
from ..services import WorkerView
from . import render
from .connect import AnyServices, Where, run_services, where_options
from .loading import CliError, CronbusGroup, parse_states

_STATE_STYLES = {
    WorkerState.ALIVE: "green",
    WorkerState.DRAINING: "yellow",
    WorkerState.LOST: "bold red",
    WorkerState.STOPPED: "dim",
}
_LIST_COLUMNS = (
    "ID",
    "HOST",
    "PID",
    "STATE",
    "QUEUES",
    "LABELS",
    "CONC",
    "VERSION",
    "STARTED (UTC)",
    "HEARTBEAT",
    "RUNNING",
)
_NARROW_COLUMNS = ("ID", "STATE", "QUEUES", "CONC", "HEARTBEAT", "RUNNING")
"""The columns kept when the full table does not fit the terminal (``workers show`` has the
rest): a state or a heartbeat cut to one letter would read as another value."""
_MIN_WIDTHS = {"ID": 12, "STATE": len("draining"), "QUEUES": 7, "HEARTBEAT": len("59m59s ago")}
_RIGHT = ("PID", "CONC", "HEARTBEAT")
_FLEXIBLE = ("ID", "QUEUES", "RUNNING")
_GAP = 2
"""Blank columns between two table columns (Rich's default padding)."""
_ENDLESS = 100_000
_RUNNING_COLUMNS = ("RUN", "TASK", "QUEUE", "STATE", "ATTEMPT", "LEASE EXPIRES (UTC)")
_RUNNING_SHOWN = 5
"""Running attempts named in a row of ``workers list``; ``workers show`` names them all."""

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of a table."
)


# -- the commands --------------------------------------------------------------------------------
@click.group(cls=CronbusGroup)
def workers() -> None:
    """List, inspect and prune the workers registered in the store.

    A worker is lost when it has not sent a heartbeat for longer than its own lease (the
    CRONBUS_LEASE_SECONDS it was started with); its runs are then requeued.
    """


@workers.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    callback=parse_states(WorkerState),
    help="Only workers in this state (alive, draining, lost, stopped); repeat it or separate "
    "states with commas.",
)
@click.option(
    "--all", "everyone", is_flag=True, help="Include stopped workers (hidden by default)."
)
@where_options()
@_json_option
def list_workers(
    states: tuple[WorkerState, ...], everyone: bool, where: Where, as_json: bool
) -> None:
    """List workers, newest first: state, queues, last heartbeat and the runs they hold.

    Stopped workers (which drained and deregistered) are left out unless --all or
    --state stopped asks for them. QUEUES shows * for a worker serving every queue (one
    started without --queues). Then a line for each task whose queued runs no live worker
    knows: they wait until a worker with that task in its code starts.
    """

    async def read(services: AnyServices) -> tuple[list[WorkerView], list[str]]:
        # Every worker is read, stopped ones too, to say how many the listing leaves out.
        found = await services.workers.list(include_stopped=True)
        return found, await services.workers.unknown_tasks()

    seen, unknown = run_services(where, read)
    hidden = sum(1 for s in seen if s.worker.state is WorkerState.STOPPED)
    if states:
        seen = [s for s in seen if s.worker.state in states]
    elif not everyone:
        seen = [s for s in seen if s.worker.state is not WorkerState.STOPPED]
    else:
        hidden = 0
    if as_json:
        render.print_json([worker_json(s) for s in seen])
        return
    if not seen:
        note = f" ({hidden} stopped: --all shows them)" if hidden and not states else ""
        click.echo(f"no workers{note}")
    else:
        _print_workers(seen)
    for task in unknown:
        render.console().print(Text(f"no worker knows task {task} (runs waiting)", style="yellow"))


@workers.command("show")
@click.argument("worker_id", metavar="ID")
@where_options()
@_json_option
def show_worker(worker_id: str, where: Where, as_json: bool) -> None:
    """Show one worker (stopped ones too) with every run it holds."""
    try:
        one = run_services(where, lambda services: services.workers.get(worker_id))
    except WorkerNotFoundError:
        raise CliError(
            f"no worker has id {worker_id!r} (see 'cronbus workers list --all')"
        ) from None
    if as_json:
        render.print_json(worker_json(one))
        return
    out = render.console()
    out.print(Text.assemble(f"worker {one.worker.id}  ", _state_text(one.worker.state)))
    out.print(_worker_fields(one))
    out.print()
    if one.runs:
        out.print(_running_table(one.runs))
    else:
        out.print("no running attempts")


@workers.command("drain")
@click.argument("worker_id", metavar="ID")
@where_options()
@_json_option
def drain_worker(worker_id: str, where: Where, as_json: bool) -> None:
    """Ask a worker to drain: woken at once, it stops claiming, finishes the runs it holds and
    stops, as on SIGTERM."""
    one = run_services(where, lambda services: services.workers.drain(worker_id))
    if as_json:
        render.print_json(worker_json(one))
        return
    render.console().print(
        f"worker {one.worker.id}: drain requested; it stops claiming at its next heartbeat "
        f"({len(one.runs)} run(s) to finish)"
    )


@workers.command("prune")
@click.option(
    "--older-than",
    "older_than",
    type=click.FloatRange(min=0.0),
    default=86400.0,
    show_default=True,
    help="Seconds of silence after which a worker's row is deleted.",
)
@where_options()
@_json_option
def prune_workers(older_than: float, where: Where, as_json: bool) -> None:
    """Delete the registry rows of workers silent for longer than --older-than (stopped ones,
    and lost ones that are gone). A worker still holding a run keeps its row; workers also
    prune rows silent for a day by themselves."""
    removed = run_services(where, lambda services: services.workers.prune(older_than))
    if as_json:
        render.print_json({"removed": removed})
        return
    render.console().print(f"removed {len(removed)} worker row(s)" + (": " if removed else ""))
    for worker_id in removed:
        render.console().print(f"  {worker_id}")


# -- JSON ----------------------------------------------------------------------------------------
def worker_json(seen: WorkerView) -> dict[str, Any]:
    """A worker as a JSON object, with the runs it holds."""
    worker = seen.worker
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "state": worker.state.value,
        "queues": list(worker.queues),
        "labels": list(worker.labels),
        "concurrency": worker.concurrency,
        "version": worker.version,
        "started_at": render.iso(worker.started_at),
        "heartbeat_at": render.iso(worker.heartbeat_at),
        "heartbeat_age": seen.heartbeat_age,
        "running": [_running_json(run) for run in seen.runs],
    }


def _running_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "state": run.state.value,
        "attempt": run.attempts,
        "lease_expires": render.iso(run.lease_expires),
    }


# -- tables --------------------------------------------------------------------------------------
def _print_workers(seen: Sequence[WorkerView]) -> None:
    out = render.console()
    rows = [_cells(s) for s in seen]
    if _natural_width(rows, _LIST_COLUMNS) <= out.width:
        out.print(_workers_table(rows, _LIST_COLUMNS, {}))
        return
    out.print(_workers_table(rows, _NARROW_COLUMNS, _fit(rows, out.width)))


def _workers_table(
    rows: Sequence[dict[str, str | Text]], columns: Sequence[str], widths: dict[str, int]
) -> Table:
    """The workers with ``columns``, each at most ``widths[name]`` wide (cut with an
    ellipsis; RUNNING, a list, folds instead)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in columns:
        table.add_column(
            name,
            justify="right" if name in _RIGHT else "left",
            no_wrap=name != "RUNNING",
            overflow="ellipsis" if name != "RUNNING" else "fold",
            min_width=min(_MIN_WIDTHS.get(name, len(name)), widths.get(name, _ENDLESS)),
            max_width=widths.get(name),
        )
    for cells in rows:
        table.add_row(*(cells[name] for name in columns))
    return table


def _width(rows: Sequence[dict[str, str | Text]], name: str) -> int:
    """The widest cell of a column, its header included."""
    cells = [cell_len(c.plain if isinstance(c, Text) else c) for row in rows for c in [row[name]]]
    return max([cell_len(name), *cells])


def _natural_width(rows: Sequence[dict[str, str | Text]], columns: Sequence[str]) -> int:
    return sum(_width(rows, name) for name in columns) + _GAP * (len(columns) - 1)


def _fit(rows: Sequence[dict[str, str | Text]], screen: int) -> dict[str, int]:
    """Widths of the narrow table's columns for a screen ``screen`` columns wide.

    STATE, CONC and HEARTBEAT keep their whole width: a state or an age cut short reads as
    another value. ID, QUEUES and RUNNING share what is left, the narrowest first, each
    taking no more than it needs and no less than its minimum.
    """
    fixed = [name for name in _NARROW_COLUMNS if name not in _FLEXIBLE]
    widths = {name: _width(rows, name) for name in fixed}
    left = screen - sum(widths.values()) - _GAP * (len(_NARROW_COLUMNS) - 1)
    flexible = sorted(_FLEXIBLE, key=lambda name: _width(rows, name))
    for i, name in enumerate(flexible):
        share = left // (len(flexible) - i)
        widths[name] = max(_MIN_WIDTHS.get(name, len(name)), min(_width(rows, name), share))
        left -= widths[name]
    return widths


def _cells(seen: WorkerView) -> dict[str, str | Text]:
    worker = seen.worker
    return {
        "ID": worker.id,
        "HOST": worker.host,
        "PID": str(worker.pid),
        "STATE": _state_text(worker.state),
        "QUEUES": ",".join(worker.queues),
        "LABELS": ",".join(worker.labels),
        "CONC": str(worker.concurrency),
        "VERSION": worker.version,
        "STARTED (UTC)": render.human_time(worker.started_at),
        "HEARTBEAT": age(seen.heartbeat_age) + " ago",
        "RUNNING": _running_summary(seen.runs),
    }


def _queues_text(queues: Sequence[str]) -> str:
    """The queues of ``workers show``: ``* (every queue)`` said in words."""
    if list(queues) == [EVERY_QUEUE]:
        return f"{EVERY_QUEUE} (every queue)"
    return ",".join(queues)


def _running_summary(runs: Sequence[Run]) -> str:
    named = ", ".join(f"{run.id} {run.task}" for run in runs[:_RUNNING_SHOWN])
    more = len(runs) - _RUNNING_SHOWN
    return named + (f", +{more} more" if more > 0 else "")


def _worker_fields(seen: WorkerView) -> Table:
    worker = seen.worker
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("host", worker.host),
        ("pid", str(worker.pid)),
        ("queues", _queues_text(worker.queues)),
        ("labels", ",".join(worker.labels) or "-"),
        ("concurrency", str(worker.concurrency)),
        ("version", worker.version),
        ("started", render.human_time(worker.started_at)),
        (
            "heartbeat",
            f"{render.human_time(worker.heartbeat_at)} ({age(seen.heartbeat_age)} ago)",
        ),
        ("running", f"{len(seen.runs)} of {worker.concurrency}"),
    ]
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def _running_table(runs: Sequence[Run]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in _RUNNING_COLUMNS:
        justify: JustifyMethod = "right" if name in ("RUN", "ATTEMPT") else "left"
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis")
    for run in runs:
        table.add_row(
            str(run.id),
            run.task,
            run.queue,
            render.state_text(run.state),
            run_figures.attempts_cell(run),
            render.human_time(run.lease_expires),
        )
    return table


def _state_text(state: WorkerState) -> Text:
    return Text(state.value, style=_STATE_STYLES.get(state, ""))


def age(seconds: float) -> str:
    """A duration for people: ``4s``, ``2m05s``, ``3h02m``, ``2d04h``."""
    whole = max(0, int(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
