"""Resource commands on runs: ``runs`` and ``defer`` (dead letters are in :mod:`.dlq`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..app import App
from ..errors import InvalidTransitionError, SerializationError
from ..fairness import serves
from ..model import Attempt, Run, RunFilter, WorkerState
from ..serialization import parse_json
from ..states import RunEvent, RunState, sources
from . import render
from .loading import (
    CliError,
    CronbusGroup,
    app_options,
    parse_states,
    resolve_app,
    run_with_app,
)

_WAITING = sources(RunEvent.CLAIM) | sources(RunEvent.DUE)
"""States of a run that waits for a worker: queued, or scheduled for later."""

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of a table."
)
_limit_option = click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Show at most this many runs, newest first.",
)


# -- runs ----------------------------------------------------------------------------------------
@click.group(cls=CronbusGroup)
def runs() -> None:
    """List, inspect, cancel and retry runs."""


@runs.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    callback=parse_states(RunState),
    help="Only runs in this state; repeat it or separate states with commas.",
)
@click.option("--task", help="Only runs of this task.")
@click.option("--queue", help="Only runs in this queue.")
@_limit_option
@click.option("--before", type=int, metavar="ID", help="Only runs older than this id (paging).")
@app_options()
@_json_option
def list_runs(
    states: tuple[RunState, ...],
    task: str | None,
    queue: str | None,
    limit: int,
    before: int | None,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first, optionally filtered by state, task and queue."""
    wanted = RunFilter(states=states, task=task, queue=queue, limit=limit, before_id=before)
    found = run_with_app(resolve_app(app_spec, store_url), lambda app: app.store.list_runs(wanted))
    if as_json:
        render.print_json([render.run_json(run) for run in found])
    else:
        render.print_runs(found)


@runs.command("show")
@click.argument("run_id", metavar="ID", type=int)
@app_options()
@_json_option
def show_run(run_id: int, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Show one run with its attempts: outcome, worker, times, errors, tracebacks and logs."""

    async def fetch(app: App) -> tuple[Run, list[Attempt], list[str]]:
        run = await app.store.get_run(run_id)
        return run, await app.store.list_attempts(run_id), await _waiting_warnings(app, run)

    run, attempts, warnings = run_with_app(resolve_app(app_spec, store_url), fetch)
    if as_json:
        render.print_json(render.run_detail_json(run, attempts, warnings))
    else:
        render.print_run(run, attempts, warnings)


async def _waiting_warnings(app: App, run: Run) -> list[str]:
    """Why a waiting run may wait for ever: no live worker serves its queue.

    Checked here rather than at ``defer``, where reading the workers would cost every call.
    A worker is live when it is alive by the registry and has sent a heartbeat within the lease
    (``CRONBUS_LEASE_SECONDS``, as for ``workers list``); a draining one claims nothing more.
    """
    if run.state not in _WAITING:
        return []
    found = await app.store.list_workers(app.clock.now(), app.settings.lease_seconds)
    if any(w.state is WorkerState.ALIVE and serves(w.queues, run.queue) for w in found):
        return []
    return [
        f"no live worker serves queue {run.queue!r}; the run waits until one does "
        "(a worker started without --queues serves every queue)"
    ]


@runs.command("cancel")
@click.argument("run_id", metavar="ID", type=int)
@app_options()
@_json_option
def cancel_run(run_id: int, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Cancel a run: at once if it waits, or ask its worker to stop it if it runs.

    Prints the new state: `cancelled`, or `cancelling` for a running run, which becomes
    `cancelled` when its worker stops it (or `succeeded` if the work finishes first).
    """

    async def cancel(app: App) -> RunState:
        try:
            return await app.store.cancel(run_id, app.clock.now())
        except InvalidTransitionError:
            run = await app.store.get_run(run_id)
            raise CliError(f"run {run_id} is already {run.state} and cannot be cancelled") from None

    state = run_with_app(resolve_app(app_spec, store_url), cancel)
    _print_state(run_id, state, as_json)


@runs.command("retry")
@click.argument("run_id", metavar="ID", type=int)
@app_options()
@_json_option
def retry_run(run_id: int, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Queue a dead or cancelled run again, with a fresh retry budget."""

    async def retry(app: App) -> None:
        if await app.store.requeue([run_id], app.clock.now()):
            return
        # Nothing was requeued: say why, which get_run does for an unknown id by itself.
        run = await app.store.get_run(run_id)
        allowed = " or ".join(sorted(s.value for s in sources(RunEvent.REQUEUE)))
        raise CliError(f"run {run_id} is {run.state}; only {allowed} runs can be retried")

    run_with_app(resolve_app(app_spec, store_url), retry)
    _print_state(run_id, RunState.QUEUED, as_json)


def _print_state(run_id: int, state: RunState, as_json: bool) -> None:
    if as_json:
        render.print_json({"id": run_id, "state": state.value})
    else:
        render.console().print(f"run {run_id}: ", render.state_text(state), sep="")


# -- defer ---------------------------------------------------------------------------------------
_SHOWN = 80
"""Characters of a bad value that an error message shows."""
_STDIN_KEY = "cronbus.stdin_read_by"


def _json_array(ctx: click.Context, param: click.Parameter, value: str) -> list[Any]:
    """Parse ``--args``: a JSON array of positional arguments (``-`` reads it from stdin)."""
    parsed, where = _json(ctx, param, value)
    if not isinstance(parsed, list):
        raise click.BadParameter(f"must be a JSON array, like '[1, \"a\"]'; got {where}")
    return parsed


def _json_object(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, Any]:
    """Parse ``--kwargs``: a JSON object of keyword arguments (``-`` reads it from stdin)."""
    parsed, where = _json(ctx, param, value)
    if not isinstance(parsed, dict):
        raise click.BadParameter(f'must be a JSON object, like \'{{"to": "a"}}\'; got {where}')
    return parsed


def _json(ctx: click.Context, param: click.Parameter, value: str) -> tuple[Any, str]:
    """The parsed JSON, and how an error names where it came from."""
    where = _shown(value)
    if value == "-":
        # Standard input can be read once: a second '-' would silently get nothing.
        first = ctx.meta.get(_STDIN_KEY)
        if first is not None:
            raise click.BadParameter(f"standard input was already read by {first}; give one '-'")
        ctx.meta[_STDIN_KEY] = f"--{param.name}"
        value = sys.stdin.read()
        where = f"{_shown(value)} from standard input"
    try:
        return parse_json(value, where), where
    except SerializationError as exc:
        raise click.BadParameter(str(exc)) from None


def _shown(value: str) -> str:
    """A value as an error shows it: quoted, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


@click.command()
@click.argument("task_name", metavar="TASK")
@click.option(
    "--args",
    metavar="JSON-ARRAY",
    default="[]",
    callback=_json_array,
    help="Positional arguments, as a JSON array; '-' reads it from standard input.",
)
@click.option(
    "--kwargs",
    metavar="JSON-OBJECT",
    default="{}",
    callback=_json_object,
    help="Keyword arguments, as a JSON object; '-' reads it from standard input.",
)
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Run no sooner than this many seconds from now.",
)
@click.option("--priority", type=int, help="Higher runs first within its queue.")
@click.option("--queue", help="Put the run in this queue instead of the task's.")
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Create the run only once per key; later calls return the first run's id.",
)
@app_options(app_required=True)
@_json_option
def defer(
    task_name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    delay: float | None,
    priority: int | None,
    queue: str | None,
    idempotency_key: str | None,
    app_spec: str,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Create a run of TASK (a task name of the app) and print its id.

    The arguments are checked against the task's function before anything is stored.
    """
    app = resolve_app(app_spec, store_url)
    task = app.get_task(task_name)
    # Checked before the store is opened, so a refused call leaves no trace. Task.prepare takes
    # the arguments apart from the options, so a task argument named `delay` or `queue` works.
    new = task.prepare(
        args,
        kwargs,
        now=app.clock.now(),
        delay=delay,
        priority=priority,
        queue=queue,
        idempotency_key=idempotency_key,
    )
    (done,) = run_with_app(app, lambda a: a.store.defer([new], a.clock.now()))
    if as_json:
        render.print_json({"id": done.id, "created": done.created, "task": task.name})
    elif done.created:
        click.echo(f"run {done.id} created")
    else:
        click.echo(f"run {done.id} already exists with idempotency key {idempotency_key!r}")
