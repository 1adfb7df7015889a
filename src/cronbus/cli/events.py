"""The `cronbus events` commands: publish to a topic, tail it, list topics, set retention.

``tail`` reads a topic by offset like any pull consumer (the topics service's ``read``);
``--follow`` keeps reading, polling when it reached the end, and Ctrl-C ends it cleanly (exit
status 0). ``--json`` prints JSON lines there, one CloudEvent
per line, because a stream that never ends cannot be one JSON document.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import click

from ..errors import NotFoundError, SerializationError
from ..events.bus import Published
from ..events.event import Event
from ..events.records import TopicInfo
from ..serialization import parse_json
from ..services import EventInput
from ..services.pages import MAX_LIMIT
from ..validation import shorten
from . import render
from .connect import AnyServices, Where, run_services, where_options
from .loading import CliError, CronbusGroup
from .subs_render import table

_PAGE = MAX_LIMIT
"""Events read per round trip (a page of the topics service, at most)."""
_POLL_SECONDS = 0.5
"""How long ``tail --follow`` waits at the end of a topic before it reads again: the topics
service reads without waiting, so following is polling, twice a second."""
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
@where_options()
@_json_option
def publish(
    topic: str,
    type_: str,
    data: Any,
    source: str | None,
    subject: str | None,
    event_id: str | None,
    key: str | None,
    where: Where,
    as_json: bool,
) -> None:
    """Append one event to TOPIC and print its offset once it is durable."""
    event = EventInput(
        type=type_, data=data, source=source or None, subject=subject, id=event_id, key=key
    )

    async def append(services: AnyServices) -> Published:
        (published,) = await services.topics.publish(topic, [event])
        return published

    done = run_services(where, append)
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
@where_options()
@click.option("--json", "as_json", is_flag=True, help="Print one CloudEvent per line (JSON lines).")
def tail(
    topic: str,
    from_offset: int | None,
    last: int | None,
    follow: bool,
    limit: int | None,
    where: Where,
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

    async def read(services: AnyServices) -> None:
        after = await _start(services, topic, from_offset, last)
        await _print_events(services, topic, after, follow, limit, as_json)

    # Ctrl-C is how --follow ends: asyncio.run has cancelled the read and closed the app.
    with contextlib.suppress(KeyboardInterrupt):
        run_services(where, read)


async def _start(
    services: AnyServices, topic: str, from_offset: int | None, last: int | None
) -> int:
    """The offset to read after: before --from, or --last events before the topic's end.

    A topic nothing knows is refused, so a mistyped name is not an empty topic (or, with
    --follow, a wait for ever). A topic is known once it has had an event, or has retention
    settings or a subscription: those wait for their first event, and tail them quietly.
    """
    shown = topic if len(topic) <= _SHOWN else topic[: _SHOWN - 1] + "…"
    try:
        info = await services.topics.get(topic)
    except NotFoundError:
        raise CliError(f"no such topic: {shown}") from None  # of another namespace
    if info.last_offset == 0 and not await _known(services, topic):
        raise CliError(f"no such topic: {shown}")
    if from_offset is not None:
        return from_offset - 1
    return max(0, info.last_offset - (_DEFAULT_LAST if last is None else last))


async def _known(services: AnyServices, topic: str) -> bool:
    """True when the topic has settings or subscriptions, though no event yet."""
    if any(info.name == topic for info in await services.topics.list()):
        return True
    return bool((await services.subscriptions.list(topic, limit=1)).items)


async def _print_events(
    services: AnyServices,
    topic: str,
    after: int,
    follow: bool,
    limit: int | None,
    as_json: bool,
) -> None:
    left = limit
    while left is None or left > 0:
        page = _PAGE if left is None else min(_PAGE, left)
        found = (await services.topics.read(topic, after=after, limit=page)).items
        if not found:
            if not follow:
                return
            await asyncio.sleep(_POLL_SECONDS)  # at the end of the topic: look again soon
            continue
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
@where_options()
@_json_option
def topics(where: Where, as_json: bool) -> None:
    """List topics: first and last offset, events kept, retention."""
    found = run_services(where, lambda services: services.topics.list())
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
@where_options()
@_json_option
def retention(
    topic: str,
    max_age: list[float | None],
    max_events: list[float | None],
    where: Where,
    as_json: bool,
) -> None:
    """Show or set how long TOPIC keeps its events.

    Without options it prints the current retention; an option not given keeps its current
    value. Dispatchers remove old events in the background, never one that a live delivery
    still needs.
    """

    async def change(services: AnyServices) -> TopicInfo:
        info = await services.topics.get(topic)
        if not max_age and not max_events:
            return info
        age = max_age[0] if max_age else info.max_age
        count = max_events[0] if max_events else info.max_events
        whole = None if count is None else int(count)
        return await services.topics.set_retention(topic, max_age=age, max_events=whole)

    info = run_services(where, change)
    if as_json:
        render.print_json(topic_json(info))
    else:
        click.echo(f"{topic}: {_retention_text(info)}")


def _retention_text(info: TopicInfo) -> str:
    age = None if info.max_age is None else f"at most {info.max_age:g} seconds old"
    if info.max_events is None:
        return f"keeps events {age}" if age else "keeps every event"
    return f"keeps the newest {info.max_events} events" + (f", {age}" if age else "")
