"""Console section: topics, their offsets and retention, subscriptions and recent events."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request, Response

from ...errors import InvalidArgumentError, NotFoundError
from ...events.event import Event
from ...events.records import TopicInfo
from ...services import Services
from ...services.pages import MAX_LIMIT
from ...services.subscription_rules import has_row
from ...services.topics import check_offset
from ...services.views import SubscriptionView
from ..cache import shared
from ..session import Console
from ..templates import page
from .common import console_router

router = console_router()

EVENTS_SHOWN = 25
"""Events per page of a topic's recent events."""
_TTL = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRow:
    """A topic as the topics table shows it."""

    info: TopicInfo
    subscriptions: int
    newest: float | None
    """When the newest event still kept was published (None: the topic keeps none)."""


async def every_subscription(
    services: Services, topic: str | None = None
) -> list[SubscriptionView]:
    """Every subscription of the namespace (to ``topic``), page after page."""
    found: list[SubscriptionView] = []
    cursor = None
    while True:
        listed = await services.subscriptions.list(topic=topic, limit=MAX_LIMIT, cursor=cursor)
        found += listed.items
        cursor = listed.next
        if cursor is None:
            return found


async def newest_event(services: Services, info: TopicInfo) -> Event | None:
    """The newest event ``info``'s topic still keeps."""
    if not info.events:
        return None
    listed = await services.topics.read(info.name, after=max(0, info.last_offset - 1), limit=1)
    return listed.items[0] if listed.items else None


async def topic_rows(services: Services) -> list[TopicRow]:
    """The namespace's topics with their subscriptions counted and newest event's time."""
    topics = await services.topics.list()
    counts: dict[str, int] = {}
    for view in await every_subscription(services):
        counts[view.subscription.topic] = counts.get(view.subscription.topic, 0) + 1
    rows = []
    for info in topics:
        newest = await newest_event(services, info)
        rows.append(
            TopicRow(
                info=info,
                subscriptions=counts.get(info.name, 0),
                newest=None if newest is None else newest.published_at,
            )
        )
    return rows


@router.get("/topics")
async def topics(request: Request, session: Console) -> Response:
    """Every topic of the namespace: offsets, size, retention, subscriptions, newest event."""
    services = session.services
    store = services.app.store
    rows = await shared(
        ("topics", store.url, id(store), session.namespace), _TTL, lambda: topic_rows(services)
    )
    return page(
        request,
        session,
        "topics.html",
        partial="_topics.html",
        title="Topics",
        nav="topics",
        rows=rows,
    )


def check_before(value: str | None) -> int | None:
    """The ``before`` query parameter: show events below this offset (None: the newest)."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidArgumentError(
            f"before must be an event offset (a whole number), got {value!r}", field="before"
        ) from None
    return check_offset(number, "before")


async def recent_events(
    services: Services, info: TopicInfo, before: int | None
) -> tuple[list[Event], int | None]:
    """Up to :data:`EVENTS_SHOWN` events of the topic below offset ``before`` (None: its
    newest), newest first, and the ``before`` of the next (older) page, if any."""
    if not info.events or info.first_offset is None:
        return [], None
    end = info.last_offset + 1 if before is None else min(before, info.last_offset + 1)
    lowest = info.first_offset
    start = max(lowest, end - EVENTS_SHOWN)
    if end <= lowest:
        return [], None
    listed = await services.topics.read(info.name, after=start - 1, limit=EVENTS_SHOWN)
    shown = [e for e in listed.items if e.offset is not None and e.offset < end]
    shown.reverse()
    older = start if start > lowest else None
    return shown, older


@router.get("/topics/{name}")
async def topic(
    request: Request, session: Console, name: str, before: str | None = None
) -> Response:
    """One topic: its facts, its subscriptions with their lag, and its recent events."""
    services = session.services
    info = await services.topics.get(name)
    if not has_row(info) and name not in {t.name for t in await services.topics.list()}:
        raise NotFoundError(f"no topic named {name!r}")
    events, older = await recent_events(services, info, check_before(before))
    subscriptions = await every_subscription(services, topic=info.name)
    return page(
        request,
        session,
        "topic.html",
        partial="_topic.html",
        title=f"Topic {info.name}",
        nav="topics",
        info=info,
        events=events,
        older=older,
        subscriptions=subscriptions,
    )
