"""Resource commands on runs: ``runs`` (``purge`` too) and ``defer`` (dead letters are in
:mod:`.dlq`).

They work through the runs service (:mod:`cronbus.services.runs`), on the store or through a
server (``--url``): the rules (what can be cancelled or retried, why a run may wait for ever)
live there, and these commands only parse options and print records.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import InvalidArgumentError, SerializationError
from ..model import Run
from ..observability.retention_policy import check_purge_states, parse_age
from ..serialization import parse_json
from ..services import DeferResult, RunDetail, RunQuery
from ..services.pages import encode_cursor
from ..states import RunState
from ..task_policy import SHARDS_LIMIT
from . import render
from .connect import AnyServices, Where, collect, run_services, where_options
from .loading import CronbusGroup, parse_states
from .progress import progress
from .runs_render import children_section, children_summary, children_table

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
@click.option("--job", metavar="NAME", help="Only runs fired by this job.")
@_limit_option
@click.option("--before", type=int, metavar="ID", help="Only runs older than this id (paging).")
@where_options()
@_json_option
def list_runs(
    states: tuple[RunState, ...],
    task: str | None,
    queue: str | None,
    job: str | None,
    limit: int,
    before: int | None,
    where: Where,
    as_json: bool,
) -> None:
    """List runs, newest first, optionally filtered by state, task, queue and job."""
    query = RunQuery(states=states, task=task, queue=queue, job=job)
    # --before is the keyset the runs service pages by: the cursor of a page ending above it.
    start = None if before is None else encode_cursor({"b": before})

    async def read(services: AnyServices) -> list[Run]:
        return await collect(lambda n, c: services.runs.list(query, n, c), limit, start)

    found = run_services(where, read)
    if as_json:
        render.print_json([render.run_json(run) for run in found])
    else:
        render.print_runs(found)


@runs.command("show")
@click.argument("run_id", metavar="ID", type=int)
@where_options()
@_json_option
def show_run(run_id: int, where: Where, as_json: bool) -> None:
    """Show one run with its attempts: outcome, worker, times, errors, tracebacks and logs."""
    detail: RunDetail = run_services(where, lambda services: services.runs.show(run_id))
    if as_json:
        render.print_json(
            render.run_detail_json(detail.run, detail.attempts, detail.waiting, detail.children)
        )
    else:
        section = children_section(detail.run, detail.children)
        render.print_run(detail.run, detail.attempts, detail.waiting, section)


@runs.command("children")
@click.argument("run_id", metavar="ID", type=int)
@click.option(
    "--after",
    type=click.IntRange(min=-1),
    metavar="INDEX",
    help="Only children whose index is above this one (paging).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Show at most this many children, by index.",
)
@where_options()
@_json_option
def list_children(run_id: int, after: int | None, limit: int, where: Where, as_json: bool) -> None:
    """List the children of a fan-out parent run by index (shard index, map item index or
    broadcast ordinal), its reduce run last."""

    async def read(services: AnyServices) -> tuple[Run, list[Run]]:
        parent = await services.runs.get(run_id)
        start = None if after is None else encode_cursor({"i": after})
        found = await collect(
            lambda n, c: services.runs.children(run_id, limit=n, cursor=c), limit, start
        )
        return parent, found

    parent, found = run_services(where, read)
    if as_json:
        render.print_json([render.run_json(child) for child in found])
        return
    out = render.console()
    if parent.children is None:
        click.echo(f"run {run_id} has no children (it is not a fan-out parent)")
        return
    out.print(children_summary(parent.children))
    if found:
        out.print(children_table(found))
    else:
        click.echo("no children" + ("" if after is None else f" after index {after}"))


@runs.command("cancel")
@click.argument("run_id", metavar="ID", type=int)
@where_options()
@_json_option
def cancel_run(run_id: int, where: Where, as_json: bool) -> None:
    """Cancel a run: at once if it waits, or ask its worker to stop it if it runs.

    Prints the new state: `cancelled`, or `cancelling` for a running run, which becomes
    `cancelled` when its worker stops it (or `succeeded` if the work finishes first).
    """
    run = run_services(where, lambda services: services.runs.cancel(run_id))
    _print_state(run_id, run.state, as_json)


@runs.command("retry")
@click.argument("run_id", metavar="ID", type=int)
@where_options()
@_json_option
def retry_run(run_id: int, where: Where, as_json: bool) -> None:
    """Queue a dead or cancelled run again, with a fresh retry budget."""
    run = run_services(where, lambda services: services.runs.retry(run_id))
    _print_state(run_id, run.state, as_json)


@runs.command("purge")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="AGE",
    help="Runs that ended at least this long ago: seconds, or like 30m, 12h, 1d, 2w; "
    "0 purges every finished run of the states.",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="Only runs in this finished state (succeeded, cancelled, dead, skipped); repeat it or "
    "separate states with commas. Default: all four.",
)
@where_options()
@_json_option
def purge_runs(older_than: str, states: tuple[str, ...], where: Where, as_json: bool) -> None:
    """Remove finished runs (with their attempts, payloads and logs) that ended at least AGE
    ago, in short batches, and print how many were removed.

    Runs that are not finished are never removed, nor a parent run whose children still run.
    Needs an admin token with --url.
    """
    names = [part.strip() for value in states for part in value.split(",") if part.strip()]
    # The services' own checks, run before the store is opened: a typo is a usage error.
    try:
        age = parse_age(older_than, "--older-than")
    except InvalidArgumentError as exc:
        raise click.BadParameter(
            str(exc).removeprefix("--older-than "), param_hint="--older-than"
        ) from None
    try:
        chosen = check_purge_states(names, "--state") if names else None
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc).removeprefix("--state: "), param_hint="--state") from None

    async def purge(services: AnyServices) -> tuple[int, tuple[RunState, ...]]:
        removed, purged = 0, tuple[RunState, ...]()
        with progress("purging runs", quiet=as_json) as bar:
            while True:
                result = await services.runs.purge(age, chosen)
                removed += result.removed
                purged = result.states
                bar.advance(result.removed)
                if result.done:
                    return removed, purged

    removed, purged = run_services(where, purge)
    if as_json:
        render.print_json({"removed": removed, "states": [s.value for s in purged]})
    else:
        noun = "run" if removed == 1 else "runs"
        click.echo(f"{removed} {noun} removed ({', '.join(s.value for s in purged)})")


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
    help="Create the run once per key in its namespace; later calls return the first run's id.",
)
@click.option(
    "--broadcast",
    is_flag=True,
    help="Make it a parent run with one child per live worker that knows the task.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, SHARDS_LIMIT),
    metavar="N",
    help="Make it a parent run with N children, each told its shard index and N.",
)
@where_options(app_required=True)
@_json_option
def defer(
    task_name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    delay: float | None,
    priority: int | None,
    queue: str | None,
    idempotency_key: str | None,
    broadcast: bool,
    shards: int | None,
    where: Where,
    as_json: bool,
) -> None:
    """Create a run of TASK (a task name of the app) and print its id.

    The arguments are checked against the task's function before anything is stored. With
    --broadcast or --shards the run is a parent: `cronbus runs show ID` follows its children.
    """

    async def create(services: AnyServices) -> DeferResult:
        return await services.runs.defer(
            task_name,
            args,
            kwargs,
            delay=delay,
            priority=priority,
            queue=queue,
            idempotency_key=idempotency_key,
            broadcast=broadcast or None,
            shards=shards,
        )

    done = run_services(where, create)
    if as_json:
        render.print_json({"id": done.run.id, "created": done.created, "task": done.run.task})
    elif done.created:
        click.echo(f"run {done.run.id} created")
    else:
        click.echo(f"run {done.run.id} already exists with idempotency key {idempotency_key!r}")
