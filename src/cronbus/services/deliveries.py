"""Deliveries as the services read them: ids and states checked, and a subscription's
deliveries a page at a time (keyset on the delivery id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ..events.records import Delivery, DeliveryFilter
from ..events.states import DeliveryState
from ..validation import shorten
from .context import Context, check_id

_SCAN = 10_000
"""Deliveries of one subscription read to find those below a cursor (the store's delivery
filter has no keyset yet)."""


def check_delivery_id(value: object, field: str = "delivery_id") -> int:
    """A delivery id: a whole number from 1."""
    return check_id(value, field)


def check_delivery_states(
    states: Sequence[DeliveryState | str] | DeliveryState | str | None, field: str = "state"
) -> tuple[DeliveryState, ...]:
    """Delivery states by name (``pending``, ``in_flight``, ``acked``, ``retry``, ``dead``)."""
    if states is None:
        return ()
    if isinstance(states, str):
        states = [states]
    chosen = []
    for state in states:
        try:
            chosen.append(DeliveryState(state))
        except ValueError:
            allowed = ", ".join(s.value for s in DeliveryState)
            raise InvalidArgumentError(
                f"{field} must be delivery states ({allowed}), got {shorten(state)}",
                field=field,
            ) from None
    return tuple(dict.fromkeys(chosen))


async def list_deliveries(
    context: Context,
    subscription: str,
    states: Sequence[DeliveryState],
    before: int | None,
    limit: int,
) -> list[Delivery]:
    """Deliveries of one subscription below id ``before``, newest first, at most ``limit``."""
    if "before_id" in DeliveryFilter.__dataclass_fields__:
        keyset: dict[str, Any] = {"before_id": before}
        wanted = DeliveryFilter(subscription=subscription, states=states, limit=limit, **keyset)
        return await context.store.list_deliveries(wanted)
    wanted = DeliveryFilter(
        subscription=subscription, states=states, limit=limit if before is None else _SCAN
    )
    found = await context.store.list_deliveries(wanted)
    return [d for d in found if before is None or d.id < before][:limit]
