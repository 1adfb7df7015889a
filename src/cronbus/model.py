"""Frozen records that cross the store boundary.

Stores build these from rows (``from_row``) and engines hand them back; nothing else reads rows.
Times are epoch seconds (``float``); JSON payloads travel as text between the edge and the store
so they are encoded once, at ``defer``, and decoded once, where they are used.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .states import AttemptOutcome, RunState

JSON = Any
"""A value that ``json.dumps`` accepts and ``json.loads`` gives back."""


class Lane(enum.IntEnum):
    """Which lane a queued run waits in: fresh work is claimed before retries."""

    FRESH = 0
    RETRY = 1


class WorkerState(enum.StrEnum):
    """A worker as the registry sees it."""

    ALIVE = "alive"
    DRAINING = "draining"
    STOPPED = "stopped"
    LOST = "lost"


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRun:
    """A run to create: what ``defer`` hands to the store."""

    task: str
    queue: str
    args_json: str = "[]"
    kwargs_json: str = "{}"
    priority: int = 0
    eta: float
    max_attempts: int = 1
    timeout: float | None = None
    idempotency_key: str | None = None
    # Routing hooks, honoured by the claim: a run may be pinned to one worker or need labels.
    target_worker: str | None = None
    route_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Deferred:
    """The answer to one :class:`NewRun`: its id, and whether it was new."""

    id: int
    created: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueShare:
    """One queue a worker claims from, and how much of each claim batch it may take."""

    name: str
    limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRequest:
    """What a worker asks the store for: up to ``limit`` runs, shared out over ``queues``."""

    worker_id: str
    queues: Sequence[QueueShare]
    limit: int
    lease_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedRun:
    """A run a worker now owns, with the attempt that fences its completion."""

    run_id: int
    attempt_id: int
    attempt: int
    task: str
    queue: str
    args_json: str
    kwargs_json: str
    max_attempts: int
    timeout: float | None
    eta: float

    @property
    def args(self) -> list[JSON]:
        """Positional arguments, decoded."""
        value: list[JSON] = json.loads(self.args_json)
        return value

    @property
    def kwargs(self) -> dict[str, JSON]:
        """Keyword arguments, decoded."""
        value: dict[str, JSON] = json.loads(self.kwargs_json)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorInfo:
    """What went wrong in an attempt."""

    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How an attempt ended, and what the run does next (decided by the retry policy).

    ``retry_at`` set on a failure schedules another attempt then; ``None`` makes the run dead.
    ``counts`` is false for attempts that should not use up the run's retries (a lost worker,
    a drained worker).
    """

    run_id: int
    attempt_id: int
    outcome: AttemptOutcome
    result_json: str | None = None
    error: ErrorInfo | None = None
    logs: str = ""
    retry_at: float | None = None
    counts: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One try of a run on one worker."""

    id: int
    run_id: int
    number: int
    worker_id: str
    started_at: float
    finished_at: float | None
    outcome: AttemptOutcome | None
    result: JSON = None
    error: ErrorInfo | None = None
    logs: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A request to execute a task, as the store holds it."""

    id: int
    task: str
    queue: str
    state: RunState
    priority: int
    lane: Lane
    eta: float
    attempts: int
    max_attempts: int
    timeout: float | None
    idempotency_key: str | None
    args: list[JSON]
    kwargs: dict[str, JSON]
    result: JSON
    error: ErrorInfo | None
    created_at: float
    updated_at: float
    finished_at: float | None
    lease_owner: str | None
    lease_expires: float | None
    attempt_id: int | None
    target_worker: str | None = None
    route_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """Which runs to list."""

    states: Sequence[RunState] = ()
    task: str | None = None
    queue: str | None = None
    limit: int = 50
    before_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """A registered worker process."""

    id: str
    host: str
    pid: int
    queues: Sequence[str]
    labels: Sequence[str] = ()
    concurrency: int
    version: str
    started_at: float
    heartbeat_at: float
    state: WorkerState = WorkerState.ALIVE
    running: Sequence[int] = field(default_factory=tuple)
