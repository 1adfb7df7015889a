"""``/v1/topics``: topics with their offsets, events published one at a time or in a batch, and
read from an offset; retention."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request, Response

from ...events.bus import OFFSET_LIMIT, Published
from ...events.event import Event
from ...events.records import TopicInfo
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import EventBatch, EventBody, StrictBody, event_input
from .common import router

topics = router("topics")

Topic = Annotated[str, Path(min_length=1, max_length=200, description="A topic's name.")]


class Retention(StrictBody):
    """How much of a topic to keep (null: no bound)."""

    max_age: float | None = None
    """Seconds an event is kept."""
    max_events: int | None = None
    """Events kept at most."""


@topics.get("/topics", summary="List topics", response_model=PageOut[TopicInfo])
async def list_topics(services: Caller) -> dict[str, Any]:
    """Topics of the namespace, by name, with their offsets, size and retention (one page)."""
    return {"items": await services.topics.list(), "next": None, "next_cursor": None}


@topics.get("/topics/{topic}", summary="Show a topic", responses=responses(404))
async def get_topic(topic: Topic, services: Caller) -> TopicInfo:
    """A topic's offsets, size and retention."""
    return await services.topics.get(topic)


@topics.post(
    "/topics/{topic}/events",
    summary="Publish an event",
    status_code=201,
    responses=responses(409),
)
async def publish(topic: Topic, body: EventBody, services: Caller) -> Published:
    """Append one event; it comes back with its offset once durable (``created`` false for an
    id the topic holds already, stored once). The first event creates the topic."""
    (published,) = await services.topics.publish(topic, [event_input(body)])
    return published


@topics.post(
    "/topics/{topic}/events/batch",
    summary="Publish events together",
    status_code=201,
    responses=responses(409),
)
async def publish_batch(topic: Topic, body: EventBatch, services: Caller) -> list[Published]:
    """Append up to 1,000 events in one transaction, all or none."""
    return await services.topics.publish(topic, [event_input(e) for e in body.events])


@topics.get(
    "/topics/{topic}/events",
    summary="Read events from an offset",
    response_model=PageOut[Event],
    responses=responses(404),
)
async def read_events(
    request: Request,
    response: Response,
    topic: Topic,
    services: Caller,
    after: Annotated[int, Query(ge=0, le=OFFSET_LIMIT, description="Events past this offset.")] = 0,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Events past offset ``after`` (or the cursor), oldest first."""
    page = await services.topics.read(topic, after=after, limit=limit, cursor=cursor)
    return page_body(request, response, page)


@topics.put(
    "/topics/{topic}/retention", summary="Set a topic's retention", responses=responses(404)
)
async def set_retention(topic: Topic, body: Retention, services: Caller) -> TopicInfo:
    """Keep at most ``max_age`` seconds and ``max_events`` events (null: no bound)."""
    return await services.topics.set_retention(
        topic, max_age=body.max_age, max_events=body.max_events
    )
