"""The `cronbus dlq` commands: dead letters, which are dead runs and dead deliveries.

A run is dead when it used up its attempts; a delivery when its pushes did. Both are kept with
their last error until requeued (with a fresh attempt budget) or, for deliveries, until their
subscription is deleted. ``dlq list`` shows both kinds, newest first, with a ``kind`` column;
``--kind``, or a filter that only one kind has (``--task``, ``--queue``, ``--subscription``),
narrows it to one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from ..app import App
from ..errors import DeliveryNotFoundError, RunNotFoundError
from ..events.records import Delivery
from ..events.states import DeliveryState
from ..model import Run, RunFilter
from ..states import RunState
from . import render
from .loading import CliError, CronbusGroup, app_options, resolve_app, run_with_app
from .subs_render import delivery_json, first_line, table

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of a table."
)
_COLUMNS = ("KIND", "ID", "OF", "WHERE", "ATTEMPTS", "DIED (UTC)", "ERROR", "MESSAGE")


@dataclass(frozen=True, slots=True)
class Dead:
    """A dead run or a dead delivery, as one row of the dead letter queue."""

    run: Run | None = None
    delivery: Delivery | None = None

    @property
    def died_at(self) -> float:
        """When it was given up."""
        if self.run is not None:
            return self.run.finished_at or self.run.updated_at
        assert self.delivery is not None
        return self.delivery.updated_at


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
@app_options()
@_json_option
def list_dead(
    kind: str | None,
    task: str | None,
    queue: str | None,
    subscription: str | None,
    limit: int,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """List dead runs and dead deliveries, newest first, with their last error."""
    runs, deliveries = _kinds(kind, task or queue, subscription)
    wanted = RunFilter(states=(RunState.DEAD,), task=task, queue=queue, limit=limit)

    async def read(app: App) -> list[Dead]:
        found = [Dead(run=r) for r in await app.store.list_runs(wanted)] if runs else []
        if deliveries:
            if subscription is not None:
                await app.subscriptions.get(subscription)  # unknown: an error, not nothing
            dead = await app.subscriptions.deliveries(subscription, states=["dead"], limit=limit)
            found += [Dead(delivery=d) for d in dead]
        return sorted(found, key=lambda d: d.died_at, reverse=True)[:limit]

    found = run_with_app(resolve_app(app_spec, store_url), read)
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


def _dead_json(dead: Dead) -> dict[str, Any]:
    if dead.run is not None:
        return {"kind": "run", **render.run_json(dead.run)}
    assert dead.delivery is not None
    return {"kind": "delivery", **delivery_json(dead.delivery)}


def _print_dead(found: Sequence[Dead]) -> None:
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


# -- requeue -------------------------------------------------------------------------------------
@dlq.command("requeue")
@click.argument("ids", metavar="[ID]...", nargs=-1, type=int)
@click.option("--all", "every", is_flag=True, help="Requeue every dead run.")
@click.option(
    "--deliveries", "of_deliveries", is_flag=True, help="The ids are delivery ids, not run ids."
)
@click.option("--all-deliveries", is_flag=True, help="Requeue every dead delivery.")
@click.option(
    "--subscription", metavar="NAME", help="With --all-deliveries: only this subscription's."
)
@app_options()
@_json_option
def requeue_dead(
    ids: tuple[int, ...],
    every: bool,
    of_deliveries: bool,
    all_deliveries: bool,
    subscription: str | None,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Push dead letters again with a fresh retry budget.

    Give run ids or --all (every dead run), or --deliveries with delivery ids or
    --all-deliveries [--subscription NAME]. Prints how many were requeued; ids that are
    unknown or not dead are reported as an error (exit status 1) after the others are requeued.
    """
    if of_deliveries and not ids:
        raise click.UsageError("--deliveries needs delivery ids")
    if sum((bool(ids), every, all_deliveries)) != 1:
        raise click.UsageError("give ids, --all or --all-deliveries (exactly one of the three)")
    if subscription is not None and not all_deliveries:
        raise click.UsageError("--subscription goes with --all-deliveries")
    chosen = list(ids) if ids else None
    app = resolve_app(app_spec, store_url)
    deliveries = all_deliveries or of_deliveries
    if deliveries:
        requeued, refused = run_with_app(
            app, lambda a: _requeue_deliveries(a, chosen, subscription)
        )
    else:
        requeued, refused = run_with_app(app, lambda a: _requeue_runs(a, chosen))
    if as_json:
        render.print_json({"requeued": requeued, "count": len(requeued), "refused": refused})
    elif not deliveries:
        click.echo(f"requeued {len(requeued)} run{'' if len(requeued) == 1 else 's'}")
    else:
        click.echo(f"requeued {len(requeued)} deliver{'y' if len(requeued) == 1 else 'ies'}")
    if refused:
        raise CliError("not requeued: " + "; ".join(refused))


async def _requeue_runs(app: App, run_ids: list[int] | None) -> tuple[list[int], list[str]]:
    """Requeue dead runs; named runs that are unknown or not dead are refused, with why."""
    now = app.clock.now()
    if run_ids is None:
        return await app.store.requeue(None, now), []
    # store.requeue also takes cancelled runs; the dead letter queue holds only dead ones.
    found = {run.id: run for run in await app.store.get_runs(run_ids)}
    dead = [i for i in run_ids if i in found and found[i].state is RunState.DEAD]
    refused = [_refusal(i, found.get(i)) for i in dict.fromkeys(run_ids) if i not in dead]
    return (await app.store.requeue(dead, now) if dead else []), refused


def _refusal(run_id: int, run: Run | None) -> str:
    if run is None:
        return str(RunNotFoundError(f"no run has id {run_id}"))
    return f"run {run_id} is {run.state}, not dead"


async def _requeue_deliveries(
    app: App, delivery_ids: list[int] | None, subscription: str | None
) -> tuple[list[int], list[str]]:
    """Requeue dead deliveries; named ones that are unknown or not dead are refused, with why."""
    if subscription is not None:
        await app.subscriptions.get(subscription)  # an unknown name is an error
    requeued = await app.subscriptions.requeue(delivery_ids, subscription=subscription)
    done = set(requeued)
    refused = [
        await _delivery_refusal(app, i) for i in dict.fromkeys(delivery_ids or []) if i not in done
    ]
    return requeued, refused


async def _delivery_refusal(app: App, delivery_id: int) -> str:
    try:
        delivery = await app.subscriptions.store.get_delivery(delivery_id)
    except DeliveryNotFoundError as exc:
        return str(exc)
    if delivery.state is DeliveryState.DEAD:
        return f"delivery {delivery_id} was not requeued"  # it changed meanwhile
    return f"delivery {delivery_id} is {delivery.state.value}, not dead"
