"""Names kept for importers of the event half of the contract; the protocols live in
:mod:`.ports`."""

from __future__ import annotations

from .ports import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL, EventStore

__all__ = ["EVENTS_CHANNEL", "SUBSCRIPTIONS_CHANNEL", "EventStore"]
