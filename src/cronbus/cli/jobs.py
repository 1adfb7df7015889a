"""The `cronbus jobs` commands: list, show, next, add, update, pause, resume, remove, trigger,
sync.

A job's state, as these commands show it, is one word: ``active`` (it will fire), ``paused``,
``disabled`` (gone from the app's code: kept, never fired, until removed), ``waiting`` (an
``after`` job whose run has not ended yet, so its next fire is not planned) or ``finished`` (no
fire left). A paused or disabled job shows no next fire, because it has none until it is resumed
or defined again, whatever the store kept.

Every definition is checked (trigger, task, arguments, policies) before the store is changed, so
a refused command changes nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click
from rich.text import Text

from ..job_specs import JobOptions
from ..job_views import describe, job_state, local_iso, planned_fire, zone_of
from ..jobs import first_fire
from ..model import Job, Run
from ..services import RunQuery
from ..triggers import make_trigger
from . import render
from .connect import AnyServices, Where, collect, run_services, where_options
from .jobs_options import TRIGGERS, definition_options, job_options
from .jobs_render import job_fields, job_json, print_jobs, state_text
from .loading import CliError, CronbusGroup, app_options, resolve_app, run_with_app

FC = TypeVar("FC", bound=Callable[..., Any])
_TRIGGER_OPTIONS = (*TRIGGERS, "tz", "start", "end", "jitter")
_RECENT_RUNS = 10

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)
_name_argument = click.argument("name", metavar="NAME")
_force_option = click.option(
    "--force",
    is_flag=True,
    help="Change a job defined in code anyway (the next scheduler start restores it).",
)


# -- the group and its read commands -------------------------------------------------------------
@click.group(cls=CronbusGroup)
def jobs() -> None:
    """List, inspect, add, change, pause, resume, remove and fire jobs.

    A job is a task plus a trigger (--cron, --every, --after or --at) and its policies.
    Commands that define or fire jobs (add, update, trigger) need --app for its tasks (or a
    server's, with --url).
    """


@jobs.command("list")
@where_options()
@_json_option
def list_jobs(where: Where, as_json: bool) -> None:
    """List every job: task, schedule, next fire, state, fire count and policies."""

    async def read(services: AnyServices) -> list[Job]:
        return await collect(services.jobs.list, sys.maxsize)

    found = run_services(where, read)
    if as_json:
        render.print_json([job_json(job) for job in found])
    else:
        print_jobs(found)


@jobs.command("show")
@_name_argument
@where_options()
@_json_option
def show_job(name: str, where: Where, as_json: bool) -> None:
    """Show everything about one job, with its last 10 runs."""

    async def fetch(services: AnyServices) -> tuple[Job, list[Run]]:
        job = await services.jobs.get(name)
        recent = await services.runs.list(RunQuery(job=job.name), limit=_RECENT_RUNS)
        return job, recent.items

    job, runs = run_services(where, fetch)
    if as_json:
        render.print_json({**job_json(job), "runs": [render.run_json(run) for run in runs]})
        return
    out = render.console()
    out.print(Text.assemble(f"job {job.name}  ", state_text(job)))
    out.print(job_fields(job))
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
@where_options()
@_json_option
def next_fires(name: str, count: int, where: Where, as_json: bool) -> None:
    """Show the job's next fire times, in its time zone and in UTC.

    A paused, disabled or finished job has none; an `after` job only its next one, because the
    fire after it waits for that run to end.
    """

    async def fetch(services: AnyServices) -> tuple[Job, list[float]]:
        job = await services.jobs.get(name)
        return job, await services.jobs.next_fires(job.name, count)

    job, times = run_services(where, fetch)
    zone = zone_of(job)
    if as_json:
        fires = [{"local": local_iso(t, zone), "utc": render.iso(t)} for t in times]
        render.print_json({"name": job.name, "tz": str(zone), "fires": fires})
    elif not times:
        click.echo(f"job {job.name} is {job_state(job)}: no fire planned")
    else:
        for t in times:
            click.echo(f"{local_iso(t, zone)}  {render.iso(t)}")


# -- define and change ---------------------------------------------------------------------------
@jobs.command("add")
@_name_argument
@definition_options
@where_options(app_required=True)
@_json_option
def add_job(name: str, where: Where, as_json: bool, **given: Any) -> None:
    """Add a job NAME running --task on one trigger: --cron, --every, --after or --at.

    Examples: `--cron "0 9 * * MON-FRI" --tz Europe/Paris`, `--every 300`, `--after 60`,
    `--at 2026-05-01T12:00:00+02:00`.
    """
    options = job_options(given)
    task = options.pop("task", None)
    if task is None:
        raise click.UsageError("give the task the job runs with --task")
    if not any(kind in options for kind in TRIGGERS):
        raise click.UsageError("give a trigger: --cron, --every, --after or --at")
    refuse_dead_trigger(options, time.time())
    job = run_services(
        where, lambda services: services.jobs.create(name, task, JobOptions(**options))
    )
    _print_changed(job, "added", as_json)


@jobs.command("update")
@_name_argument
@definition_options
@_force_option
@where_options(app_required=True)
@_json_option
def update_job(name: str, force: bool, where: Where, as_json: bool, **given: Any) -> None:
    """Change the options given; the others stay as they are.

    To change the schedule give the trigger whole (--cron, --every, --after or --at, with its
    --tz, --start, --end and --jitter): the old trigger is replaced, not merged. A job defined
    in code needs --force, and the next scheduler start restores it from the code.
    """
    changes = job_options(given)
    if not changes:
        raise click.UsageError("give at least one option to change")
    refuse_dead_trigger(changes, time.time())
    job = run_services(where, lambda services: services.jobs.update(name, changes, force=force))
    _warn_code_job(job, force, "changed")
    _print_changed(job, "updated", as_json)


def _warn_code_job(job: Job, force: bool, change: str) -> None:
    """Say on stderr that a code job changed by --force comes back from the code."""
    if force and job.spec.source == "code":
        again = "adds it again" if change == "removed" else "restores it"
        click.echo(
            f"warning: job {job.name} is defined in code: {change} by --force; the next "
            f"scheduler start {again} from the code",
            err=True,
        )


def refuse_dead_trigger(options: Mapping[str, Any], now: float) -> None:
    """Refuse a new trigger that has no fire left (an ``--at`` in the past, an ``--end`` gone):
    the job would be stored finished and never run, which is nothing but a silent drop."""
    if not any(kind in options for kind in TRIGGERS):
        return
    trigger = make_trigger(**{k: v for k, v in options.items() if k in _TRIGGER_OPTIONS})
    if first_fire(trigger, now) is None:
        raise CliError(f"{trigger.describe()} has no fire left after now; the job would never run")


def _print_changed(job: Job, what: str, as_json: bool) -> None:
    if as_json:
        render.print_json(job_json(job))
        return
    planned = planned_fire(job)
    if planned is None:
        when = f"no fire planned ({job_state(job)})"
    else:
        when = f"next fire {render.human_time(planned)} UTC"
    click.echo(f"job {job.name} {what}: {describe(job)}; {when}")


# -- pause, resume, remove, trigger --------------------------------------------------------------
@jobs.command("pause")
@_name_argument
@where_options()
@_json_option
def pause_job(name: str, where: Where, as_json: bool) -> None:
    """Stop a job from firing until it is resumed (runs already made are left alone)."""
    job = run_services(where, lambda services: services.jobs.pause(name))
    _print_changed(job, "paused", as_json)


@jobs.command("resume")
@_name_argument
@where_options()
@_json_option
def resume_job(name: str, where: Where, as_json: bool) -> None:
    """Let a paused job fire again, from its first fire after now (missed fires are skipped)."""
    job = run_services(where, lambda services: services.jobs.resume(name))
    _print_changed(job, "resumed", as_json)


@jobs.command("remove")
@_name_argument
@_force_option
@where_options()
@_json_option
def remove_job(name: str, force: bool, where: Where, as_json: bool) -> None:
    """Delete a job. Its runs stay. A job still defined in code needs --force, and comes back
    when a scheduler starts."""
    job = run_services(where, lambda services: services.jobs.delete(name, force=force))
    _warn_code_job(job, force, "removed")
    if as_json:
        render.print_json({"name": name, "removed": True})
    else:
        click.echo(f"job {name} removed (its runs are kept)")


@jobs.command("trigger")
@_name_argument
@where_options(app_required=True)
@_json_option
def trigger_job(name: str, where: Where, as_json: bool) -> None:
    """Fire a job now, once, outside its schedule, and print the new run's id.

    The schedule is unchanged and the run counts as no fire of the job.
    """
    run = run_services(where, lambda services: services.jobs.trigger(name))
    if as_json:
        render.print_json({"id": run.id, "job": name, "created": True})
    else:
        click.echo(f"run {run.id} created for job {name}")


@jobs.command("sync")
@app_options(app_required=True)
@_json_option
def sync_jobs(app_spec: str, store_url: str | None, as_json: bool) -> None:
    """Write the app's code jobs to the store, as a scheduler does when it starts: add new
    ones, update changed ones, disable (never delete) those gone from the code.

    Only the app's namespace is synced. Prints what changed; a bar shows the progress of a
    long sync on a terminal.
    """
    from .progress import progress, steps  # Rich's bars: only for the commands that draw one

    app = resolve_app(app_spec, store_url)
    with progress("syncing jobs", quiet=as_json) as bar:
        # A sync adds jobs, so it may create the store, as a scheduler's start does.
        report = run_with_app(app, lambda opened: opened.jobs.sync(steps(bar)), create=True)
    if as_json:
        render.print_json(
            {"added": report.added, "updated": report.updated, "disabled": report.disabled}
        )
        return
    for word, names in (
        ("added", report.added),
        ("updated", report.updated),
        ("disabled (gone from the code)", report.disabled),
    ):
        if names:
            click.echo(f"{word}: {len(names)} job{'' if len(names) == 1 else 's'} ({_few(names)})")
    if not (report.added or report.updated or report.disabled):
        click.echo("jobs up to date: nothing to change")


def _few(names: list[str], most: int = 10) -> str:
    """Up to ``most`` names, and how many more there are."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"
