"""The event half of the store contract: topics, subscriptions, cursors and deliveries.

A subscription's pusher is held by one dispatcher at a time through a lease; every change a
holder makes (moving the cursor, taking and finishing deliveries) is fenced by the lease's
``epoch``, so a dispatcher that lost its lease (paused, cut off) cannot change anything.
The cursor only moves together with the recording of the deliveries it passes (invariant 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..events.records import (
    Appended,
    Delivery,
    DeliveryAttempt,
    DeliveryFilter,
    DeliveryResult,
    EventRecord,
    NewDelivery,
    NewEvent,
    Subscription,
    SubscriptionLease,
    SubscriptionSpec,
    TopicInfo,
)
from ..events.states import DeliveryState

EVENTS_CHANNEL = "events"
"""Wake-up channel: events were appended, or deliveries became due (a replay, a requeue)."""
SUBSCRIPTIONS_CHANNEL = "subscriptions"
"""Wake-up channel: a subscription was added, changed, resumed or removed."""


class EventStore(Protocol):
    """What every store provides for the event bus."""

    # -- topics and events ---------------------------------------------------------------------
    async def append(self, topic: str, events: Sequence[NewEvent], now: float) -> list[Appended]:
        """Append events durably, in one transaction, at increasing offsets of ``topic``.

        An id already in the topic is stored once: its entry reports the stored offset and
        ``created=False``. Offsets are given in commit order, so a reader that has seen offset
        N will never later find a new event below N.
        """
        ...

    async def read_events(self, topic: str, after: int, limit: int) -> list[EventRecord]:
        """Events of ``topic`` with offsets above ``after``, in offset order."""
        ...

    async def get_topic(self, topic: str) -> TopicInfo:
        """A topic's offsets and retention (an unknown topic is empty, at offset 0)."""
        ...

    async def list_topics(self) -> list[TopicInfo]:
        """Every topic with events or settings, by name."""
        ...

    async def set_retention(
        self, topic: str, max_age: float | None, max_events: int | None
    ) -> None:
        """Keep events of ``topic`` at most ``max_age`` seconds and ``max_events`` (None: any)."""
        ...

    async def trim(self, now: float) -> int:
        """Apply every topic's retention; never removes an event a live delivery still needs.

        Returns how many events were removed.
        """
        ...

    async def offset_at(self, topic: str, when: float) -> int:
        """The offset of the last event of ``topic`` published before ``when`` (0: none)."""
        ...

    # -- subscriptions -------------------------------------------------------------------------
    async def put_subscription(self, spec: SubscriptionSpec, now: float) -> Subscription:
        """Create or replace a subscription's definition; its cursor, lease and state are kept.

        A new subscription's cursor starts at the topic's end (``start="latest"``) or before
        its first event (``start="earliest"``).
        """
        ...

    async def get_subscription(self, name: str) -> Subscription:
        """One subscription, or :class:`~cronbus.errors.SubscriptionNotFoundError`."""
        ...

    async def list_subscriptions(self, topic: str | None = None) -> list[Subscription]:
        """Every subscription (of ``topic``), by name."""
        ...

    async def set_subscription_paused(
        self, name: str, paused: bool, reason: str | None, now: float
    ) -> Subscription:
        """Pause (with a reason: disabled, e.g. by a 410) or resume a subscription."""
        ...

    async def delete_subscription(self, name: str) -> None:
        """Delete a subscription and its deliveries."""
        ...

    async def replay(self, name: str, after: int, now: float) -> Subscription:
        """Move the cursor back (or on) to ``after``: events above it are matched and pushed
        again, through the same machinery, as new deliveries.

        The lease is let go, fencing the holder: the next holder starts from ``after``.
        """
        ...

    # -- pushers: leases -----------------------------------------------------------------------
    async def acquire_subscriptions(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[SubscriptionLease]:
        """Renew ``holder``'s leases and take free or expired ones, up to ``limit`` in all.

        Paused subscriptions are neither taken nor renewed. Taking one bumps its epoch and
        puts its in-flight deliveries (from a holder that died) back to ``pending``.
        Returns every lease ``holder`` now has.
        """
        ...

    async def release_subscriptions(self, holder: str, names: Sequence[str]) -> None:
        """Give up leases (a dispatcher stopping), so others take them at once."""
        ...

    # -- cursors and deliveries (fenced by the lease) ------------------------------------------
    async def advance(
        self,
        lease: SubscriptionLease,
        cursor: int,
        deliveries: Sequence[NewDelivery],
        now: float,
    ) -> bool:
        """Record ``deliveries`` (pending, due now) and move the cursor to ``cursor``, in one
        transaction; False (and nothing done) if the lease is no longer held."""
        ...

    async def take_deliveries(
        self, lease: SubscriptionLease, now: float, fresh: int, retry: int
    ) -> list[Delivery]:
        """Move up to ``fresh`` due pending and ``retry`` due retry deliveries in flight and
        return them with their events, oldest offset first.

        For an ``ordered`` subscription only the earliest live (pending, in flight or retry)
        delivery of each key can be taken: a failing event holds back its own key only.
        """
        ...

    async def finish_deliveries(
        self, lease: SubscriptionLease, results: Sequence[DeliveryResult], now: float
    ) -> list[bool]:
        """Record pushes that ended (acked, retry or dead) with their attempts; each False if
        the lease is lost or the delivery no longer in flight."""
        ...

    async def next_delivery_due(self, subscription: str) -> float | None:
        """When the earliest pending or retry delivery of ``subscription`` is due."""
        ...

    async def get_delivery(self, delivery_id: int) -> Delivery:
        """One delivery with its event, or :class:`~cronbus.errors.DeliveryNotFoundError`."""
        ...

    async def list_deliveries(self, filter: DeliveryFilter) -> list[Delivery]:
        """Deliveries matching ``filter``, newest first (without their events)."""
        ...

    async def list_delivery_attempts(self, delivery_id: int) -> list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""
        ...

    async def count_deliveries(self, subscription: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``subscription`` are in each state."""
        ...

    async def requeue_deliveries(
        self, delivery_ids: Sequence[int] | None, now: float, subscription: str | None = None
    ) -> list[int]:
        """Push dead deliveries again with a fresh attempt budget (None: every dead one, of
        ``subscription`` if given); return their ids."""
        ...
