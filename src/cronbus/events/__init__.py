"""The pure foundations of the event bus: events, subscription filters and webhook signatures.

Nothing here does I/O: the bus, the dispatcher and the targets build on these.
"""

from __future__ import annotations

from .event import Event, make_event, new_event_id, validate_topic
from .filters import Filter
from .signing import generate_secret, sign, webhook_headers

__all__ = [
    "Event",
    "Filter",
    "generate_secret",
    "make_event",
    "new_event_id",
    "sign",
    "validate_topic",
    "webhook_headers",
]
