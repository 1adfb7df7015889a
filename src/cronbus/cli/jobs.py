"""The `cronbus jobs` commands: list, show, next, add, update, pause, resume, remove, trigger.

A job's state, as these commands show it, is one word: ``active`` (it will fire), ``paused``,
``disabled`` (gone from the app's code: kept, never fired, until removed), ``waiting`` (an
``after`` job whose run has not ended yet, so its next fire is not planned) or ``finished`` (no
fire left). A paused or disabled job shows no next fire, because it has none until it is resumed
or defined again, whatever the store kept.

Every definition is checked (trigger, task, arguments, policies) before the store is changed, so
a refused command changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from ..app import App
from ..errors import CronbusError
from ..jobs import first_fire
from ..model import Job, Misfire, Overlap, Run, RunFilter
from ..triggers import make_trigger, trigger_from_spec
from . import render
from .loading import CliError, CronbusGroup, app_options, resolve_app, run_with_app
from .runs import _json_array, _json_object

FC = TypeVar("FC", bound=Callable[..., Any])
_TRIGGERS = ("cron", "every", "after", "at")
_TRIGGER_OPTIONS = (*_TRIGGERS, "tz", "start", "end", "jitter")
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
_RECENT_RUNS = 10

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)
_name_argument = click.argument("name", metavar="NAME")


# -- the group and its read commands -------------------------------------------------------------
@click.group(cls=CronbusGroup)
def jobs() -> None:
    """List, inspect, add, change, pause, resume, remove and fire jobs.

    A job is a task plus a trigger (--cron, --every, --after or --at) and its policies.
    Commands that define or fire jobs (add, update, trigger) need --app for its tasks.
    """


@jobs.command("list")
@app_options()
@_json_option
def list_jobs(app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """List every job: task, schedule, next fire, state, fire count and policies."""
    found = run_with_app(resolve_app(app_spec, store_url), lambda app: app.jobs.list())
    if as_json:
        render.print_json([job_json(job) for job in found])
    else:
        _print_jobs(found)


@jobs.command("show")
@_name_argument
@app_options()
@_json_option
def show_job(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Show everything about one job, with its last 10 runs."""

    async def fetch(app: App) -> tuple[Job, list[Run]]:
        job = await app.jobs.get(name)
        recent = RunFilter(job_id=job.id, limit=_RECENT_RUNS)
        return job, await app.store.list_runs(recent)

    job, runs = run_with_app(resolve_app(app_spec, store_url), fetch)
    if as_json:
        render.print_json({**job_json(job), "runs": [render.run_json(run) for run in runs]})
        return
    out = render.console()
    out.print(Text.assemble(f"job {job.name}  ", _state_text(job)))
    out.print(_job_fields(job))
    out.print()
    render.print_runs(runs)


@jobs.command("next")
@_name_argument
@click.option(
    "-n",
    "--count",
    type=click.IntRange(1, 1000),
    default=5,
    show_default=True,
    help="How many fire times to show.",
)
@app_options()
@_json_option
def next_fires(
    name: str, count: int, app_spec: str | None, store_url: str | None, as_json: bool
) -> None:
    """Show the job's next fire times, in its time zone and in UTC.

    A paused, disabled or finished job has none; an `after` job only its next one, because the
    fire after it waits for that run to end.
    """

    async def fetch(app: App) -> tuple[Job, list[float]]:
        job = await app.jobs.get(name)
        if _planned(job) is None:
            return job, []
        known = 1 if job.spec.after_seconds is not None else count
        return job, await app.jobs.next(name, known)

    job, times = run_with_app(resolve_app(app_spec, store_url), fetch)
    zone = _zone(job)
    if as_json:
        fires = [{"local": _local_iso(t, zone), "utc": render.iso(t)} for t in times]
        render.print_json({"name": job.name, "tz": str(zone), "fires": fires})
    elif not times:
        click.echo(f"job {job.name} is {job_state(job)}: no fire planned")
    else:
        for t in times:
            click.echo(f"{_local_iso(t, zone)}  {render.iso(t)}")


# -- define and change ---------------------------------------------------------------------------
def _iso_time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """Parse an ISO-8601 date-time; a naive one is read in --tz by the trigger."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO-8601 date-time like 2026-05-01T12:00:00+02:00"
        ) from None


def _optional(parse: Callable[[click.Context, click.Parameter, str], Any]) -> Any:
    """A callback that leaves an option that was not given as None."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        return None if value is None else parse(ctx, param, value)

    return callback


_SECONDS = click.FloatRange(min=0, min_open=True)
_DEFINITION_OPTIONS = (
    click.option("--task", metavar="TASK", help="The task the job runs (a task of the --app)."),
    click.option("--cron", metavar="EXPR", help="Fire on a cron expression (5 or 6 fields)."),
    click.option("--every", type=_SECONDS, metavar="SECONDS", help="Fire at a fixed rate."),
    click.option(
        "--after", type=_SECONDS, metavar="SECONDS", help="Fire this long after each run ends."
    ),
    click.option("--at", callback=_iso_time, metavar="ISO-TIME", help="Fire once, at this time."),
    click.option("--tz", metavar="ZONE", help="IANA time zone of --cron and naive times [UTC]."),
    click.option("--start", callback=_iso_time, metavar="ISO", help="Fire no sooner than this."),
    click.option("--end", callback=_iso_time, metavar="ISO", help="Fire no later than this."),
    click.option(
        "--jitter",
        type=click.FloatRange(min=0),
        metavar="S",
        help="Spread each fire over up to this many seconds.",
    ),
    click.option(
        "--args",
        metavar="JSON-ARRAY",
        callback=_optional(_json_array),
        help="Positional arguments of the task, as a JSON array.",
    ),
    click.option(
        "--kwargs",
        metavar="JSON-OBJECT",
        callback=_optional(_json_object),
        help="Keyword arguments of the task, as a JSON object.",
    ),
    click.option(
        "--misfire",
        type=click.Choice([m.value for m in Misfire]),
        help="What to do about fires missed by more than the grace [once].",
    ),
    click.option(
        "--misfire-grace",
        type=click.FloatRange(min=0),
        metavar="S",
        help="How late a fire may be and still count as on time [1].",
    ),
    click.option(
        "--misfire-max",
        type=click.IntRange(min=1),
        metavar="N",
        help="With --misfire all, fire at most this many missed fires [100].",
    ),
    click.option(
        "--overlap",
        type=click.Choice([o.value for o in Overlap]),
        help="What a new run does while the previous one is still going [allow].",
    ),
    click.option(
        "--child",
        "children",
        multiple=True,
        metavar="NAME",
        help="A job to fire when a run succeeds; repeat for several.",
    ),
    click.option(
        "--calendar",
        "calendars",
        multiple=True,
        metavar="NAME",
        help="A calendar whose dates the job skips; repeat for several.",
    ),
    click.option(
        "--max-fires", type=click.IntRange(min=1), metavar="N", help="Stop after this many fires."
    ),
    click.option("--queue", metavar="QUEUE", help="Queue of the runs [the task's]."),
    click.option("--priority", type=int, metavar="N", help="Priority of the runs [the task's]."),
    click.option("--paused", is_flag=True, help="Store the job paused: it fires once resumed."),
)


def definition_options(fn: FC) -> FC:
    """Add the options that define a job (trigger, arguments, policies) to a command."""
    for option in reversed(_DEFINITION_OPTIONS):
        fn = option(fn)
    return fn


def job_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The options given on the command line, as ``Jobs.add``/``Jobs.update`` take them.

    Options that were not given (None, an empty repeatable, a flag left off) are left out.
    """
    chosen = [kind for kind in _TRIGGERS if given[kind] is not None]
    if len(chosen) > 1:
        raise click.UsageError(f"give one trigger, not {' and '.join(f'--{k}' for k in chosen)}")
    return {k: v for k, v in given.items() if v is not None and v != () and v is not False}


@jobs.command("add")
@_name_argument
@definition_options
@app_options(app_required=True)
@_json_option
def add_job(name: str, app_spec: str, store_url: str | None, as_json: bool, **given: Any) -> None:
    """Add a job NAME running --task on one trigger: --cron, --every, --after or --at.

    Examples: `--cron "0 9 * * MON-FRI" --tz Europe/Paris`, `--every 300`, `--after 60`,
    `--at 2026-05-01T12:00:00+02:00`.
    """
    options = job_options(given)
    task = options.pop("task", None)
    if task is None:
        raise click.UsageError("give the task the job runs with --task")
    if not any(kind in options for kind in _TRIGGERS):
        raise click.UsageError("give a trigger: --cron, --every, --after or --at")
    app = resolve_app(app_spec, store_url)
    refuse_dead_trigger(options, app.clock.now())
    refuse_calendars(_kind(options), options.get("calendars", ()))
    job = run_with_app(app, lambda a: a.jobs.add(name, task, **options))
    _print_changed(job, "added", as_json)


@jobs.command("update")
@_name_argument
@definition_options
@app_options(app_required=True)
@_json_option
def update_job(
    name: str, app_spec: str, store_url: str | None, as_json: bool, **given: Any
) -> None:
    """Change the options given; the others stay as they are.

    To change the schedule give the trigger whole (--cron, --every, --after or --at, with its
    --tz, --start, --end and --jitter): the old trigger is replaced, not merged.
    """
    changes = job_options(given)
    if not changes:
        raise click.UsageError("give at least one option to change")
    app = resolve_app(app_spec, store_url)
    refuse_dead_trigger(changes, app.clock.now())

    async def update(a: App) -> Job:
        spec = (await a.jobs.get(name)).spec
        kind = _kind(changes) or str(spec.trigger.get("kind"))
        refuse_calendars(kind, changes.get("calendars", spec.calendars))
        return await a.jobs.update(name, **changes)

    job = run_with_app(app, update)
    _print_changed(job, "updated", as_json)


def refuse_dead_trigger(options: Mapping[str, Any], now: float) -> None:
    """Refuse a new trigger that has no fire left (an ``--at`` in the past, an ``--end`` gone):
    the job would be stored finished and never run, which is nothing but a silent drop."""
    if not any(kind in options for kind in _TRIGGERS):
        return
    trigger = make_trigger(**{k: v for k, v in options.items() if k in _TRIGGER_OPTIONS})
    if first_fire(trigger, now) is None:
        raise CliError(f"{trigger.describe()} has no fire left after now; the job would never run")


def refuse_calendars(kind: str | None, calendars: Sequence[str]) -> None:
    """Refuse calendars on an ``after`` or ``at`` job: their triggers have no dates to skip."""
    if calendars and kind in ("after", "at"):
        raise CliError(
            f"calendars ({', '.join(calendars)}) skip dates of cron and every jobs only, "
            f"not of an {kind} job"
        )


def _kind(options: Mapping[str, Any]) -> str | None:
    """The kind of trigger the options give, if any."""
    return next((kind for kind in _TRIGGERS if kind in options), None)


def _print_changed(job: Job, what: str, as_json: bool) -> None:
    if as_json:
        render.print_json(job_json(job))
        return
    planned = _planned(job)
    if planned is None:
        when = f"no fire planned ({job_state(job)})"
    else:
        when = f"next fire {render.human_time(planned)} UTC"
    click.echo(f"job {job.name} {what}: {_describe(job)}; {when}")


# -- pause, resume, remove, trigger --------------------------------------------------------------
@jobs.command("pause")
@_name_argument
@app_options()
@_json_option
def pause_job(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Stop a job from firing until it is resumed (runs already made are left alone)."""
    job = run_with_app(resolve_app(app_spec, store_url), lambda app: app.jobs.pause(name))
    _print_changed(job, "paused", as_json)


@jobs.command("resume")
@_name_argument
@app_options()
@_json_option
def resume_job(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Let a paused job fire again, from its first fire after now (missed fires are skipped)."""
    job = run_with_app(resolve_app(app_spec, store_url), lambda app: app.jobs.resume(name))
    _print_changed(job, "resumed", as_json)


@jobs.command("remove")
@_name_argument
@app_options()
@_json_option
def remove_job(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Delete a job. Its runs stay; a job still in the code comes back when a scheduler starts."""
    run_with_app(resolve_app(app_spec, store_url), lambda app: app.jobs.remove(name))
    if as_json:
        render.print_json({"name": name, "removed": True})
    else:
        click.echo(f"job {name} removed (its runs are kept)")


@jobs.command("trigger")
@_name_argument
@app_options(app_required=True)
@_json_option
def trigger_job(name: str, app_spec: str, store_url: str | None, as_json: bool) -> None:
    """Fire a job now, once, outside its schedule, and print the new run's id.

    The schedule is unchanged and the run counts as no fire of the job.
    """
    handle = run_with_app(resolve_app(app_spec, store_url), lambda app: app.jobs.trigger(name))
    if as_json:
        render.print_json({"id": handle.id, "job": name, "created": handle.created})
    else:
        click.echo(f"run {handle.id} created for job {name}")


# -- what a job looks like -----------------------------------------------------------------------
def job_state(job: Job) -> str:
    """One word for where a job stands (see the module docstring)."""
    if not job.enabled:
        return "disabled"
    if job.spec.paused:
        return "paused"
    if job.next_fire_at is not None:
        return "active"
    spec = job.spec
    if spec.after_seconds is not None and (spec.max_fires is None or job.fires < spec.max_fires):
        return "waiting"
    return "finished"


def _planned(job: Job) -> float | None:
    """The job's next fire, or None when it will not fire (paused or disabled included)."""
    return job.next_fire_at if job_state(job) == "active" else None


def job_json(job: Job) -> dict[str, Any]:
    """A job as a JSON object: its definition, its schedule and where it stands."""
    spec, zone, planned = job.spec, _zone(job), _planned(job)
    return {
        "id": job.id,
        "name": spec.name,
        "task": spec.task,
        "state": job_state(job),
        "schedule": _describe(job),
        "trigger": spec.trigger,
        "tz": str(zone),
        "next_fire": render.iso(planned),
        "next_fire_local": _local_iso(planned, zone),
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
        "enabled": job.enabled,
        "created_at": render.iso(job.created_at),
        "updated_at": render.iso(job.updated_at),
    }


def _print_jobs(found: Sequence[Job]) -> None:
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
            _describe(job),
            render.human_time(_planned(job)),
            _state_text(job),
            _fires(job),
            job.spec.misfire.value,
            job.spec.overlap.value,
        )
    render.console().print(table)


def _job_fields(job: Job) -> Table:
    spec, zone, planned = job.spec, _zone(job), _planned(job)
    rows = [
        ("task", spec.task),
        ("schedule", _describe(job)),
        ("next fire", f"{_local_iso(planned, zone)}  ({render.iso(planned)})" if planned else ""),
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


def _describe(job: Job) -> str:
    """The trigger in words, e.g. ``cron '0 9 * * *' in Europe/Paris`` or ``every 60s``."""
    try:
        return trigger_from_spec(job.spec.trigger).describe()
    except CronbusError as exc:
        # A stored trigger this version cannot read must not hide every other job.
        return f"unreadable trigger {json.dumps(job.spec.trigger)}: {exc}"


def _misfire(job: Job) -> str:
    spec = job.spec
    text = f"{spec.misfire.value} (grace {spec.misfire_grace:g} s"
    if spec.misfire is Misfire.ALL:
        text += f", at most {spec.misfire_max} missed fires"
    return text + ")"


def _fires(job: Job) -> str:
    limit = job.spec.max_fires
    return str(job.fires) if limit is None else f"{job.fires}/{limit}"


def _state_text(job: Job) -> Text:
    state = job_state(job)
    return Text(state, style=_STATE_STYLES[state])


def _zone(job: Job) -> ZoneInfo:
    """The job's time zone: its trigger's (cron, every), else UTC."""
    name = job.spec.trigger.get("tz")
    try:
        return ZoneInfo(name) if isinstance(name, str) else ZoneInfo("UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")  # shown as UTC; `jobs show` says the trigger is unreadable


def _local_iso(timestamp: float | None, zone: ZoneInfo) -> str | None:
    """Epoch seconds as an ISO-8601 time in ``zone`` (None stays None)."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, zone).isoformat(timespec="milliseconds")
