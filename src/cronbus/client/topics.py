"""``/v1/topics`` as the topics service's methods: list, get, publish, read, set_retention."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from ..events.bus import Published
from ..events.event import Event
from ..events.records import TopicInfo
from ..services.pages import Page
from ..services.views import EventInput
from .http import Transport, decode, decode_list
from .pages import page


class RemoteTopics:
    """Topics of one namespace, on a server (the methods of
    :class:`~cronbus.services.topics.TopicsService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(self) -> builtins.list[TopicInfo]:
        """Every topic of the namespace, by name."""
        return page(TopicInfo, await self._http.get("/v1/topics")).items

    async def get(self, name: str) -> TopicInfo:
        """A topic's offsets, size and retention."""
        return decode(TopicInfo, await self._http.get(_path(name)))

    async def publish(
        self, topic: str, events: Sequence[EventInput | Event]
    ) -> builtins.list[Published]:
        """Append events to ``topic`` in one transaction, all or none."""
        bodies = [_event_body(event) for event in events]
        answer = await self._http.post(_path(topic) + "/events/batch", {"events": bodies})
        return decode_list(Published, answer)

    async def read(
        self, topic: str, after: int = 0, limit: int = 50, cursor: str | None = None
    ) -> Page[Event]:
        """Events of ``topic`` past offset ``after`` (or ``cursor``), oldest first."""
        params = {"after": after, "limit": limit, "cursor": cursor}
        return page(Event, await self._http.get(_path(topic) + "/events", params))

    async def set_retention(
        self, topic: str, max_age: float | None = None, max_events: int | None = None
    ) -> TopicInfo:
        """Keep at most ``max_age`` seconds and ``max_events`` events of ``topic``."""
        body = {"max_age": max_age, "max_events": max_events}
        return decode(
            TopicInfo, await self._http.request("PUT", _path(topic) + "/retention", body=body)
        )


def _path(topic: str) -> str:
    return "/v1/topics/" + quote(topic, safe="")


def _event_body(event: EventInput | Event) -> dict[str, Any]:
    """An event as the API takes it (fields not given left out, so the server fills them)."""
    if isinstance(event, Event):
        given = {
            "type": event.type,
            "data": event.data,
            "source": event.source,
            "subject": event.subject,
            "id": event.id,
            "key": event.key,
            "time": event.time,
        }
    else:
        given = asdict(event)
    return {key: value for key, value in given.items() if value is not None or key == "data"}
