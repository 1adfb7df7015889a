"""The `cronbus connectors` commands: add, list, show, pause, resume, stop, restart, remove, and
a connector's dead records.

A connector's config is JSON given inline or read from a file (``@path``); it is validated by
its kind before anything is stored, and each refusal names the field. ``show`` prints each
task with its state, the worker holding it, its positions, its lag (a sink's events not yet
written) and its per-record outcomes. Every command takes ``--json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..connectors.records import DeadRecord
from ..services import ConnectorView, TaskView
from . import render
from .connect import Where, run_services, where_options
from .loading import CliError, CronbusGroup

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)
name_argument = click.argument("name", metavar="NAME")

_STATE_STYLES = {
    "running": "green",
    "unassigned": "blue",
    "paused": "yellow",
    "stopped": "dim",
    "failed": "bold red",
    "mixed": "yellow",
}


@click.group(cls=CronbusGroup)
def connectors() -> None:
    """Add, inspect, pause, resume, restart and remove connectors.

    A source connector (sql-source, file-source) moves records of another system into a
    topic; a sink connector (file-sink, postgres-sink) writes a topic's events elsewhere.
    Workers run their tasks (unless started with --no-connectors); positions move only after
    delivery. File and database connectors touch only what the operator allows:
    CRONBUS_CONNECTOR_FILES (directories) and CRONBUS_CONNECTOR_DATABASES (databases, never
    the store's own); both are empty by default.
    """


# -- JSON ----------------------------------------------------------------------------------------
def task_json(view: TaskView) -> dict[str, Any]:
    """A task as a JSON object."""
    task = view.task
    return {
        "task": task.index,
        "state": task.state.value,
        "worker": task.holder,
        "lease_expires_at": render.iso(task.lease_expires_at),
        "epoch": task.epoch,
        "error": task.error,
        "positions": dict(task.positions),
        "lag": view.lag,
        "delivered": task.counts.delivered,
        "dead": task.counts.dead,
        "retried": task.counts.retried,
        "config": dict(task.config),
    }


def connector_json(view: ConnectorView) -> dict[str, Any]:
    """A connector as a JSON object, with its tasks."""
    spec = view.connector.spec
    out: dict[str, Any] = {
        "name": spec.name,
        "kind": spec.kind,
        "direction": spec.direction.value,
        "topic": spec.topic,
        "namespace": spec.namespace,
        "state": view.state,
        "tolerance": spec.tolerance.value,
        "max_tasks": spec.max_tasks,
        "config": dict(spec.config),
        "topic_end": view.topic_end,
        "created_at": render.iso(view.connector.created_at),
        "tasks": [task_json(t) for t in view.tasks],
    }
    if view.created is not None:
        out["created"] = view.created
    return out


def dead_json(record: DeadRecord) -> dict[str, Any]:
    """A dead record as a JSON object."""
    return {
        "id": record.id,
        "task": record.task,
        "partition": record.partition,
        "offset": record.offset,
        "error": record.error,
        "created_at": render.iso(record.created_at),
        "record": dict(record.record),
    }


# -- text ----------------------------------------------------------------------------------------
def _state(state: str) -> Text:
    return Text(state, style=_STATE_STYLES.get(state, ""))


def _positions(view: TaskView) -> str:
    positions = view.task.positions
    if not positions:
        return "-"
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(positions.items()))


def _tasks_table(view: ConnectorView) -> Table:
    table = Table(box=None, pad_edge=False)
    for column in ("TASK", "STATE", "WORKER", "POSITION", "LAG", "DELIVERED", "DEAD", "RETRIED"):
        table.add_column(column, justify="right" if column in {"TASK", "LAG"} else "left")
    for task_view in view.tasks:
        task = task_view.task
        table.add_row(
            str(task.index),
            _state(task.state.value),
            task.holder or "-",
            _positions(task_view),
            "-" if task_view.lag is None else str(task_view.lag),
            str(task.counts.delivered),
            str(task.counts.dead),
            str(task.counts.retried),
        )
    return table


def print_connector(view: ConnectorView) -> None:
    """A connector's facts and its tasks."""
    out = render.console()
    spec = view.connector.spec
    out.print(Text.assemble(f"connector {spec.name}  ", _state(view.state)))
    out.print(f"kind       {spec.kind} ({spec.direction.value})")
    out.print(f"topic      {spec.topic} (end {view.topic_end})")
    out.print(f"tolerance  {spec.tolerance.value}")
    out.print(f"config     {json.dumps(dict(spec.config), sort_keys=True)}")
    out.print(_tasks_table(view))
    for task_view in view.tasks:
        if task_view.task.error:
            out.print(f"task {task_view.task.index} failed: {task_view.task.error}")


def print_connectors(views: list[ConnectorView]) -> None:
    """Connectors as a table."""
    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "KIND", "TOPIC", "STATE", "TASKS", "DELIVERED", "DEAD", "LAG"):
        table.add_column(column)
    for view in views:
        spec = view.connector.spec
        lags = [t.lag for t in view.tasks if t.lag is not None]
        table.add_row(
            spec.name,
            spec.kind,
            spec.topic,
            _state(view.state),
            str(len(view.tasks)),
            str(sum(t.task.counts.delivered for t in view.tasks)),
            str(sum(t.task.counts.dead for t in view.tasks)),
            str(max(lags)) if lags else "-",
        )
    render.console().print(table)


# -- commands ------------------------------------------------------------------------------------
def read_config(text: str) -> dict[str, Any]:
    """A config from JSON text, or from the file after ``@``."""
    source = "--config"
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"--config file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"{source}: cannot read it ({exc.strerror})") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(config, dict):
        raise CliError(f"{source}: must be a JSON object")
    return config


@connectors.command("add")
@name_argument
@click.option("--kind", required=True, help="The connector kind, e.g. sql-source, file-sink.")
@click.option(
    "--config", "config_text", required=True, metavar="JSON|@FILE", help="The config (JSON)."
)
@click.option(
    "--tolerance",
    type=click.Choice(["none", "all"]),
    default="none",
    show_default=True,
    help="none: a bad record fails the task; all: it goes to dead letters.",
)
@click.option("--tasks", "max_tasks", type=int, default=1, show_default=True, help="Tasks at most.")
@where_options()
@json_option
def add(
    name: str,
    kind: str,
    config_text: str,
    tolerance: str,
    max_tasks: int,
    where: Where,
    as_json: bool,
) -> None:
    """Create a connector (the same definition again changes nothing)."""
    config = read_config(config_text)
    view: ConnectorView = run_services(
        where,
        lambda s: s.connectors.create(name, kind, config, tolerance=tolerance, max_tasks=max_tasks),
    )
    if as_json:
        render.print_json(connector_json(view))
        return
    verb = "created" if view.created else "unchanged (exists with this definition)"
    click.echo(
        f"connector {name} {verb}: {len(view.tasks)} task(s), {kind} -> {view.connector.spec.topic}"
    )


@connectors.command("list")
@where_options()
@json_option
def list_connectors(where: Where, as_json: bool) -> None:
    """List connectors: kind, topic, state, tasks, outcomes and lag."""
    views: list[ConnectorView] = run_services(where, lambda s: s.connectors.list())
    if as_json:
        render.print_json([connector_json(v) for v in views])
    elif not views:
        click.echo("no connectors")
    else:
        print_connectors(views)


@connectors.command("show")
@name_argument
@where_options()
@json_option
def show(name: str, where: Where, as_json: bool) -> None:
    """Show a connector: its config and each task's state, worker, positions, lag and
    per-record outcomes."""
    view: ConnectorView = run_services(where, lambda s: s.connectors.get(name))
    if as_json:
        render.print_json(connector_json(view))
    else:
        print_connector(view)


def _command(verb: str, help_text: str) -> click.Command:
    @name_argument
    @where_options()
    @json_option
    def command(name: str, where: Where, as_json: bool) -> None:
        view: ConnectorView = run_services(where, lambda s: getattr(s.connectors, verb)(name))
        if as_json:
            render.print_json(connector_json(view))
        else:
            click.echo(f"connector {name}: {view.state}")

    command.__doc__ = help_text
    return connectors.command(verb)(command)


_command("pause", "Pause a connector's tasks (they keep their positions).")
_command("resume", "Resume a connector's paused or stopped tasks.")
_command("stop", "Stop a connector's tasks until resumed (they keep their positions).")


@connectors.command("restart")
@name_argument
@click.option("--task", type=int, help="Restart this task only (its index).")
@where_options()
@json_option
def restart(name: str, task: int | None, where: Where, as_json: bool) -> None:
    """Restart a connector's tasks (failed ones run again) from their committed positions."""
    view: ConnectorView = run_services(where, lambda s: s.connectors.restart(name, task))
    if as_json:
        render.print_json(connector_json(view))
    else:
        click.echo(f"connector {name}: {view.state}")


@connectors.command("remove")
@name_argument
@where_options()
@json_option
def remove(name: str, where: Where, as_json: bool) -> None:
    """Remove a connector with its tasks, positions and dead records."""
    run_services(where, lambda s: s.connectors.remove(name))
    if as_json:
        render.print_json({"name": name, "removed": True})
    else:
        click.echo(f"connector {name} removed")


@connectors.command("dead")
@name_argument
@click.option("--limit", type=int, default=50, show_default=True, help="Records at most.")
@where_options()
@json_option
def dead(name: str, limit: int, where: Where, as_json: bool) -> None:
    """A connector's dead records (tolerance all), newest first, with their errors."""
    records: list[DeadRecord] = run_services(
        where, lambda s: s.connectors.dead_records(name, limit)
    )
    if as_json:
        render.print_json([dead_json(r) for r in records])
        return
    if not records:
        click.echo("no dead records")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("ID", "TASK", "WHERE", "ERROR"):
        table.add_column(column)
    for record in records:
        where_text = record.partition or (f"offset {record.offset}" if record.offset else "-")
        table.add_row(str(record.id), str(record.task), where_text, record.error)
    render.console().print(table)
