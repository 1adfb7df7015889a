"""``/v1/subscriptions``: create, read, update, delete, pause, resume, replay, and the
deliveries of each with their attempts (``/v1/deliveries/{id}``). Targets are shown masked."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request, Response
from pydantic import Field

from ...events.bus import OFFSET_LIMIT
from ...events.records import Delivery
from ...events.states import DeliveryState
from ...services.views import DeliveryDetail, ReplayResult, SubscriptionView
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from ..problems import responses
from ..schemas import (
    StrictBody,
    SubscriptionChanges,
    SubscriptionCreate,
    changes,
    subscription_input,
)
from .common import DeliveryId, router
from .common import SubscriptionName as Name

subscriptions = router("subscriptions")


class Replay(StrictBody):
    """Where to deliver again from: an offset, or the events published since a time."""

    offset: Annotated[int, Field(ge=1, le=OFFSET_LIMIT)] | None = None
    """The first offset to deliver again."""
    since: float | None = None
    """Events published at or after this time (epoch seconds)."""


@subscriptions.get(
    "/subscriptions",
    summary="List subscriptions",
    response_model=PageOut[SubscriptionView],
    responses=responses(404),
)
async def list_subscriptions(
    request: Request,
    response: Response,
    services: Caller,
    topic: Annotated[str | None, Query(max_length=200, description="Of this topic.")] = None,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Subscriptions of the namespace by name, with their lag."""
    page = await services.subscriptions.list(topic, limit=limit, cursor=cursor)
    return page_body(request, response, page)


@subscriptions.post(
    "/subscriptions",
    summary="Create a subscription",
    status_code=201,
    responses=responses(404, 409),
)
async def create_subscription(
    body: SubscriptionCreate, response: Response, services: Caller
) -> SubscriptionView:
    """A new subscription to a topic, pushing to a webhook or deferring a task per event."""
    view = await services.subscriptions.create(subscription_input(body))
    response.headers["Location"] = f"/v1/subscriptions/{view.subscription.spec.name}"
    return view


@subscriptions.get("/subscriptions/{name}", summary="Show a subscription", responses=responses(404))
async def get_subscription(name: Name, services: Caller) -> SubscriptionView:
    """A subscription with its lag and its deliveries by state."""
    return await services.subscriptions.get(name)


@subscriptions.patch(
    "/subscriptions/{name}", summary="Change a subscription", responses=responses(404, 409)
)
async def update_subscription(
    name: Name, body: SubscriptionChanges, services: Caller
) -> SubscriptionView:
    """Change its filter, target (given whole) or delivery options; its cursor stays."""
    return await services.subscriptions.update(name, changes(body))


@subscriptions.delete(
    "/subscriptions/{name}", summary="Delete a subscription", responses=responses(404, 409)
)
async def delete_subscription(name: Name, services: Caller) -> SubscriptionView:
    """Delete a subscription; returns it as it was."""
    return await services.subscriptions.delete(name)


@subscriptions.post(
    "/subscriptions/{name}/pause", summary="Pause a subscription", responses=responses(404)
)
async def pause_subscription(name: Name, services: Caller) -> SubscriptionView:
    """Stop pushing (events keep arriving in the topic; the cursor waits)."""
    return await services.subscriptions.pause(name)


@subscriptions.post(
    "/subscriptions/{name}/resume", summary="Resume a subscription", responses=responses(404)
)
async def resume_subscription(name: Name, services: Caller) -> SubscriptionView:
    """Push again from where the cursor stands."""
    return await services.subscriptions.resume(name)


@subscriptions.post(
    "/subscriptions/{name}/replay", summary="Replay events", responses=responses(404)
)
async def replay(name: Name, body: Replay, services: Caller) -> ReplayResult:
    """Deliver again from ``offset`` or from the events published ``since`` a time."""
    return await services.subscriptions.replay(name, offset=body.offset, since=body.since)


@subscriptions.get(
    "/subscriptions/{name}/deliveries",
    summary="List a subscription's deliveries",
    response_model=PageOut[Delivery],
    responses=responses(404),
)
async def list_deliveries(
    request: Request,
    response: Response,
    name: Name,
    services: Caller,
    state: Annotated[
        list[DeliveryState] | None, Query(description="Deliveries in these states.")
    ] = None,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Deliveries newest first."""
    page = await services.subscriptions.deliveries(
        name, state=list(state or ()), limit=limit, cursor=cursor
    )
    return page_body(request, response, page)


@subscriptions.get("/deliveries/{delivery_id}", summary="Show a delivery", responses=responses(404))
async def get_delivery(delivery_id: DeliveryId, services: Caller) -> DeliveryDetail:
    """A delivery with its attempts, oldest first."""
    return await services.subscriptions.delivery(delivery_id)
