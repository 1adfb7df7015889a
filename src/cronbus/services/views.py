"""Records the services return beside the store's own: a run with its attempts and hints, a
query of runs, a defer's answer. Frozen dataclasses, so the HTTP API derives its schemas from
them and the CLI renders them, from one definition."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events.records import Delivery, DeliveryAttempt, Subscription
from ..model import Attempt, Run, WorkerInfo
from ..states import RunState


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQuery:
    """Which runs to list (every filter optional; runs come newest first)."""

    states: Sequence[RunState] = ()
    """Runs in one of these states."""
    task: str | None = None
    """Runs of this task."""
    queue: str | None = None
    """Runs in this queue."""
    job: str | None = None
    """Runs fired by the job of this name."""
    created_after: float | None = None
    """Runs created at or after this time (epoch seconds)."""
    created_before: float | None = None
    """Runs created before this time (epoch seconds)."""
    args: Sequence[tuple[str, Any]] = ()
    """Payload matches, all of which a run must meet: ``("user", 42)`` is a keyword argument
    ``user`` equal to 42; a key of digits names a positional argument (``("0", "a")``).
    Equality is JSON's (``42`` is not ``"42"``). Refused for a caller who may not read
    payloads and for an argument the task searched redacts; searching every task, the runs
    whose task hides a matched argument are left out (:mod:`.redaction`)."""
    id: int | None = None
    """The run with this id only (when it meets the other filters too)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDetail:
    """One run with its attempts (oldest first, with their errors and logs), its first
    children when it is a fan-out parent (by index, at most 20: page through them all with
    ``children``), and why it waits (``waiting``: no live worker serves its queue, it is
    pinned to a worker, at its concurrency limit, waiting for its children...)."""

    run: Run
    attempts: list[Attempt] = field(default_factory=list)
    children: list[Run] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferResult:
    """A deferred run, and whether it is new (False: its idempotency key matched a run that
    already existed, which is returned)."""

    run: Run
    created: bool


class DeadLetterKind(enum.StrEnum):
    """What a dead letter is: a run or a delivery that used up its attempts."""

    RUN = "run"
    DELIVERY = "delivery"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A dead run or a dead delivery, kept with its last error until requeued or purged."""

    kind: DeadLetterKind
    id: int
    died_at: float
    """When it was given up (epoch seconds)."""
    run: Run | None = None
    delivery: Delivery | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterResult:
    """What a requeue or a purge of dead letters did: the run and delivery ids it handled,
    and each id it refused with why (``run 7 is queued, not dead``, ``no run has id 9``)."""

    runs: list[int] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many dead letters were handled."""
        return len(self.runs) + len(self.deliveries)


RequeueResult = DeadLetterResult
"""What :meth:`~cronbus.services.dead_letters.DeadLettersService.requeue` did."""
PurgeResult = DeadLetterResult
"""What :meth:`~cronbus.services.dead_letters.DeadLettersService.purge` did."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerView:
    """A worker as read at ``seen_at``, with the runs it still holds (running or cancelling,
    under its lease) and how long ago it last sent a heartbeat."""

    worker: WorkerInfo
    runs: list[Run] = field(default_factory=list)
    seen_at: float
    heartbeat_age: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskInfo:
    """A task that runs can be deferred for: registered in the app's code, known to live
    workers of the namespace, or both, with its defaults when the app registers it."""

    name: str
    registered: bool
    """True when this process's app registers it (``defer`` checks arguments against it)."""
    workers: int
    """Live workers of the namespace whose code registers it."""
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    isolation: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EventInput:
    """One event to publish, as a caller gives it (CloudEvents attributes and data); what is
    not given is filled in: a new time-ordered id, ``time`` now, ``source`` ``cronbus``."""

    type: str
    data: Any = None
    source: str | None = None
    subject: str | None = None
    id: str | None = None
    key: str | None = None
    """The ordering key of ``ordered`` subscriptions (the subject when absent)."""
    time: float | None = None
    """When it happened (epoch seconds); default now."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionInput:
    """A subscription as a caller defines it: a name, a topic, one target (``webhook`` URL or
    ``task`` name), filters, where its cursor starts, and delivery options (None: default)."""

    name: str
    topic: str
    webhook: str | None = None
    secrets: Sequence[str] = ()
    """Standard Webhooks signing secrets (``whsec_...``); several while rotating."""
    headers: Mapping[str, str] = field(default_factory=dict)
    task: str | None = None
    queue: str | None = None
    """The queue of a task target's runs (default: the task's)."""
    types: Sequence[str] | None = None
    """Event type patterns, like ``order.*``."""
    source: Sequence[str] | None = None
    subject: Sequence[str] | None = None
    data: Mapping[str, Any] | None = None
    filter: Mapping[str, Any] | None = None
    """A full filter spec (docs/events.md); the keyword filters replace its keys."""
    start: str = "latest"
    """``latest`` (events from now on) or ``earliest`` (the whole topic)."""
    timeout: float | None = None
    max_in_flight: int | None = None
    max_attempts: int | None = None
    backoff: float | None = None
    max_backoff: float | None = None
    rate_limit: float | None = None
    ordered: bool | None = None
    circuit_failures: int | None = None
    circuit_probe: float | None = None
    keep_acked: float | str | None = None
    """Retention of acked deliveries: seconds or like ``"7d"`` (default: the store's)."""
    keep_dead: float | str | None = None
    """Retention of dead deliveries: seconds or like ``"30d"`` (default: the store's)."""
    replace_existing: bool = False
    """Redefine a subscription of that name (its cursor is kept) instead of refusing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionView:
    """A subscription as shown: its target masked (webhook URL credentials, header values
    and signing secrets never leave the service), with its topic's end, its lag, the
    dispatcher pushing it while the lease lasts, and (from ``get``) deliveries by state."""

    subscription: Subscription
    state: str
    """``active``, ``paused`` or ``disabled`` (paused by cronbus, with a reason)."""
    topic_end: int
    lag: int
    """Offsets of the topic past the cursor."""
    holder: str | None = None
    deliveries: dict[str, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """What a replay did: the subscription after it, where the cursor was, whether the
    store stopped it at the topic's end short of what was asked, and one line saying so."""

    subscription: SubscriptionView
    previous_cursor: int
    clamped: bool
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryDetail:
    """A delivery with its attempts, oldest first."""

    delivery: Delivery
    attempts: list[DeliveryAttempt] = field(default_factory=list)
