"""Frozen records that cross the store boundary.

Stores build these from rows (``from_row``) and engines hand them back; nothing else reads rows.
Times are epoch seconds (``float``); JSON payloads travel as text between the edge and the store
so they are encoded once, at ``defer``, and decoded once, where they are used.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgumentError
from .serialization import MAX_DEPTH, TOO_DEEP, too_deep
from .states import AttemptOutcome, RunState

JSON = Any
"""A value that ``json.dumps`` accepts and ``json.loads`` gives back."""


class Lane(enum.IntEnum):
    """Which lane a queued run waits in: fresh work is claimed before retries."""

    FRESH = 0
    RETRY = 1


class Misfire(enum.StrEnum):
    """What a job does about fires missed by more than its grace period (downtime, lateness)."""

    SKIP = "skip"
    """Fire nothing for them; go on with the next fire after now."""
    ONCE = "once"
    """Fire one catch-up run now for all of them (the default)."""
    ALL = "all"
    """Fire a run for every missed fire, up to ``misfire_max``."""


class Overlap(enum.StrEnum):
    """What a job's new run does when the job's previous run is still going."""

    ALLOW = "allow"
    """Run alongside it (the default)."""
    SKIP = "skip"
    """Do not run: the new run ends ``skipped``, recorded."""
    QUEUE = "queue"
    """Wait for it to end, then run: one after the other."""
    REPLACE = "replace"
    """Cancel the running one, and run."""


class WorkerState(enum.StrEnum):
    """A worker as the registry sees it."""

    ALIVE = "alive"
    DRAINING = "draining"
    STOPPED = "stopped"
    LOST = "lost"


class FanOutKind(enum.StrEnum):
    """How a parent run spreads its work over child runs."""

    BROADCAST = "broadcast"
    """One child per live worker that knows the task (and carries the labels), pinned to it."""
    SHARDS = "shards"
    """N children, each told its shard index and the total."""
    MAP = "map"
    """Children a running task created with ``ctx.map``; optionally a reduce run after them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FanOut:
    """A fan-out to expand when the parent run is created (broadcast or shards; ``map`` is
    made by a running task, not here)."""

    kind: FanOutKind
    shards: int = 0
    """For ``shards``: how many children (1..10,000)."""
    labels: tuple[str, ...] = ()
    """For ``broadcast``: only workers that carry all these labels."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Children:
    """A fan-out parent's children, as its counters in the store say."""

    kind: FanOutKind
    total: int
    ended: int
    succeeded: int
    reduce_run_id: int | None = None
    reduce_task: str | None = None
    """The task of the reduce run: the parent shows its result, so its redaction applies."""
    note: str = ""
    """Why a parent ended without children (a broadcast when no live worker knew the task)."""


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
    # Routing (cronbus.distribution.routing): the store picks ``target_worker`` at insert for
    # strategies other than ``any`` (and reroutes when that worker dies); the claim honours
    # the target, the labels, and the task names a worker knows.
    target_worker: str | None = None
    route: str = "any"
    """A :class:`~cronbus.distribution.routing.Strategy` value (``pinned``: broadcast child)."""
    route_key: str | None = None
    """For ``hash``: the key, already taken from the arguments."""
    route_labels: tuple[str, ...] = ()
    """Only workers that carry all of these labels claim the run."""
    route_order: tuple[str, ...] = ()
    """For ``failover``: worker ids or ``label:<name>`` entries, first alive one wins."""
    # Limits (cronbus.distribution.limits), enforced by the claim across every worker.
    limit_key: str | None = None
    """At most ``limit_max`` runs with this key run at once (namespaced by the caller)."""
    limit_max: int | None = None
    rate_key: str | None = None
    """At most ``rate_max`` runs with this key start per ``rate_period`` seconds."""
    rate_max: int | None = None
    rate_period: float | None = None
    # Fan-out: a child knows its parent and place; a parent to expand carries ``fanout``.
    parent_id: int | None = None
    child_index: int | None = None
    shard_total: int | None = None
    fanout: FanOut | None = None
    # Job runs: one run per (job_id, fire_at); the overlap policy applies among runs that share
    # a concurrency key, at the moment a worker claims one.
    job_id: int | None = None
    fire_at: float | None = None
    concurrency_key: str | None = None
    overlap: Overlap = Overlap.ALLOW
    namespace: str = "default"
    """The namespace (tenant) the run belongs to: only workers of that namespace claim it."""
    trace: str | None = None
    """The caller's trace context at defer (:func:`cronbus.observability.tracing.capture`)."""


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
    most: int | None = None
    """The most this claim may take from the queue in all, the store's second pass (handing
    unused shares to queues that have more) included; None: no bound beyond ``limit`` of the
    request. The worker's slot plan sets it so a queue never takes the slots kept for others."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRequest:
    """What a worker asks the store for: up to ``limit`` runs, shared out over ``queues``."""

    worker_id: str
    queues: Sequence[QueueShare]
    limit: int
    lease_seconds: float
    namespace: str = "default"
    """Only runs of this namespace are claimed (a worker serves its app's namespace)."""
    tasks: Sequence[str] | None = None
    """Only runs of these tasks are claimed (the tasks the worker's code knows); None: any."""
    labels: Sequence[str] = ()
    """The worker's labels: runs that need labels it lacks are left to others."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedRun:
    """A run a worker now owns, with the attempt that fences its completion.

    ``number`` is the attempt's number (1, 2, ... in start order, lost attempts included, as
    ``runs show`` numbers them); ``attempt`` counts tries against ``max_attempts`` (attempts
    that used the retry budget, this one included). ``fence`` is a random 64-bit token drawn
    for this claim: a completion or heartbeat must bring it back, and since it never repeats
    (unlike a sequence value after a server crash) a late worker cannot pass for a new one.
    """

    run_id: int
    attempt_id: int
    attempt: int
    number: int
    fence: int
    task: str
    queue: str
    args_json: str
    kwargs_json: str
    max_attempts: int
    timeout: float | None
    eta: float
    parent_id: int | None = None
    child_index: int | None = None
    """A child's place: its shard index, map item index, or broadcast ordinal."""
    shard_total: int | None = None
    trace: str | None = None
    """The trace context stored at defer: the parent of the attempt's span."""

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
    a drained worker). ``fence`` is the claim's token (:attr:`ClaimedRun.fence`): the store
    records the outcome only while the run still holds that attempt under that token. ``None``
    fences by the attempt id alone (trusted callers: tools and tests that hold the attempt).
    """

    run_id: int
    attempt_id: int
    outcome: AttemptOutcome
    result_json: str | None = None
    error: ErrorInfo | None = None
    logs: str = ""
    retry_at: float | None = None
    counts: bool = True
    fence: int | None = None


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
    job_id: int | None = None
    fire_at: float | None = None
    namespace: str = "default"
    route: str = "any"
    route_labels: Sequence[str] = ()
    limit_key: str | None = None
    rate_key: str | None = None
    parent_id: int | None = None
    child_index: int | None = None
    shard_total: int | None = None
    children: Children | None = None
    """Set on a fan-out parent: its children's counters."""
    tries: int = 0
    """Attempts that spent the retry budget (``max_attempts``) since it was last renewed by a
    retry by hand, the running one included (:mod:`cronbus.run_figures`)."""
    lost: int = 0
    """Lost attempts since the budget was last renewed (they spend no try)."""
    started_at: float | None = None
    """When its first attempt started (None: none has)."""
    worker_id: str | None = None
    """The worker of its last attempt (None: none has started)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """Which runs to list: newest first, ``before_id`` the keyset (ids below it only)."""

    states: Sequence[RunState] = ()
    task: str | None = None
    job_id: int | None = None
    queue: str | None = None
    limit: int = 50
    before_id: int | None = None
    namespace: str | None = None
    """Runs of this namespace only; ``None`` lists every namespace."""
    created_after: float | None = None
    """Runs created at or after this time only."""
    created_before: float | None = None
    """Runs created before this time only."""
    args: Sequence[tuple[str, JSON]] = ()
    """Payload matches, all of which a run must meet: ``("user", 42)`` is ``kwargs["user"] ==
    42``, and a key of digits only names a positional argument (``("0", "a")``: ``args[0] ==
    "a"``). Equality is JSON's: ``42`` matches ``42`` and ``42.0`` but not ``"42"``, ``true``
    not ``1``, ``null`` only a value given as null (not a missing one), objects by their keys
    and values whatever their order, arrays element by element."""

    def __post_init__(self) -> None:
        for match in self.args:
            check_match(match)


_INT64 = 2**63
"""Integers a match may name: both stores compare payload numbers within 64 bits."""
_MOST_ARGS = 2**31
"""Positional indexes a match may name (PostgreSQL's JSON arrays are indexed by int4)."""


def check_match(match: tuple[str, JSON]) -> None:
    """Refuse a payload match (:attr:`RunFilter.args`) that no stored payload could equal:
    a key that is not a non-empty string, or a value that is not plain JSON (non-finite
    numbers, integers beyond 64 bits, the NUL character, keys that are not strings, nesting
    deeper than :data:`~cronbus.serialization.MAX_DEPTH`)."""
    key, value = match
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidArgumentError(
            f"args: a match's key must be a non-empty string without NUL, not {key!r}"
        )
    if key.isascii() and key.isdigit() and int(key) >= _MOST_ARGS:
        raise InvalidArgumentError(f"args.{key}: a positional index must be below {_MOST_ARGS}")
    check_match_depth(key, value)
    _check_json(key, value)


def check_match_depth(key: str, value: JSON, field: str | None = None) -> None:
    """Refuse a match value nested deeper than a stored argument may be (:data:`MAX_DEPTH`):
    it could equal no payload, and both the walks here and the stores' JSON readers recurse."""
    if too_deep(value):
        raise InvalidArgumentError(
            f"{field or 'args'}.{key}: the value {TOO_DEEP}; an argument nests at most "
            f"{MAX_DEPTH} levels, so match a shallower value",
            field=field,
        )


def _check_json(key: str, value: JSON) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise InvalidArgumentError(f"args.{key}: {value} is beyond 64-bit integers")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"args.{key}: {value} is not a JSON number")
    elif isinstance(value, str):
        if "\x00" in value:
            raise InvalidArgumentError(f"args.{key}: a value cannot hold the NUL character")
    elif isinstance(value, list | tuple):
        for item in value:
            _check_json(key, item)
    elif isinstance(value, dict):
        for name, item in value.items():
            if not isinstance(name, str) or "\x00" in name:
                raise InvalidArgumentError(f"args.{key}: object keys must be strings, not {name!r}")
            _check_json(key, item)
    else:
        raise InvalidArgumentError(f"args.{key}: {type(value).__name__} is not a JSON value")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDepth:
    """How many runs of one queue are in one live state (the console's queue depths)."""

    queue: str
    state: RunState
    """One of scheduled, queued, running, cancelling, waiting."""
    count: int
    """Always above 0: a queue with no run in a state has no depth for it."""
    oldest: float | None
    """The earliest ``eta`` of those runs: for queued runs, since when the oldest is due."""


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
    namespace: str = "default"
    """The namespace whose runs the worker claims."""
    tasks: Sequence[str] = ()
    """Names of the tasks the worker's code registers (what it can run)."""
    drain_requested: bool = False
    """An operator asked it to drain (``request_drain``): it does on its next heartbeat."""
    lease_seconds: float = 30.0
    """Its lease: silent for longer, it is lost; routing picks only workers alive within it."""


_NOT_HASHED = frozenset({"paused", "namespace"})
_HASHED_WHEN_SET = {"broadcast": False, "shards": None}
"""Fields added later, hashed only when not at their default, so older digests still hold."""
"""JobSpec fields left out of its digest."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A job's definition: what to run, when, and its policies (all resolved, ready to store)."""

    name: str
    task: str
    trigger: dict[str, JSON]
    args_json: str = "[]"
    kwargs_json: str = "{}"
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 1
    timeout: float | None = None
    misfire: Misfire = Misfire.ONCE
    misfire_grace: float = 1.0
    misfire_max: int = 100
    overlap: Overlap = Overlap.ALLOW
    children: tuple[str, ...] = ()
    calendars: tuple[str, ...] = ()
    max_fires: int | None = None
    source: str = "api"
    paused: bool = False
    namespace: str = "default"
    """The namespace the job and its runs belong to (not part of :meth:`spec_hash`)."""
    broadcast: bool = False
    """Each fire is a parent run with one child per live worker that knows the task."""
    shards: int | None = None
    """Each fire is a parent run with this many shard children."""

    @property
    def after_seconds(self) -> float | None:
        """For ``after`` triggers, the delay after a run ends."""
        if self.trigger.get("kind") == "after":
            return float(self.trigger["seconds"])
        return None

    def spec_hash(self) -> str:
        """A digest of the definition, to tell whether a code-defined job changed."""
        # Pausing and moving between namespaces are not changes of the definition itself.
        body = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in _NOT_HASHED}
        for name, default in _HASHED_WHEN_SET.items():
            if body[name] == default:
                del body[name]
        text = json.dumps(body, sort_keys=True, default=str)
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job as the store holds it: its definition and where its schedule stands."""

    id: int
    spec: JobSpec
    enabled: bool
    next_fire_at: float | None
    fires: int
    last_fire_at: float | None
    created_at: float
    updated_at: float
    digest: str = ""
    """The stored ``spec.spec_hash()``, so readers need not hash the spec again."""

    @property
    def name(self) -> str:
        """The job's unique name."""
        return self.spec.name

    @property
    def spec_digest(self) -> str:
        """The spec's digest: the stored one when the store gave it."""
        return self.digest or self.spec.spec_hash()

    @property
    def active(self) -> bool:
        """True when it will fire: enabled, not paused, a next fire planned."""
        return self.enabled and not self.spec.paused and self.next_fire_at is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fire:
    """A scheduler's plan for one due job: the runs to create, and the job's next fire.

    The store applies it only if the job's next fire is still ``expected`` (compare-and-set),
    so two schedulers that planned the same fire create its runs once.
    """

    job_id: int
    expected: float
    next_fire_at: float | None
    runs: Sequence[NewRun]
    missed: int = 0
    """Fires that came later than the job's grace period (handled by its misfire policy)."""
