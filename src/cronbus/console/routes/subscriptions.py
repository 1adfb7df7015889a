"""Console section: subscriptions (lag, success rate, health), their deliveries and attempts;
pause, resume and replay."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated

from fastapi import Form, Query, Request, Response

from ...errors import InvalidArgumentError, NotFoundError
from ...events.event import Event
from ...events.states import DeliveryState
from ...services import Services
from ...services.deliveries import check_delivery_id
from ...services.overview import failing_subscription
from ...services.pages import MAX_LIMIT
from ...services.views import SubscriptionView
from ...validation import shorten
from ..cache import shared
from ..session import Console
from ..templates import page
from .common import console_router, done

router = console_router()

_TTL = 2.0
_PUSHED = (DeliveryState.ACKED, DeliveryState.RETRY, DeliveryState.DEAD)
_REASONS = ((DeliveryState.RETRY, "waiting for a retry"), (DeliveryState.DEAD, "dead"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionRow:
    """A subscription with what the console says about its health."""

    view: SubscriptionView
    """The subscription, with its deliveries counted by state."""
    success: float | None
    """Acknowledged deliveries over those that ended (acknowledged or dead); None: none ended."""
    circuit: str
    """``open`` when its newest pushed deliveries all failed (as many as open the breaker),
    else ``closed``."""
    failing: tuple[str, ...]
    """Why it needs an operator (disabled, deliveries retrying or dead, circuit open), as the
    overview's failing figure counts it; empty when it does not."""


def success_rate(counts: dict[str, int]) -> float | None:
    """Acknowledged deliveries over acknowledged plus dead ones (None when neither)."""
    acked = counts.get(DeliveryState.ACKED.value, 0)
    ended = acked + counts.get(DeliveryState.DEAD.value, 0)
    return acked / ended if ended else None


async def circuit_of(services: Services, view: SubscriptionView) -> str:
    """The breaker's state as the store shows it.

    The dispatcher keeps its breaker in memory; what the store shows is whether the newest
    ``circuit_failures`` pushed deliveries all failed, which is what opens it."""
    counts = view.deliveries or {}
    if not counts.get(DeliveryState.RETRY.value) and not counts.get(DeliveryState.DEAD.value):
        return "closed"
    needed = view.subscription.spec.policy.circuit_failures
    listed = await services.subscriptions.deliveries(
        view.subscription.name, state=_PUSHED, limit=min(MAX_LIMIT, 2 * needed)
    )
    newest = sorted(listed.items, key=lambda d: d.updated_at, reverse=True)[:needed]
    failed = [d for d in newest if d.state is not DeliveryState.ACKED]
    return "open" if len(newest) == needed and len(failed) == needed else "closed"


async def subscription_row(services: Services, name: str) -> SubscriptionRow:
    """One subscription's row: its counts, success rate, circuit and what is failing."""
    view = await services.subscriptions.get(name)
    counts = view.deliveries or {}
    circuit = await circuit_of(services, view)
    failing: list[str] = []
    # The overview's definition, so its "failing" figure counts the rows flagged here.
    by_state = {DeliveryState(state): count for state, count in counts.items()}
    if failing_subscription(view.subscription, by_state):
        if view.state == "disabled":
            failing.append(f"disabled: {view.subscription.disabled_reason}")
        for state, words in _REASONS:
            if by_state.get(state):
                failing.append(f"{by_state[state]} {words}")
        if circuit == "open":
            failing.append("circuit open")
    return SubscriptionRow(
        view=view, success=success_rate(counts), circuit=circuit, failing=tuple(failing)
    )


async def subscription_rows(
    services: Services, cursor: str | None
) -> tuple[list[SubscriptionRow], str | None]:
    """A page of the namespace's subscriptions as rows, and the next page's cursor."""
    listed = await services.subscriptions.list(cursor=cursor)
    rows = [await subscription_row(services, v.subscription.name) for v in listed.items]
    return rows, listed.next


@router.get("/subscriptions")
async def subscriptions(request: Request, session: Console, cursor: str | None = None) -> Response:
    """The namespace's subscriptions: state, lag, success rate, failing, circuit."""
    services = session.services
    store = services.app.store
    key = ("subscriptions", store.url, id(store), session.namespace, cursor)
    rows, following = await shared(key, _TTL, lambda: subscription_rows(services, cursor))
    return page(
        request,
        session,
        "subscriptions.html",
        partial="_subscriptions.html",
        title="Subscriptions",
        nav="subscriptions",
        rows=rows,
        following=following,
    )


@router.get("/subscriptions/{name}")
async def subscription(
    request: Request,
    session: Console,
    name: str,
    state: Annotated[list[str] | None, Query()] = None,
    cursor: str | None = None,
) -> Response:
    """One subscription: its definition, deliveries by state, and its recent deliveries."""
    services = session.services
    row = await subscription_row(services, name)
    states = [s for s in state or [] if s]
    deliveries = await services.subscriptions.deliveries(name, state=states, cursor=cursor)
    return page(
        request,
        session,
        "subscription.html",
        partial="_subscription.html",
        title=f"Subscription {row.view.subscription.name}",
        nav="subscriptions",
        row=row,
        deliveries=deliveries,
        states=states,
        delivery_states=[s.value for s in DeliveryState],
    )


@router.post("/subscriptions/{name}/pause")
async def pause(session: Console, name: str) -> Response:
    """Stop pushing the subscription's events (they keep arriving)."""
    view = await session.services.subscriptions.pause(name)
    where = f"/subscriptions/{view.subscription.name}"
    return done(where, f"subscription {view.subscription.name} paused")


@router.post("/subscriptions/{name}/resume")
async def resume(session: Console, name: str) -> Response:
    """Push the subscription's events again."""
    view = await session.services.subscriptions.resume(name)
    where = f"/subscriptions/{view.subscription.name}"
    return done(where, f"subscription {view.subscription.name} resumed")


def parse_offset(text: str) -> int | None:
    """The replay form's offset (None when left empty)."""
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(
            f"offset must be a whole number from 1, got {shorten(text)}", field="offset"
        ) from None


def parse_since(text: str) -> float | None:
    """The replay form's time (ISO 8601; UTC when it names no zone) as epoch seconds."""
    text = text.strip()
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(
            f"since must be a date and time like 2024-05-01T12:00:00Z, got {shorten(text)}",
            field="since",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


@router.post("/subscriptions/{name}/replay")
async def replay(
    session: Console,
    name: str,
    offset: Annotated[str, Form()] = "",
    since: Annotated[str, Form()] = "",
) -> Response:
    """Deliver again from an offset, or from the events published since a time."""
    result = await session.services.subscriptions.replay(
        name, offset=parse_offset(offset), since=parse_since(since)
    )
    return done(f"/subscriptions/{result.subscription.subscription.name}", result.message)


async def delivered_event(services: Services, topic: str, offset: int) -> Event | None:
    """The event a delivery pushes, while its topic still keeps it."""
    listed = await services.topics.read(topic, after=offset - 1, limit=1)
    found = [e for e in listed.items if e.offset == offset]
    return found[0] if found else None


def parse_delivery_id(text: str) -> int:
    """A delivery id from the path."""
    try:
        number = int(text)
    except ValueError:
        raise NotFoundError(f"no delivery has id {shorten(text)}") from None
    return check_delivery_id(number)


@router.get("/deliveries/{delivery_id}")
async def delivery(request: Request, session: Console, delivery_id: str) -> Response:
    """One delivery: its event, state, attempts count and due time, and every attempt."""
    services = session.services
    detail = await services.subscriptions.delivery(parse_delivery_id(delivery_id))
    found = detail.delivery
    event = await delivered_event(services, found.topic, found.offset)
    return page(
        request,
        session,
        "delivery.html",
        partial="_delivery.html",
        title=f"Delivery {found.id}",
        nav="subscriptions",
        detail=detail,
        event=event,
    )
