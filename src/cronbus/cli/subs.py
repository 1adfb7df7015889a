"""The `cronbus subs` commands: add, list, show, pause, resume, delete and replay subscriptions,
and inspect their deliveries and attempts.

``add`` lives in :mod:`.subs_add`; what the commands print is built in :mod:`.subs_render`.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click
from rich.text import Text

from ..events.records import Delivery, Origin, Subscription
from ..events.states import DeliveryState
from ..services import DeliveryDetail, ReplayResult, SubscriptionView
from . import render
from .connect import AnyServices, Where, collect, run_services, where_options
from .loading import CliError, CronbusGroup, parse_states
from .subs_add import add, json_option, name_argument
from .subs_render import (
    attempt_json,
    deliveries_table,
    delivery_json,
    print_attempts,
    print_subs,
    state_text,
    subscription_fields,
    subscription_json,
)


@click.group(cls=CronbusGroup)
def subs() -> None:
    """Add, inspect, pause, replay and delete subscriptions, and see their deliveries.

    A subscription pushes the events of one topic that pass its filter to a target: a
    webhook (--webhook URL) or a task (--task NAME, one run per event).
    """


subs.add_command(add)


# -- list and show -------------------------------------------------------------------------------
@subs.command("list")
@click.option("--topic", help="Only subscriptions of this topic.")
@where_options()
@json_option
def list_subs(topic: str | None, where: Where, as_json: bool) -> None:
    """List subscriptions: topic, target, filter, state, cursor, lag and the pushing dispatcher."""

    async def read(services: AnyServices) -> list[SubscriptionView]:
        return await collect(lambda n, c: services.subscriptions.list(topic, n, c), sys.maxsize)

    seen = run_services(where, read)
    if as_json:
        render.print_json([subscription_json(s) for s in seen])
    elif not seen:
        click.echo("no subscriptions")
    else:
        print_subs(seen)


@subs.command("show")
@name_argument
@where_options()
@json_option
def show(name: str, where: Where, as_json: bool) -> None:
    """Show a subscription: its definition, cursor and lag, and its deliveries by state."""
    seen = run_services(where, lambda services: services.subscriptions.get(name))
    counts = seen.deliveries or {}
    every = {state.value: counts.get(state.value, 0) for state in DeliveryState}
    if as_json:
        render.print_json({**subscription_json(seen), "deliveries": every})
        return
    out = render.console()
    out.print(Text.assemble(f"subscription {name}  ", state_text(seen.subscription)))
    out.print(subscription_fields(seen, every))


# -- pause, resume, delete, replay ---------------------------------------------------------------
@subs.command("pause")
@name_argument
@where_options()
@json_option
def pause(name: str, where: Where, as_json: bool) -> None:
    """Stop pushing; events keep arriving and are delivered after resume."""
    _set_paused(name, True, where, as_json)


@subs.command("resume")
@name_argument
@where_options()
@json_option
def resume(name: str, where: Where, as_json: bool) -> None:
    """Push again (also after cronbus disabled it, e.g. on a 410 Gone)."""
    _set_paused(name, False, where, as_json)


def _set_paused(name: str, paused: bool, where: Where, as_json: bool) -> None:
    async def change(services: AnyServices) -> SubscriptionView:
        if paused:
            return await services.subscriptions.pause(name)
        return await services.subscriptions.resume(name)

    seen = run_services(where, change)
    if as_json:
        render.print_json(subscription_json(seen))
    else:
        render.console().print(f"subscription {name}: ", state_text(seen.subscription), sep="")


@subs.command("delete")
@name_argument
@click.option("--yes", is_flag=True, help="Do not ask (required when stdin is not a terminal).")
@where_options()
def delete(name: str, yes: bool, where: Where) -> None:
    """Delete a subscription with its cursor and deliveries (dead ones too).

    Asks first when stdin is a terminal; elsewhere (scripts) --yes is required.
    """

    async def remove(services: AnyServices) -> Subscription:
        sub = (await services.subscriptions.get(name)).subscription
        if not yes:
            _confirm(sub)
        return (await services.subscriptions.delete(name)).subscription

    sub = run_services(where, remove)
    click.echo(f"subscription {name} deleted")
    if sub.spec.origin is Origin.CODE:
        click.echo("note: it is defined in the app's code, and comes back when a dispatcher starts")


def _confirm(sub: Subscription) -> None:
    if not sys.stdin.isatty():
        raise CliError(f"not deleting subscription {sub.name!r} without --yes (no terminal to ask)")
    question = f"Delete subscription {sub.name!r} of {sub.topic} and all its deliveries?"
    if not click.confirm(question, default=False):
        raise CliError("nothing deleted")


def _replay_from(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, float]:
    """``--from``: an offset (a whole number), ``@EPOCH`` seconds, or an ISO 8601 time."""
    text = value.strip()
    if text.isdigit():
        if int(text) < 1:
            raise click.BadParameter("offset must be >= 1 (the first event is at offset 1)")
        return "offset", int(text)
    if text.startswith("@"):
        try:
            return "since", float(text[1:])
        except ValueError:
            raise click.BadParameter(f"{value!r}: '@' must be followed by epoch seconds") from None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an offset (like 120), an ISO 8601 time (like "
            "2024-05-01T12:00:00Z) or epoch seconds (like @1714564800)"
        ) from None
    return "since", (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


@subs.command("replay")
@name_argument
@click.option(
    "--from",
    "start",
    required=True,
    metavar="OFFSET|TIME|@EPOCH",
    callback=_replay_from,
    help="The first offset to deliver again, or a time: ISO 8601 (UTC when it has no offset) "
    "or @epoch-seconds; events published at or after it are delivered again.",
)
@where_options()
@json_option
def replay(name: str, start: tuple[str, float], where: Where, as_json: bool) -> None:
    """Move a subscription's cursor, so events from that point are matched and pushed again.

    Replayed events become new deliveries, with the event id as their idempotency key.
    The cursor may also move forward, skipping events, but never past the topic's end: an
    offset beyond it (or a time after the last event) moves the cursor to the topic's last
    offset, so every event published from then on is delivered.
    """
    kind, value = start

    async def move(services: AnyServices) -> ReplayResult:
        if kind == "offset":
            return await services.subscriptions.replay(name, offset=int(value))
        return await services.subscriptions.replay(name, since=value)

    from .progress import progress  # Rich's bars: only for the commands that draw one

    # One move of the cursor (a search by time on a long topic): a spinner while it runs.
    with progress("replaying", total=1, quiet=as_json) as bar:
        done = run_services(where, move)
        bar.advance()
    if as_json:
        render.print_json(
            {
                **subscription_json(done.subscription),
                "previous_cursor": done.previous_cursor,
                "clamped": done.clamped,
            }
        )
        return
    click.echo(done.message)


# -- deliveries and attempts ---------------------------------------------------------------------
@subs.command("deliveries")
@name_argument
@click.option(
    "--state",
    "states",
    multiple=True,
    callback=parse_states(DeliveryState),
    help="Only deliveries in this state (pending, in_flight, acked, retry, dead); repeat it or "
    "separate states with commas.",
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@where_options()
@json_option
def deliveries(
    name: str, states: tuple[DeliveryState, ...], limit: int, where: Where, as_json: bool
) -> None:
    """List a subscription's deliveries, newest first."""

    async def read(services: AnyServices) -> list[Delivery]:
        return await collect(
            lambda n, c: services.subscriptions.deliveries(name, list(states), n, c), limit
        )

    found = run_services(where, read)
    if as_json:
        render.print_json([delivery_json(d) for d in found])
    elif not found:
        click.echo("no deliveries")
    else:
        render.console().print(deliveries_table(found))


@subs.command("attempts")
@click.argument("delivery_id", metavar="DELIVERY_ID", type=int)
@where_options()
@json_option
def attempts(delivery_id: int, where: Where, as_json: bool) -> None:
    """List a delivery's attempts, oldest first: outcome, HTTP status, error, response."""
    detail: DeliveryDetail = run_services(
        where, lambda services: services.subscriptions.delivery(delivery_id)
    )
    if as_json:
        render.print_json([attempt_json(a) for a in detail.attempts])
        return
    print_attempts(detail.delivery, detail.attempts)
