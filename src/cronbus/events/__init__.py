"""The pure foundations of the event bus: events and subscription filters.

Nothing here does I/O: the bus, the dispatcher and the targets build on these.
"""

from __future__ import annotations

from .event import Event, make_event, new_event_id, validate_topic
from .filters import Filter

__all__ = [
    "Event",
    "Filter",
    "make_event",
    "new_event_id",
    "validate_topic",
]
