"""How the `cronbus jobs` commands show a job: a table, fields, JSON (its state and schedule in
words come from :mod:`cronbus.job_views`, shared with the console)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from ..job_views import describe, job_state, local_iso, planned_fire, zone_of
from ..model import Job, Misfire
from . import render

_STATE_STYLES = {
    "active": "green",
    "paused": "yellow",
    "waiting": "cyan",
    "disabled": "dim",
    "finished": "dim",
}
_LIST_COLUMNS = (
    "NAME",
    "TASK",
    "SCHEDULE",
    "NEXT FIRE (UTC)",
    "STATE",
    "FIRES",
    "MISFIRE",
    "OVERLAP",
)


def job_json(job: Job) -> dict[str, Any]:
    """A job as a JSON object: its definition, its schedule and where it stands."""
    spec, zone, planned = job.spec, zone_of(job), planned_fire(job)
    return {
        "id": job.id,
        "name": spec.name,
        "task": spec.task,
        "state": job_state(job),
        "schedule": describe(job),
        "trigger": spec.trigger,
        "tz": str(zone),
        "next_fire": render.iso(planned),
        "next_fire_local": local_iso(planned, zone),
        "fires": job.fires,
        "max_fires": spec.max_fires,
        "last_fire": render.iso(job.last_fire_at),
        "misfire": spec.misfire.value,
        "misfire_grace": spec.misfire_grace,
        "misfire_max": spec.misfire_max,
        "overlap": spec.overlap.value,
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "timeout": spec.timeout,
        "args": json.loads(spec.args_json),
        "kwargs": json.loads(spec.kwargs_json),
        "children": list(spec.children),
        "calendars": list(spec.calendars),
        "source": spec.source,
        "paused": spec.paused,
        "broadcast": spec.broadcast,
        "shards": spec.shards,
        "enabled": job.enabled,
        "created_at": render.iso(job.created_at),
        "updated_at": render.iso(job.updated_at),
    }


def print_jobs(found: Sequence[Job]) -> None:
    """Print jobs as a table (or say there are none)."""
    if not found:
        click.echo("no jobs")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in _LIST_COLUMNS:
        wrap = column == "SCHEDULE"  # free text gives up its width first, never a time
        justify: JustifyMethod = "right" if column == "FIRES" else "left"
        table.add_column(column, justify=justify, no_wrap=not wrap, overflow="fold")
    for job in found:
        table.add_row(
            job.name,
            job.spec.task,
            describe(job),
            render.human_time(planned_fire(job)),
            state_text(job),
            _fires(job),
            job.spec.misfire.value,
            job.spec.overlap.value,
        )
    render.console().print(table)


def job_fields(job: Job) -> Table:
    """A job's fields, label and value, as ``jobs show`` prints them."""
    spec, zone, planned = job.spec, zone_of(job), planned_fire(job)
    rows = [
        ("task", spec.task),
        ("schedule", describe(job)),
        ("next fire", f"{local_iso(planned, zone)}  ({render.iso(planned)})" if planned else ""),
        ("last fire", render.iso(job.last_fire_at) or ""),
        ("fires", _fires(job)),
        ("misfire", _misfire(job)),
        ("overlap", spec.overlap.value),
        ("queue", spec.queue),
        ("priority", str(spec.priority)),
        ("attempts", str(spec.max_attempts)),
        ("timeout", "" if spec.timeout is None else f"{spec.timeout:g} s"),
        ("args", spec.args_json),
        ("kwargs", spec.kwargs_json),
        ("children", ", ".join(spec.children)),
        ("fan-out", _fanout(job)),
        ("calendars", ", ".join(spec.calendars)),
        ("source", spec.source),
        ("created", render.human_time(job.created_at)),
        ("updated", render.human_time(job.updated_at)),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, value in rows:
        if value:
            grid.add_row(label, value)
    return grid


def _fanout(job: Job) -> str:
    """What each fire of a fan-out job makes: a child per live worker, or N shards."""
    if job.spec.broadcast:
        return "broadcast: one child run per live worker that knows the task"
    if job.spec.shards is not None:
        return f"{job.spec.shards} shards: one child run per shard"
    return ""


def _misfire(job: Job) -> str:
    spec = job.spec
    text = f"{spec.misfire.value} (grace {spec.misfire_grace:g} s"
    if spec.misfire is Misfire.ALL:
        text += f", at most {spec.misfire_max} missed fires"
    return text + ")"


def _fires(job: Job) -> str:
    limit = job.spec.max_fires
    return str(job.fires) if limit is None else f"{job.fires}/{limit}"


def state_text(job: Job) -> Text:
    """A job's state word, styled."""
    state = job_state(job)
    return Text(state, style=_STATE_STYLES[state])
