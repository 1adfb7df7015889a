"""The `cronbus subs` commands: add, list, show, pause, resume, delete and replay subscriptions,
and inspect their deliveries and attempts.

Every definition is checked (target, filter, policy) before the store is opened, so a refused
``add`` leaves no trace. What the commands print is built in :mod:`.subs_render`.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.text import Text

from ..app import App
from ..errors import InvalidArgumentError, SubscriptionNotFoundError
from ..events.bus import build_filter, build_policy, check_name
from ..events.event import validate_topic
from ..events.records import Delivery, DeliveryAttempt, Origin, Subscription
from ..events.states import DeliveryState
from ..events.targets import check_target, check_url
from . import render
from .loading import (
    CliError,
    CronbusGroup,
    app_options,
    parse_states,
    resolve_app,
    run_with_app,
)
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

_HEADER = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+):(.*)")

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)
_name_argument = click.argument("name", metavar="NAME")


@click.group(cls=CronbusGroup)
def subs() -> None:
    """Add, inspect, pause, replay and delete subscriptions, and see their deliveries.

    A subscription pushes the events of one topic that pass its filter to a target: a
    webhook (--webhook URL) or a task (--task NAME, one run per event).
    """


# -- add -----------------------------------------------------------------------------------------
def _split(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    """Read an option given several times, comma separated, or both."""
    parts = [part.strip() for value in values for part in value.split(",")]
    if not all(parts):
        raise click.BadParameter(f"an empty value in {', '.join(map(repr, values))}")
    return parts


def _headers(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values:
        match = _HEADER.fullmatch(value)
        if match is None:
            raise click.BadParameter(f"{value!r} is not a header like 'X-Team: billing'")
        headers[match[1]] = match[2].strip()
    return headers


def _webhook(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_url(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None


def _filter(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        spec = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise click.BadParameter('must be a JSON object, like \'{"types": ["order.*"]}\'')
    return spec


@subs.command("add")
@_name_argument
@click.option("--topic", required=True, help="The topic to read.")
@click.option(
    "--types",
    multiple=True,
    callback=_split,
    metavar="PATTERN",
    help="Only events whose type matches, like 'order.*'; repeat it or separate with commas.",
)
@click.option("--source", "sources", multiple=True, callback=_split, help="Only this source.")
@click.option("--subject", "subjects", multiple=True, callback=_split, help="Only this subject.")
@click.option(
    "--filter",
    "filter_spec",
    metavar="JSON",
    callback=_filter,
    help="A full filter as JSON (docs/events.md), e.g. data conditions; --types, --source and "
    "--subject replace its keys of the same name.",
)
@click.option(
    "--webhook",
    metavar="URL",
    callback=_webhook,
    help="POST each event to this http(s) URL. Redirects are not followed; link-local, cloud "
    "metadata, unspecified and multicast addresses are refused (CRONBUS_WEBHOOK_DENY and "
    "CRONBUS_WEBHOOK_ALLOW change that).",
)
@click.option(
    "--secret",
    "secrets",
    multiple=True,
    metavar="whsec_...",
    help="Sign webhooks with this secret (Standard Webhooks); repeat it to rotate secrets.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    callback=_headers,
    metavar="'NAME: VALUE'",
    help="Send this header with each webhook; repeatable. Values are masked wherever the "
    "subscription is shown.",
)
@click.option("--task", metavar="NAME", help="Create a run of this task for each event.")
@click.option("--queue", help="The queue of those runs (default: the task's).")
@click.option(
    "--start",
    type=click.Choice(["latest", "earliest"]),
    default="latest",
    show_default=True,
    help="Deliver events published from now on, or the whole topic.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Longest one push may take before it is interrupted and counted failed [default: 10].",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    metavar="N",
    help="Deliveries of this subscription pushed at once, at most [default: 16].",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    metavar="N",
    help="Attempts before a delivery becomes a dead letter [default: 8].",
)
@click.option(
    "--backoff",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="First retry delay, doubled each retry with jitter, up to 300 s [default: 1].",
)
@click.option(
    "--rate-limit",
    type=click.FloatRange(min=0, min_open=True),
    metavar="PER-SECOND",
    help="Deliveries per second at most.",
)
@click.option("--ordered", is_flag=True, help="Keep order per event key (or subject).")
@click.option(
    "--replace", is_flag=True, help="Redefine an existing subscription (its cursor is kept)."
)
@app_options()
@_json_option
def add(
    name: str,
    topic: str,
    types: list[str],
    sources: list[str],
    subjects: list[str],
    filter_spec: dict[str, Any],
    webhook: str | None,
    secrets: tuple[str, ...],
    headers: dict[str, str],
    task: str | None,
    queue: str | None,
    start: str,
    replace: bool,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
    **policy: Any,
) -> None:
    """Subscribe a webhook or a task to the events of a topic.

    Delivery options not given keep their defaults: --timeout 10, --max-in-flight 16,
    --max-attempts 8, --backoff 1 (doubled each retry), no rate limit, unordered.
    """
    options = {k: v for k, v in policy.items() if v is not None and v is not False}
    target = _target(webhook, list(secrets), headers, task, queue)
    # Checked before the store is opened (add() checks them again, cheaply).
    check_name(name)
    validate_topic(topic)
    check_target(target)
    spec = build_filter(types or None, sources or None, subjects or None, filter=filter_spec)
    build_policy(**options)
    app = resolve_app(app_spec, store_url)
    if task is not None and app_spec is not None:
        app.get_task(task)

    async def create(app: App) -> Seen:
        if not replace and await _exists(app, name):
            raise CliError(f"a subscription named {name!r} exists; use --replace to redefine it")
        sub = await app.subscriptions.add(
            name,
            topic=topic,
            webhook=webhook,
            secrets=list(secrets),
            headers=headers,
            task=task,
            queue=queue,
            filter=spec,
            start=start,
            replace_existing=replace,
            **options,
        )
        return await _seen(app, sub)

    seen = run_with_app(app, create)
    if as_json:
        render.print_json(subscription_json(seen))
    else:
        click.echo(f"subscription {name} on {topic}, cursor at offset {seen.sub.cursor}")


def _target(
    webhook: str | None,
    secrets: list[str],
    headers: dict[str, str],
    task: str | None,
    queue: str | None,
) -> dict[str, Any]:
    """The target the options describe; refuses both, neither, and options of the other kind."""
    if webhook is not None and task is not None:
        raise click.UsageError("give one target, --webhook or --task, not both")
    if webhook is None and task is None:
        raise click.UsageError("give a target: --webhook URL or --task NAME")
    if webhook is not None:
        if queue is not None:
            raise click.UsageError("--queue goes with --task, not --webhook")
        return {"kind": "webhook", "url": webhook, "headers": headers, "secrets": secrets}
    if secrets or headers:
        raise click.UsageError("--secret and --header go with --webhook, not --task")
    return {"kind": "task", "task": task, "queue": queue}


async def _exists(app: App, name: str) -> bool:
    try:
        await app.subscriptions.get(name)
    except SubscriptionNotFoundError:
        return False
    return True


async def _seen(app: App, sub: Subscription) -> Seen:
    info = await app.events.topic(sub.topic)
    return Seen(sub, info.last_offset, app.clock.now())


# -- list and show -------------------------------------------------------------------------------
@subs.command("list")
@click.option("--topic", help="Only subscriptions of this topic.")
@app_options()
@_json_option
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
@_name_argument
@app_options()
@_json_option
def show(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Show a subscription: its definition, cursor and lag, and its deliveries by state."""

    async def read(app: App) -> tuple[Seen, dict[DeliveryState, int]]:
        seen = await _seen(app, await app.subscriptions.get(name))
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
@_name_argument
@app_options()
@_json_option
def pause(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Stop pushing; events keep arriving and are delivered after resume."""
    _set_paused(name, True, app_spec, store_url, as_json)


@subs.command("resume")
@_name_argument
@app_options()
@_json_option
def resume(name: str, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Push again (also after cronbus disabled it, e.g. on a 410 Gone)."""
    _set_paused(name, False, app_spec, store_url, as_json)


def _set_paused(
    name: str, paused: bool, app_spec: str | None, store_url: str | None, as_json: bool
) -> None:
    async def change(app: App) -> Seen:
        if paused:
            return await _seen(app, await app.subscriptions.pause(name))
        return await _seen(app, await app.subscriptions.resume(name))

    seen = run_with_app(resolve_app(app_spec, store_url), change)
    if as_json:
        render.print_json(subscription_json(seen))
    else:
        render.console().print(f"subscription {name}: ", state_text(seen.sub), sep="")


@subs.command("delete")
@_name_argument
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
@_name_argument
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
@_json_option
def replay(
    name: str,
    start: tuple[str, float],
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Move a subscription's cursor, so events from that point are matched and pushed again.

    Replayed events become new deliveries, with the event id as their idempotency key.
    The cursor may also move forward, skipping events.
    """
    kind, value = start

    async def move(app: App) -> tuple[int, Seen]:
        before = (await app.subscriptions.get(name)).cursor
        if kind == "offset":
            sub = await app.subscriptions.replay(name, offset=int(value))
        else:
            sub = await app.subscriptions.replay(name, since=value)
        return before, await _seen(app, sub)

    before, seen = run_with_app(resolve_app(app_spec, store_url), move)
    if as_json:
        render.print_json({**subscription_json(seen), "previous_cursor": before})
    else:
        click.echo(
            f"subscription {name}: cursor moved from {before} to {seen.sub.cursor}; "
            f"{seen.lag} event offset{'' if seen.lag == 1 else 's'} to match again"
        )


# -- deliveries and attempts ---------------------------------------------------------------------
@subs.command("deliveries")
@_name_argument
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
@_json_option
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
@_json_option
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
