"""Frozen records of the event bus that cross the store boundary.

As for runs (:mod:`cronbus.model`), payloads travel as JSON text: an event's data is encoded once
when it is published and stored as it is; a webhook body embeds that text without decoding it.
Times are epoch seconds.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .masking import public_target
from .states import DeliveryState

JSON = Any
"""A value that ``json.dumps`` accepts and ``json.loads`` gives back."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    """An event to append: the CloudEvents 1.0 attributes, its data as JSON text, its key."""

    id: str
    type: str
    source: str
    subject: str | None = None
    time: float
    datacontenttype: str = "application/json"
    data_json: str = "null"
    key: str | None = None
    """Ordering key of ``ordered`` subscriptions (the subject when absent)."""
    trace: str | None = None
    """The publisher's trace context (:func:`cronbus.observability.tracing.capture`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord:
    """An event as stored in a topic, at its offset."""

    topic: str
    offset: int
    id: str
    type: str
    source: str
    subject: str | None
    time: float
    datacontenttype: str
    data_json: str
    key: str | None
    published_at: float
    trace: str | None = None
    """The publisher's trace context: the parent of each delivery's span."""

    @property
    def data(self) -> JSON:
        """The event's data, decoded."""
        return json.loads(self.data_json)

    @property
    def order_key(self) -> str | None:
        """What ``ordered`` subscriptions keep in order: the key, else the subject."""
        return self.key if self.key is not None else self.subject


@dataclass(frozen=True, slots=True, kw_only=True)
class Appended:
    """Where an appended event landed; ``created`` is False for a repeated id (stored once)."""

    id: str
    offset: int
    created: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    """A topic: its offsets, how many events it keeps, and its retention."""

    name: str
    first_offset: int | None
    last_offset: int
    """The offset of the newest event ever appended (0 before the first)."""
    events: int
    max_age: float | None = None
    max_events: int | None = None
    namespace: str = "default"
    """The namespace the topic belongs to (set by its first append)."""


class TargetKind(enum.StrEnum):
    """Where a subscription pushes."""

    WEBHOOK = "webhook"
    TASK = "task"
    HANDLER = "handler"


class Origin(enum.StrEnum):
    """Who defines a subscription: the code (synced at start) or the API and CLI."""

    CODE = "code"
    API = "api"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryPolicy:
    """How a subscription's deliveries are pushed, retried and given up."""

    max_in_flight: int = 16
    """Deliveries of this subscription pushed at once (its share of the dispatcher's pool)."""
    timeout: float = 10.0
    """Maximum execution time of one push, in seconds; a push past it is interrupted."""
    max_attempts: int = 8
    """Attempts before a delivery is dead-lettered (the retry threshold)."""
    backoff: float = 1.0
    """First retry delay in seconds; doubled each attempt, with jitter, up to ``max_backoff``."""
    max_backoff: float = 300.0
    rate_limit: float | None = None
    """Deliveries per second to the target at most; waiting for it spends no attempt."""
    ordered: bool = False
    """Keep order per event key (or subject): a failing event holds back its key only."""
    circuit_failures: int = 5
    """Consecutive failures that open the circuit; the target is then probed, not hammered."""
    circuit_probe: float = 5.0
    """Seconds between probes while the circuit is open."""
    keep_acked: float | None = None
    """Retention: seconds an acknowledged delivery is kept (None: the store's default,
    ``CRONBUS_KEEP_ACKED_SECONDS``, 7 days)."""
    keep_dead: float | None = None
    """Retention: seconds a dead delivery is kept (None: the store's default,
    ``CRONBUS_KEEP_DEAD_DELIVERIES_SECONDS``, 30 days)."""

    def to_json(self) -> dict[str, JSON]:
        """The policy as a JSON object (stored with the subscription)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> DeliveryPolicy:
        """A policy from its JSON object; unknown fields are ignored (newer writers)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class SubscriptionSpec:
    """A subscription's definition: topic, filter, target and policy (ready to store).

    Its ``repr`` shows the target masked (:func:`~cronbus.events.masking.public_target`):
    signing secrets, header values and URL credentials never reach a log or a traceback.
    """

    name: str
    topic: str
    target: dict[str, JSON]
    """``{"kind": "webhook", "url": ..., "headers": {...}, "secrets": [...]}``,
    ``{"kind": "task", "task": ..., "queue": ...}`` or ``{"kind": "handler", "handler": ...}``."""
    filter: dict[str, JSON] = field(default_factory=dict)
    policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    origin: Origin = Origin.API
    start: str = "latest"
    """Where a new subscription's cursor starts: ``latest`` (events after now) or ``earliest``."""
    namespace: str = "default"
    """The namespace it belongs to; task runs it defers inherit it."""

    @property
    def kind(self) -> TargetKind:
        """The kind of target."""
        return TargetKind(self.target["kind"])

    def __repr__(self) -> str:
        return (
            f"SubscriptionSpec(name={self.name!r}, topic={self.topic!r}, "
            f"target={public_target(self.target)!r}, filter={self.filter!r}, "
            f"policy={self.policy!r}, origin={self.origin!r}, start={self.start!r}, "
            f"namespace={self.namespace!r})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """A stored subscription with its cursor and the lease of its pusher."""

    spec: SubscriptionSpec
    id: int
    cursor: int
    """Every event at or before this offset is safe (invariant 4)."""
    paused: bool
    disabled_reason: str | None
    holder: str | None
    lease_expires_at: float | None
    created_at: float
    updated_at: float

    @property
    def name(self) -> str:
        """The subscription's name."""
        return self.spec.name

    @property
    def topic(self) -> str:
        """The topic it reads."""
        return self.spec.topic


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionLease:
    """A dispatcher's hold on a subscription's pusher; ``epoch`` fences a holder that lost it."""

    subscription: str
    holder: str
    epoch: int
    expires_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NewDelivery:
    """A matched event to push, recorded with the cursor move that passes it."""

    offset: int
    event_id: str
    key: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One event pushed to one subscription's target, with the state of its attempts."""

    id: int
    subscription: str
    topic: str
    offset: int
    event_id: str
    key: str | None
    state: DeliveryState
    attempts: int
    due_at: float
    created_at: float
    updated_at: float
    last_status: int | None = None
    last_error: str | None = None
    last_response: str | None = None
    event: EventRecord | None = None
    """The event itself, when the store read it with the delivery (dispatchers need it)."""


class DeliveryOutcome(enum.StrEnum):
    """How one attempt of a delivery ended."""

    ACKED = "acked"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LOST = "lost"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryResult:
    """The end of one push: acknowledged, or failed with when to retry (None: give up)."""

    delivery_id: int
    outcome: DeliveryOutcome
    started_at: float
    finished_at: float
    status: int | None = None
    error: str | None = None
    response: str | None = None
    retry_at: float | None = None
    """When a failed delivery is due again; None gives it up (a dead letter)."""
    spend_attempt: bool = True
    """False for a push that never reached the target's logic (rate limited, circuit open)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryAttempt:
    """One recorded push of a delivery."""

    delivery_id: int
    number: int
    outcome: DeliveryOutcome
    started_at: float
    finished_at: float
    status: int | None
    error: str | None
    response: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryFilter:
    """Which deliveries to list."""

    subscription: str | None = None
    states: Sequence[DeliveryState] = ()
    limit: int = 100
