"""The `cronbus subs` commands: add, list, show, pause, resume, delete and replay subscriptions,
and inspect their deliveries and attempts.

``add`` lives in :mod:`.subs_add`; what the commands print is built in :mod:`.subs_render`.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click
from rich.text import Text

from ..app import App
from ..events.records import Delivery, DeliveryAttempt, Origin, Subscription, TopicInfo
from ..events.states import DeliveryState
from . import render
from .loading import (
    CliError,
    CronbusGroup,
    app_options,
    parse_states,
    resolve_app,
    run_with_app,
)
from .subs_add import add, json_option, name_argument, read_seen
from .subs_render import (
    Seen,
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
@app_options()
@json_option
def list_subs(
    topic: str | None, app_spec: str | None, store_url: str | None, as_json: bool
) -> None:
    """List subscriptions: topic, target, filter, state, cursor, lag and the pushing dispatcher."""

    async def read(app: App) -> list[Seen]:
        found = await app.subscriptions.list(topic)
        ends = {info.name: info.last_offset for info in await app.events.topics()}
        now = app.clock.now()
        return [Seen(sub, ends.get(sub.topic, 0), now) for sub in found]

    seen = run_with_app(resolve_app(app_spec, store_url), read)
    if as_json:
        render.print_json([subscription_json(s) for s in seen])
    elif not seen:
        click.echo("no subscriptions")
    else:
        print_subs(seen)


@subs.command("show")
@name_argument
@app_options()
@json_option
def show(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Show a subscription: its definition, cursor and lag, and its deliveries by state."""

    async def read(app: App) -> tuple[Seen, dict[DeliveryState, int]]:
        seen = await read_seen(app, await app.subscriptions.get(name))
        return seen, await app.subscriptions.counts(name)

    seen, counts = run_with_app(resolve_app(app_spec, store_url), read)
    every = {state.value: counts.get(state, 0) for state in DeliveryState}
    if as_json:
        render.print_json({**subscription_json(seen), "deliveries": every})
        return
    out = render.console()
    out.print(Text.assemble(f"subscription {name}  ", state_text(seen.sub)))
    out.print(subscription_fields(seen, every))


# -- pause, resume, delete, replay ---------------------------------------------------------------
@subs.command("pause")
@name_argument
@app_options()
@json_option
def pause(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Stop pushing; events keep arriving and are delivered after resume."""
    _set_paused(name, True, app_spec, store_url, as_json)


@subs.command("resume")
@name_argument
@app_options()
@json_option
def resume(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Push again (also after cronbus disabled it, e.g. on a 410 Gone)."""
    _set_paused(name, False, app_spec, store_url, as_json)


def _set_paused(
    name: str, paused: bool, app_spec: str | None, store_url: str | None, as_json: bool
) -> None:
    async def change(app: App) -> Seen:
        if paused:
            return await read_seen(app, await app.subscriptions.pause(name))
        return await read_seen(app, await app.subscriptions.resume(name))

    seen = run_with_app(resolve_app(app_spec, store_url), change)
    if as_json:
        render.print_json(subscription_json(seen))
    else:
        render.console().print(f"subscription {name}: ", state_text(seen.sub), sep="")


@subs.command("delete")
@name_argument
@click.option("--yes", is_flag=True, help="Do not ask (required when stdin is not a terminal).")
@app_options()
def delete(name: str, yes: bool, app_spec: str | None, store_url: str | None) -> None:
    """Delete a subscription with its cursor and deliveries (dead ones too).

    Asks first when stdin is a terminal; elsewhere (scripts) --yes is required.
    """

    async def remove(app: App) -> Subscription:
        sub = await app.subscriptions.get(name)
        if not yes:
            _confirm(sub)
        await app.subscriptions.remove(name)
        return sub

    sub = run_with_app(resolve_app(app_spec, store_url), remove)
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
@app_options()
@json_option
def replay(
    name: str,
    start: tuple[str, float],
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Move a subscription's cursor, so events from that point are matched and pushed again.

    Replayed events become new deliveries, with the event id as their idempotency key.
    The cursor may also move forward, skipping events, but never past the topic's end: an
    offset beyond it (or a time after the last event) moves the cursor to the topic's last
    offset, so every event published from then on is delivered.
    """
    kind, value = start

    async def move(app: App) -> tuple[int, Seen, TopicInfo]:
        before = (await app.subscriptions.get(name)).cursor
        if kind == "offset":
            sub = await app.subscriptions.replay(name, offset=int(value))
        else:
            sub = await app.subscriptions.replay(name, since=value)
        return before, await read_seen(app, sub), await app.events.topic(sub.topic)

    before, seen, topic = run_with_app(resolve_app(app_spec, store_url), move)
    # Clamped: the store stopped the cursor at the topic's end, short of what was asked.
    clamped = kind == "offset" and seen.sub.cursor < int(value) - 1
    if as_json:
        render.print_json(
            {**subscription_json(seen), "previous_cursor": before, "clamped": clamped}
        )
        return
    click.echo(_replay_message(name, kind, value, before, seen, topic, clamped))


def _replay_message(
    name: str,
    kind: str,
    value: float,
    before: int,
    seen: Seen,
    topic: TopicInfo,
    clamped: bool,
) -> str:
    """What a replay did, in one line (and why, when the cursor stopped at the topic's end)."""
    cursor, end = seen.sub.cursor, seen.topic_end
    if clamped:
        message = (
            f"subscription {name}: the topic ends at offset {end}; {_moved(before, end)}; "
            "events published from now on are delivered"
        )
    elif kind == "since" and cursor == end:
        when = datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")
        message = (
            f"subscription {name}: no event of {topic.name} was published at or after {when}; "
            f"{_moved(before, end)}, the topic's end; events published from now on are delivered"
        )
    else:
        message = (
            f"subscription {name}: cursor moved from {before} to {cursor}; "
            f"{seen.lag} event offset{'' if seen.lag == 1 else 's'} to match again"
        )
    first = topic.first_offset
    if first is not None and first > cursor + 1:
        message += f" (retention removed the events below offset {first})"
    return message


def _moved(before: int, cursor: int) -> str:
    return f"cursor moved to {cursor}" if before != cursor else f"cursor stays at {cursor}"


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
@app_options()
@json_option
def deliveries(
    name: str,
    states: tuple[DeliveryState, ...],
    limit: int,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """List a subscription's deliveries, newest first."""

    async def read(app: App) -> list[Delivery]:
        await app.subscriptions.get(name)  # an unknown name is an error, not an empty list
        return await app.subscriptions.deliveries(
            name, states=[s.value for s in states], limit=limit
        )

    found = run_with_app(resolve_app(app_spec, store_url), read)
    if as_json:
        render.print_json([delivery_json(d) for d in found])
    elif not found:
        click.echo("no deliveries")
    else:
        render.console().print(deliveries_table(found))


@subs.command("attempts")
@click.argument("delivery_id", metavar="DELIVERY_ID", type=int)
@app_options()
@json_option
def attempts(delivery_id: int, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """List a delivery's attempts, oldest first: outcome, HTTP status, error, response."""

    async def read(app: App) -> tuple[Delivery, list[DeliveryAttempt]]:
        delivery = await app.subscriptions.store.get_delivery(delivery_id)
        return delivery, await app.subscriptions.attempts(delivery_id)

    delivery, found = run_with_app(resolve_app(app_spec, store_url), read)
    if as_json:
        render.print_json([attempt_json(a) for a in found])
        return
    print_attempts(delivery, found)
