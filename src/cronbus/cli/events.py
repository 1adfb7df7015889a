"""The `cronbus events` commands: publish to a topic, tail it, list topics, set retention.

``tail`` reads a topic by offset like any pull consumer; ``--follow`` keeps reading with long
polls (``app.events.read(..., wait=...)``), so a new event is printed as soon as it is durable,
and Ctrl-C ends it cleanly (exit status 0). ``--json`` prints JSON lines there, one CloudEvent
per line, because a stream that never ends cannot be one JSON document.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import click

from ..app import App
from ..errors import SerializationError
from ..events.bus import Published
from ..events.event import DEFAULT_SOURCE, Event, make_event
from ..events.records import TopicInfo
from ..serialization import parse_json
from ..validation import shorten
from . import render
from .loading import CliError, CronbusGroup, app_options, resolve_app, run_with_app
from .subs_render import table

_PAGE = 1000
"""Events read per store round trip."""
_WAIT_SECONDS = 5.0
"""One long poll of ``tail --follow``: short enough to notice a closed pipe, long enough to idle."""
_DEFAULT_LAST = 10
_SHOWN = 80
"""Characters of a topic name that an error shows."""
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group(cls=CronbusGroup)
def events() -> None:
    """Publish events, read topics, and set how long topics keep their events."""


# -- publish -------------------------------------------------------------------------------------
def _read_data(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Parse ``--data``: JSON text, or ``-`` to read the JSON from stdin."""
    if value is None:
        return None
    text = sys.stdin.read() if value == "-" else value
    try:
        return parse_json(text, "stdin" if value == "-" else shorten(text))
    except SerializationError as exc:
        raise click.BadParameter(str(exc)) from None


@events.command("publish")
@click.argument("topic")
@click.option("--type", "type_", metavar="TYPE", required=True, help="The event type.")
@click.option(
    "--data",
    metavar="JSON",
    callback=_read_data,
    help="The event data as JSON; '-' reads it from stdin. Default: no data (null).",
)
@click.option("--source", help="The CloudEvents source. Default: cronbus.")
@click.option("--subject", help="The CloudEvents subject.")
@click.option(
    "--id",
    "event_id",
    metavar="ID",
    help="The event id (default: a new UUIDv7). A repeated id is stored once: it is the "
    "idempotency key of the publish.",
)
@click.option("--key", help="The ordering key of ordered subscriptions (default: the subject).")
@app_options()
@_json_option
def publish(
    topic: str,
    type_: str,
    data: Any,
    source: str | None,
    subject: str | None,
    event_id: str | None,
    key: str | None,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Append one event to TOPIC and print its offset once it is durable."""
    # Built (and so checked) before the store is opened: a refused event leaves no trace.
    event = make_event(
        type_, data, source=source or DEFAULT_SOURCE, subject=subject, id=event_id, key=key
    )

    async def append(app: App) -> Published:
        (published,) = await app.events.publish_many(topic, [event])
        return published

    done = run_with_app(resolve_app(app_spec, store_url), append)
    stored = done.event
    if as_json:
        render.print_json(
            {"topic": topic, "offset": stored.offset, "id": stored.id, "created": done.created}
        )
    elif done.created:
        click.echo(f"published {stored.id} to {topic} at offset {stored.offset}")
    else:
        click.echo(f"event {stored.id} was already in {topic}, at offset {stored.offset}")


# -- tail ----------------------------------------------------------------------------------------
@events.command("tail")
@click.argument("topic")
@click.option(
    "--from",
    "from_offset",
    type=click.IntRange(min=1),
    metavar="OFFSET",
    help="Start at this offset (the first event is at 1).",
)
@click.option(
    "--last",
    type=click.IntRange(min=0),
    metavar="N",
    help=f"Start with the last N events (the default, with N={_DEFAULT_LAST}).",
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events until Ctrl-C.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    metavar="N",
    help="Stop after N events (with or without --follow).",
)
@app_options()
@click.option("--json", "as_json", is_flag=True, help="Print one CloudEvent per line (JSON lines).")
def tail(
    topic: str,
    from_offset: int | None,
    last: int | None,
    follow: bool,
    limit: int | None,
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Print the events of TOPIC in offset order: the last 10, or from --from OFFSET.

    A topic that has no event, no retention setting and no subscription is an error (no such
    topic). Without --follow it stops at the end of the topic; with it, it waits for new events
    (long polling) until Ctrl-C. Text lines read OFFSET, PUBLISHED (UTC), TYPE, SUBJECT, ID,
    DATA.
    """
    if from_offset is not None and last is not None:
        raise click.UsageError("give --from or --last, not both")
    app = resolve_app(app_spec, store_url)

    async def read(app: App) -> None:
        after = await _start(app, topic, from_offset, last)
        await _print_events(app, topic, after, follow, limit, as_json)

    # Ctrl-C is how --follow ends: asyncio.run has cancelled the read and closed the app.
    with contextlib.suppress(KeyboardInterrupt):
        run_with_app(app, read)


async def _start(app: App, topic: str, from_offset: int | None, last: int | None) -> int:
    """The offset to read after: before --from, or --last events before the topic's end.

    A topic nothing knows is refused, so a mistyped name is not an empty topic (or, with
    --follow, a wait for ever). A topic is known once it has had an event, or has retention
    settings or a subscription: those wait for their first event, and tail them quietly.
    """
    info = await app.events.topic(topic)
    if info.last_offset == 0 and not await _known(app, topic):
        shown = topic if len(topic) <= _SHOWN else topic[: _SHOWN - 1] + "…"
        raise CliError(f"no such topic: {shown}")
    if from_offset is not None:
        return from_offset - 1
    return max(0, info.last_offset - (_DEFAULT_LAST if last is None else last))


async def _known(app: App, topic: str) -> bool:
    """True when the topic has settings or subscriptions, though no event yet."""
    if any(info.name == topic for info in await app.events.topics()):
        return True
    return bool(await app.subscriptions.list(topic))


async def _print_events(
    app: App, topic: str, after: int, follow: bool, limit: int | None, as_json: bool
) -> None:
    left = limit
    while left is None or left > 0:
        page = _PAGE if left is None else min(_PAGE, left)
        found = await app.events.read(
            topic, after=after, limit=page, wait=_WAIT_SECONDS if follow else 0.0
        )
        if not found and not follow:
            return
        for event in found:
            _print_event(event, as_json)
        if found:
            after = found[-1].offset or after
        if left is not None:
            left -= len(found)


def _print_event(event: Event, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(event.to_cloudevent(), ensure_ascii=False))
        return
    fields = (
        str(event.offset),
        render.human_time(event.published_at),
        event.type,
        event.subject or "-",
        event.id,
        json.dumps(event.data, ensure_ascii=False),
    )
    click.echo("  ".join(fields))


# -- topics and retention ------------------------------------------------------------------------
@events.command("topics")
@app_options()
@_json_option
def topics(app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """List topics: first and last offset, events kept, retention."""
    found = run_with_app(resolve_app(app_spec, store_url), lambda app: app.events.topics())
    if as_json:
        render.print_json([topic_json(info) for info in found])
    else:
        _print_topics(found)


def topic_json(info: TopicInfo) -> dict[str, Any]:
    """A topic as a JSON object."""
    return {
        "name": info.name,
        "first_offset": info.first_offset,
        "last_offset": info.last_offset,
        "events": info.events,
        "max_age": info.max_age,
        "max_events": info.max_events,
    }


def _print_topics(found: Sequence[TopicInfo]) -> None:
    if not found:
        click.echo("no topics")
        return
    columns = ("TOPIC", "FIRST", "LAST", "EVENTS", "MAX AGE", "MAX EVENTS")
    out = table(*columns, right=columns[1:])
    for info in found:
        out.add_row(
            info.name,
            "-" if info.first_offset is None else str(info.first_offset),
            str(info.last_offset),
            str(info.events),
            _seconds(info.max_age),
            "-" if info.max_events is None else str(info.max_events),
        )
    render.console().print(out)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g} s"


def _limit(ctx: click.Context, param: click.Parameter, value: str | None) -> list[float | None]:
    """``--max-age``/``--max-events``: [] when not given, [None] for ``none``, else [number]."""
    if value is None:
        return []
    if value.strip().lower() == "none":
        return [None]
    whole = param.name == "max_events"
    try:
        number = int(value) if whole else float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        kind = "a whole number" if whole else "a number of seconds"
        raise click.BadParameter(f"{value!r} is not {kind} > 0, nor 'none' (no limit)")
    return [number]


@events.command("retention")
@click.argument("topic")
@click.option(
    "--max-age",
    callback=_limit,
    metavar="SECONDS|none",
    help="Keep events at most this many seconds; 'none' removes the limit.",
)
@click.option(
    "--max-events",
    callback=_limit,
    metavar="N|none",
    help="Keep at most the newest N events; 'none' removes the limit.",
)
@app_options()
@_json_option
def retention(
    topic: str,
    max_age: list[float | None],
    max_events: list[float | None],
    app_spec: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Show or set how long TOPIC keeps its events.

    Without options it prints the current retention; an option not given keeps its current
    value. Dispatchers remove old events in the background, never one that a live delivery
    still needs.
    """

    async def change(app: App) -> TopicInfo:
        info = await app.events.topic(topic)
        if not max_age and not max_events:
            return info
        age = max_age[0] if max_age else info.max_age
        count = max_events[0] if max_events else info.max_events
        whole = None if count is None else int(count)
        await app.events.set_retention(topic, max_age=age, max_events=whole)
        return await app.events.topic(topic)

    info = run_with_app(resolve_app(app_spec, store_url), change)
    if as_json:
        render.print_json(topic_json(info))
    else:
        click.echo(f"{topic}: {_retention_text(info)}")


def _retention_text(info: TopicInfo) -> str:
    age = None if info.max_age is None else f"at most {info.max_age:g} seconds old"
    if info.max_events is None:
        return f"keeps events {age}" if age else "keeps every event"
    return f"keeps the newest {info.max_events} events" + (f", {age}" if age else "")
