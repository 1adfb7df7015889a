"""``/v1/subscriptions`` and ``/v1/deliveries`` as the subscriptions service's methods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from ..events.records import Delivery
from ..events.states import DeliveryState
from ..services.pages import DEFAULT_LIMIT, Page
from ..services.views import DeliveryDetail, ReplayResult, SubscriptionInput, SubscriptionView
from .http import Transport, decode
from .pages import page


class RemoteSubscriptions:
    """Subscriptions of one namespace, on a server (the methods of
    :class:`~cronbus.services.subscriptions.SubscriptionsService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(
        self, topic: str | None = None, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[SubscriptionView]:
        """Subscriptions of the namespace (to ``topic``) by name, a page at a time."""
        params = {"topic": topic, "limit": limit, "cursor": cursor}
        return page(SubscriptionView, await self._http.get("/v1/subscriptions", params))

    async def get(self, name: str) -> SubscriptionView:
        """One subscription with its lag and its deliveries counted by state."""
        return decode(SubscriptionView, await self._http.get(_path(name)))

    async def create(self, given: SubscriptionInput) -> SubscriptionView:
        """Subscribe a webhook or a task to a topic."""
        body = {key: _json(value) for key, value in asdict(given).items() if value is not None}
        return decode(SubscriptionView, await self._http.post("/v1/subscriptions", body))

    async def update(self, name: str, changes: Mapping[str, Any]) -> SubscriptionView:
        """Change a subscription's filter, target or delivery options."""
        body = {key: _json(value) for key, value in changes.items()}
        return decode(SubscriptionView, await self._http.patch(_path(name), body))

    async def delete(self, name: str) -> SubscriptionView:
        """Delete a subscription with its cursor and deliveries; returns it as it was."""
        return decode(SubscriptionView, await self._http.delete(_path(name)))

    async def pause(self, name: str) -> SubscriptionView:
        """Stop pushing."""
        return decode(SubscriptionView, await self._http.post(_path(name) + "/pause"))

    async def resume(self, name: str) -> SubscriptionView:
        """Push again."""
        return decode(SubscriptionView, await self._http.post(_path(name) + "/resume"))

    async def replay(
        self, name: str, offset: int | None = None, since: float | None = None
    ) -> ReplayResult:
        """Deliver again from ``offset`` or from the events published ``since`` a time."""
        body = {
            key: value for key, value in (("offset", offset), ("since", since)) if value is not None
        }
        answer = await self._http.post(_path(name) + "/replay", body)
        return decode(ReplayResult, answer)

    async def deliveries(
        self,
        name: str,
        state: Sequence[DeliveryState | str] | DeliveryState | str | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Page[Delivery]:
        """A subscription's deliveries (in ``state``), newest first, a page at a time."""
        states = [state] if isinstance(state, str) else list(state or [])
        params = {"state": [str(s) for s in states], "limit": limit, "cursor": cursor}
        return page(Delivery, await self._http.get(_path(name) + "/deliveries", params))

    async def delivery(self, delivery_id: int) -> DeliveryDetail:
        """One delivery with its attempts."""
        return decode(DeliveryDetail, await self._http.get(f"/v1/deliveries/{int(delivery_id)}"))


def _path(name: str) -> str:
    return "/v1/subscriptions/" + quote(name, safe="")


def _json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value
