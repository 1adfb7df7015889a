"""The `cronbus dlq` commands: dead letters, which are dead runs and dead deliveries.

A run is dead when it used up its attempts; a delivery when its pushes did. Both are kept with
their last error until requeued (with a fresh attempt budget) or, for deliveries, until their
subscription is deleted. ``dlq list`` shows both kinds, newest first, with a ``kind`` column;
``--kind``, or a filter that only one kind has (``--task``, ``--queue``, ``--subscription``),
narrows it to one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ..services import DeadLetter, DeadLetterResult
from . import render
from .connect import AnyServices, Where, collect, run_services, where_options
from .loading import CliError, CronbusGroup
from .subs_render import delivery_json, first_line, table

FC = TypeVar("FC", bound=Callable[..., Any])
_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of a table."
)
_COLUMNS = ("KIND", "ID", "OF", "WHERE", "ATTEMPTS", "DIED (UTC)", "ERROR", "MESSAGE")


@click.group(cls=CronbusGroup)
def dlq() -> None:
    """Dead letters: runs and deliveries that used up their retries, kept with their last error."""


# -- list ----------------------------------------------------------------------------------------
@dlq.command("list")
@click.option(
    "--kind",
    type=click.Choice(["runs", "deliveries", "all"]),
    help="Only dead runs, or only dead deliveries. Default: all, unless a filter below says.",
)
@click.option("--task", help="Only dead runs of this task.")
@click.option("--queue", help="Only dead runs in this queue.")
@click.option("--subscription", metavar="NAME", help="Only dead deliveries of this subscription.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Show at most this many dead letters, newest first.",
)
@where_options()
@_json_option
def list_dead(
    kind: str | None,
    task: str | None,
    queue: str | None,
    subscription: str | None,
    limit: int,
    where: Where,
    as_json: bool,
) -> None:
    """List dead runs and dead deliveries, newest first, with their last error."""
    runs, deliveries = _kinds(kind, task or queue, subscription)
    chosen = "runs" if not deliveries else "deliveries" if not runs else None

    async def read(services: AnyServices) -> list[DeadLetter]:
        return await collect(
            lambda n, c: services.dead_letters.list(chosen, task, queue, subscription, n, c),
            limit,
        )

    found = sorted(run_services(where, read), key=lambda d: d.died_at, reverse=True)
    if as_json:
        render.print_json([_dead_json(d) for d in found])
    elif not found:
        what = "dead letters" if runs and deliveries else "dead runs" if runs else "dead deliveries"
        click.echo(f"no {what}")
    else:
        _print_dead(found)


def _kinds(kind: str | None, run_filter: str | None, subscription: str | None) -> tuple[bool, bool]:
    """Which kinds to list: (runs, deliveries)."""
    if run_filter and subscription:
        raise click.UsageError("--task and --queue select runs, --subscription deliveries")
    if kind is None:
        return (not subscription, not run_filter)
    if (kind == "deliveries" and run_filter) or (kind == "runs" and subscription):
        raise click.UsageError(f"--kind {kind} does not go with that filter")
    return (kind != "deliveries", kind != "runs")


def _dead_json(dead: DeadLetter) -> dict[str, Any]:
    if dead.run is not None:
        return {"kind": "run", **render.run_json(dead.run)}
    assert dead.delivery is not None
    return {"kind": "delivery", **delivery_json(dead.delivery)}


def _print_dead(found: Sequence[DeadLetter]) -> None:
    rows = table(*_COLUMNS, right=("ID", "ATTEMPTS"), wrap=("MESSAGE",))
    for dead in found:
        if dead.run is not None:
            run, error = dead.run, dead.run.error
            cells = (
                "run",
                str(run.id),
                run.task,
                run.queue,
                str(run.attempts),
                error.type if error else "",
                first_line(error.message) if error else "",
            )
        else:
            d = dead.delivery
            assert d is not None
            cells = (
                "delivery",
                str(d.id),
                d.subscription,
                f"{d.topic}@{d.offset}",
                str(d.attempts),
                "" if d.last_status is None else f"HTTP {d.last_status}",
                first_line(d.last_error),
            )
        rows.add_row(*cells[:5], render.human_time(dead.died_at), *cells[5:])
    render.console().print(rows)


# -- requeue and purge ---------------------------------------------------------------------------
def _choice_options(verb: str) -> Callable[[FC], FC]:
    """The options that choose dead letters: ids, --all, --deliveries, --all-deliveries."""

    def decorate(fn: FC) -> FC:
        for option in reversed(
            (
                click.argument("ids", metavar="[ID]...", nargs=-1, type=int),
                click.option("--all", "every", is_flag=True, help=f"{verb} every dead run."),
                click.option(
                    "--deliveries",
                    "of_deliveries",
                    is_flag=True,
                    help="The ids are delivery ids, not run ids.",
                ),
                click.option("--all-deliveries", is_flag=True, help=f"{verb} every dead delivery."),
                click.option(
                    "--subscription",
                    metavar="NAME",
                    help="With --all-deliveries: only this subscription's.",
                ),
            )
        ):
            fn = option(fn)
        return fn

    return decorate


@dlq.command("requeue")
@_choice_options("Requeue")
@where_options()
@_json_option
def requeue_dead(
    ids: tuple[int, ...],
    every: bool,
    of_deliveries: bool,
    all_deliveries: bool,
    subscription: str | None,
    where: Where,
    as_json: bool,
) -> None:
    """Push dead letters again with a fresh retry budget.

    Give run ids or --all (every dead run), or --deliveries with delivery ids or
    --all-deliveries [--subscription NAME]. Prints how many were requeued; ids that are
    unknown or not dead are reported as an error (exit status 1) after the others are requeued.
    """
    _handle("requeue", ids, every, of_deliveries, all_deliveries, subscription, where, as_json)


@dlq.command("purge")
@_choice_options("Delete")
@click.option("--yes", is_flag=True, help="Do not ask (required when stdin is not a terminal).")
@where_options()
@_json_option
def purge_dead(
    ids: tuple[int, ...],
    every: bool,
    of_deliveries: bool,
    all_deliveries: bool,
    subscription: str | None,
    yes: bool,
    where: Where,
    as_json: bool,
) -> None:
    """Delete dead letters for good: dead runs with their attempts, dead deliveries with theirs.

    Chosen like requeue's (ids, --all, --deliveries ids, --all-deliveries). Asks first when
    stdin is a terminal; elsewhere (scripts) --yes is required.
    """
    if not yes:
        if not sys.stdin.isatty():
            raise CliError("not purging dead letters without --yes (no terminal to ask)")
        if not click.confirm("Delete these dead letters for good?", default=False):
            raise CliError("nothing purged")
    _handle("purge", ids, every, of_deliveries, all_deliveries, subscription, where, as_json)


def _handle(
    verb: str,
    ids: tuple[int, ...],
    every: bool,
    of_deliveries: bool,
    all_deliveries: bool,
    subscription: str | None,
    where: Where,
    as_json: bool,
) -> None:
    """Requeue or purge the dead letters the options choose, and say what was done."""
    if of_deliveries and not ids:
        raise click.UsageError("--deliveries needs delivery ids")
    if sum((bool(ids), every, all_deliveries)) != 1:
        raise click.UsageError("give ids, --all or --all-deliveries (exactly one of the three)")
    if subscription is not None and not all_deliveries:
        raise click.UsageError("--subscription goes with --all-deliveries")
    deliveries = all_deliveries or of_deliveries
    run_ids, delivery_ids = ((), ids) if deliveries else (ids, ())

    async def act(services: AnyServices) -> DeadLetterResult:
        dead = services.dead_letters
        options: dict[str, Any] = {
            "all_runs": every,
            "all_deliveries": all_deliveries,
            "subscription": subscription,
        }
        if verb == "requeue":
            return await dead.requeue(run_ids, delivery_ids, progress=bar.advance, **options)
        return await dead.purge(run_ids, delivery_ids, **options)

    from .progress import progress  # Rich's bars: only for the commands that draw one

    # Named ids give the bar its length; --all counts as it goes.
    label = "requeueing dead letters" if verb == "requeue" else "purging dead letters"
    with progress(label, total=len(ids) or None, quiet=as_json) as bar:
        result = run_services(where, act)
    done = result.deliveries if deliveries else result.runs
    past = "requeued" if verb == "requeue" else "purged"
    if as_json:
        render.print_json({past: done, "count": len(done), "refused": result.refused})
    elif not deliveries:
        click.echo(f"{past} {len(done)} run{'' if len(done) == 1 else 's'}")
    else:
        click.echo(f"{past} {len(done)} deliver{'y' if len(done) == 1 else 'ies'}")
    if result.refused:
        raise CliError(f"not {past}: " + "; ".join(result.refused))
