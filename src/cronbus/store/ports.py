"""The store's roles, as protocols: the one shared state of cronbus, seen by each of its users.

Every role talks to the store only through these protocols; :class:`Store` composes them all
and each backend (:mod:`.sqlite`, :mod:`.postgres`) implements it, which mypy checks (each
backend's package asserts it at import), and ``tests/contract`` runs one suite against each.
Callers pass ``now`` so tests can move time; the one exception is lease expiry on PostgreSQL,
which the server's clock times so that machines with skewed clocks agree (see
:mod:`.fencing`). Every method that changes a run derives its allowed ``from`` states from
:mod:`cronbus.states`; the decisions both backends share are in :mod:`.logic`.

A subscription's pusher is held by one dispatcher at a time through a lease; every change a
holder makes (moving the cursor, taking and finishing deliveries) is fenced by the lease's
``epoch``, so a dispatcher that lost its lease (paused, cut off) cannot change anything.
The cursor only moves together with the recording of the deliveries it passes (invariant 4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
from ..model import (
    Attempt,
    ClaimedRun,
    ClaimRequest,
    Deferred,
    Fire,
    Job,
    JobSpec,
    NewRun,
    Outcome,
    QueueDepth,
    Run,
    RunFilter,
    WorkerInfo,
    WorkerState,
)
from ..states import RunState
from .admin_ports import Admin
from .alert_ports import AlertStore
from .connector_ports import ConnectorStore
from .lease_ports import RoleLeases, Snapshots
from .retention_ports import RetentionStore

RUNS_CHANNEL = "runs"
"""Wake-up channel: new or requeued runs may be claimable."""
CONTROL_CHANNEL = "control"
"""Wake-up channel: a running run was asked to cancel."""
JOBS_CHANNEL = "jobs"
"""Wake-up channel: a job was added, changed, or is waiting for its next fire to be planned."""
EVENTS_CHANNEL = "events"
"""Wake-up channel: events were appended, or deliveries became due (a replay, a requeue)."""
SUBSCRIPTIONS_CHANNEL = "subscriptions"
"""Wake-up channel: a subscription was added, changed, resumed or removed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldAttempt:
    """An attempt a worker still holds after a heartbeat (with its claim's fence, which tells
    it apart from an attempt that got the same id after a crash), and whether it must stop."""

    run_id: int
    attempt_id: int
    cancelling: bool
    fence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Beat:
    """What a worker's heartbeat (:meth:`RunLeases.beat`) learns: the attempts it still holds,
    and whether an operator asked it to drain (:meth:`Workers.request_drain`)."""

    held: list[HeldAttempt]
    drain_requested: bool


class Listener(Protocol):
    """Wake-ups for one consumer; polling stays the safety net, never the source of latency."""

    async def wait(self, timeout: float) -> bool:
        """Wait until a wake-up arrives or ``timeout`` seconds pass; True if woken."""

    async def close(self) -> None:
        """Stop listening."""


async def wait_any(
    listeners: Sequence[Listener], stopping: asyncio.Event, timeout: float
) -> set[Listener]:
    """Wait for a wake-up on any of ``listeners`` or for ``stopping``; return those woken."""
    waits = {asyncio.ensure_future(lis.wait(max(0.0, timeout))): lis for lis in listeners}
    stop = asyncio.ensure_future(stopping.wait())
    done, pending = await asyncio.wait({*waits, stop}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return {waits[t] for t in done if t in waits and t.result()}


class Lifecycle(Protocol):
    """Opening and closing a store."""

    url: str

    async def open(self, *, create: bool = True) -> None:
        """Connect and apply pending migrations; with ``create`` false (commands that only
        read), open only a store that exists and is up to date, creating and migrating nothing
        (:class:`~cronbus.store.presence.StoreNotFoundError` when there is none)."""

    async def check(self) -> None:
        """Raise :class:`~cronbus.store.presence.StoreFaultError` if the store is no longer
        the one opened, or unreadable (an SQLite file deleted, replaced or overwritten);
        roles call it every few seconds and stop on it."""

    async def close(self) -> None:
        """Release connections and wake-up sockets."""

    async def schema_version(self) -> int:
        """The newest migration applied."""


class Runs(Protocol):
    """Runs: created, cancelled, requeued and read."""

    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs durably, in one transaction; a known idempotency key returns its run."""

    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a run: at once if it waits, via ``cancelling`` if it runs."""

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead or cancelled runs again with a fresh retry budget (None: all dead runs)."""

    async def get_run(self, run_id: int) -> Run:
        """One run, or :class:`~cronbus.errors.RunNotFoundError`."""

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id, in no particular order; unknown ids are left out."""

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Runs matching ``filter``, newest first (keyset: ``filter.before_id``).

        With a namespace, each page is one range of an index whether it is the first or a deep
        one (by state, task, queue or job); without one, a range per namespace, merged. The
        ``created_after``/``created_before`` bounds and the payload matches (``filter.args``,
        JSON equality) filter within that range.
        """

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""

    async def count_runs(self, namespace: str | None = None) -> dict[RunState, int]:
        """How many runs (of ``namespace``; None: of all) are in each state."""

    async def runs_per_minute(
        self, namespace: str | None, since: float, until: float
    ) -> list[tuple[float, str, int]]:
        """Runs (of ``namespace``; None: of all) that ended in ``[since, until)``, counted per
        minute and terminal state: ``(minute start, state, count)``, oldest minute first."""

    async def delete_runs(self, run_ids: Sequence[int], now: float) -> list[int]:
        """Delete runs that ended (terminal states only), with their payloads and attempts;
        return the ids deleted (others are left as they are)."""

    async def next_eta(
        self, queues: Sequence[str] | None, namespace: str = "default"
    ) -> float | None:
        """When the earliest scheduled run of ``namespace`` in these queues (None: in any
        queue) becomes due."""

    async def list_children(
        self, parent_id: int, after_index: int | None = None, limit: int = 100
    ) -> list[Run]:
        """A parent's children by ``child_index`` (the reduce run, which has none, last), after
        ``after_index`` (keyset)."""

    async def ready_queues(self, now: float, namespace: str = "default") -> list[str]:
        """The queues, by name, holding runs of ``namespace`` a claim could take at ``now``:
        queued runs, and scheduled runs already due (a claim promotes them). A worker serving
        every queue shares its claims among these; the cost grows with the number of queues,
        not of runs."""


class Overview(Protocol):
    """What the web console's overview and job pages read: queue depths, the scheduler's lag
    and each job's latest runs, each one bounded statement over an index."""

    async def queue_depths(self, namespace: str) -> list[QueueDepth]:
        """How many runs of ``namespace`` each queue holds in each live state (scheduled,
        queued, running, cancelling, waiting), with the earliest ``eta`` among them; only
        (queue, state) pairs that hold runs, by queue then in the order of a run's life."""

    async def fire_lags(self, namespace: str, since: float, limit: int = 1000) -> list[float]:
        """How late the scheduler created each job run of ``namespace`` (``created_at -
        fire_at``, seconds) among the runs fired by jobs and created at or after ``since``:
        newest first, at most ``limit``."""

    async def recent_job_runs(
        self, namespace: str, job_ids: Sequence[int], per_job: int
    ) -> dict[int, list[tuple[int, RunState]]]:
        """Each job's newest ``per_job`` runs in ``namespace`` as ``(run id, state)``, newest
        first, in one statement; every job asked for is a key (no runs: an empty list)."""


class RunLeases(Protocol):
    """Leases on runs: taken by a claim, ended by a completion, renewed, reaped when expired.

    The rules (:mod:`cronbus.store.fencing`): a claim draws a random fence that completions
    must bring back; on PostgreSQL lease expiry is the server's clock, not the caller's ``now``
    (SQLite, one machine, uses ``now``); a completion repeated after an ambiguous commit, whose
    attempt already ended with that outcome under that fence, is reported as recorded.
    """

    async def claim(self, request: ClaimRequest, now: float) -> list[ClaimedRun]:
        """Atomically move due runs of ``request.namespace`` to ``running`` under a lease,
        fairly over the queues."""

    async def complete(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Record ended attempts; each is fenced by its attempt id and the claim's fence (False:
        no longer held, and not already recorded with this outcome)."""

    async def complete_and_claim(
        self, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        """:meth:`complete` then :meth:`claim`, in one transaction (a busy worker's loop)."""

    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew the worker's leases and registry entry; return the attempts it still holds
        (:meth:`beat` also says whether the worker was asked to drain)."""

    async def beat(self, worker_id: str, now: float, lease_seconds: float) -> Beat:
        """:meth:`heartbeat`, also reading the worker's ``drain_requested`` in the same
        transaction: a worker engine that sees it true drains as on SIGTERM (finishes what it
        holds, claims nothing more, then stops)."""

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Turn expired leases into lost attempts and requeue their runs; return run ids."""

    async def age_retries(self, now: float, after: float) -> int:
        """Move retries queued for longer than ``after`` seconds into the fresh lane."""

    async def spawn(
        self,
        parent: ClaimedRun,
        children: Sequence[NewRun],
        reduce: NewRun | None,
        now: float,
    ) -> int:
        """Create child runs of a running parent (``ctx.map``), in one transaction, fenced by
        the parent's attempt and fence (:class:`~cronbus.errors.LeaseLostError` when it no
        longer holds them). A child whose ``child_index`` exists already is not created again
        (a retried body maps the same items); ``reduce`` (args ignored) is kept on the parent
        and created once every child succeeded, with the children's results, in index order,
        as its one argument. Returns how many children were new."""

    async def reroute(self, now: float) -> int:
        """Route again the waiting runs pinned to a worker that is no longer alive (silent for
        longer than its lease, draining or stopped): by their strategy among the live workers,
        or to any worker when none fits; a broadcast child (``pinned``) ends dead instead, so
        its parent can finish. Returns how many runs changed."""

    async def settle_broadcasts(self, now: float, wait: float) -> int:
        """Look at the broadcast parents that found no live worker serving their task and
        queue when they were created (they wait, with no children): make their children now
        if such workers are live, or end them dead (a ``NoLiveWorker`` attempt, and the same
        note among their children's counts) once ``wait`` seconds have passed since their
        creation. Never a parent succeeded with no children. Returns how many changed."""


class Jobs(Protocol):
    """Jobs (recurring runs) and the calendars they skip."""

    async def put_job(
        self, spec: JobSpec, next_fire_at: float | None, now: float, *, create: bool = False
    ) -> Job:
        """Create or replace the job named ``spec.name`` (its fire count and id are kept).

        With ``create`` the name must be new: an existing job is left as it is and
        :class:`~cronbus.errors.JobExistsError` raised, in the same statement (no race). Names
        are unique per store: replacing a job of another namespace raises
        :class:`~cronbus.errors.ConflictError` (so does :meth:`put_jobs`, changing nothing).
        """

    async def put_jobs(self, jobs: Sequence[tuple[JobSpec, float | None]], now: float) -> None:
        """Create or replace several jobs (spec, next fire) in one transaction (a sync)."""

    async def get_job(self, name: str) -> Job:
        """One job, or :class:`~cronbus.errors.JobNotFoundError`."""

    async def list_jobs(self, namespace: str | None = None) -> list[Job]:
        """Every job (of ``namespace``; None: of all), by name."""

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing, keeping them; return those changed."""

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs whose next fire is at or before ``until``, earliest first."""

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction; each only if its job's next fire is as expected."""

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar (ISO dates on which jobs using it don't fire)."""

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""


class Workers(Protocol):
    """The registry of workers."""

    async def register_worker(self, worker: WorkerInfo) -> None:
        """Add or replace a worker in the registry (with its namespace, tasks and
        ``drain_requested``: a worker registering again starts undrained)."""

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""

    async def list_workers(self, now: float, namespace: str | None = None) -> list[WorkerInfo]:
        """Registered workers (of ``namespace``; None: of all); those silent for longer than
        their own registered lease are reported lost (:mod:`cronbus.liveness`: the reader's
        lease plays no part)."""

    async def request_drain(self, worker_id: str, now: float) -> WorkerInfo:
        """Ask a worker to drain: it sees ``drain_requested`` on its next heartbeat
        (:meth:`RunLeases.beat`) and drains as on SIGTERM. Returns the worker's entry;
        :class:`~cronbus.errors.WorkerNotFoundError` if it is not registered."""

    async def unknown_tasks(self, now: float, namespace: str = "default") -> list[str]:
        """Tasks of queued runs of ``namespace`` that no live worker knows (such runs wait for
        a worker that does: a rolling deploy never dead-letters them)."""

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the registry rows of workers silent since before ``silent_since`` and
        holding no run; return their ids."""


class WakeUps(Protocol):
    """Wake-ups between processes; polling stays the safety net."""

    async def listen(self, channels: Sequence[str]) -> Listener:
        """Start receiving wake-ups for ``channels``."""

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake the listeners of ``channels`` in every process."""


class Events(Protocol):
    """Topics and their events."""

    async def append(
        self, topic: str, events: Sequence[NewEvent], now: float, namespace: str = "default"
    ) -> list[Appended]:
        """Append events durably, in one transaction, at increasing offsets of ``topic``.

        The first append creates the topic in ``namespace``; appending to a topic of another
        namespace raises :class:`~cronbus.errors.ConflictError` and appends nothing.

        An id already in the topic is stored once: its entry reports the stored offset and
        ``created=False``. Offsets are given in commit order, so a reader that has seen offset
        N will never later find a new event below N.
        """

    async def read_events(self, topic: str, after: int, limit: int) -> list[EventRecord]:
        """Events of ``topic`` with offsets above ``after``, in offset order."""

    async def get_topic(self, topic: str) -> TopicInfo:
        """A topic's offsets and retention (an unknown topic is empty, at offset 0)."""

    async def list_topics(self, namespace: str | None = None) -> list[TopicInfo]:
        """Every topic (of ``namespace``; None: of all) with events or settings, by name."""

    async def set_retention(
        self,
        topic: str,
        max_age: float | None,
        max_events: int | None,
        namespace: str = "default",
    ) -> None:
        """Keep events of ``topic`` at most ``max_age`` seconds and ``max_events`` (None: any);
        a topic without a row yet is created in ``namespace`` (an existing one keeps its own)."""

    async def trim(self, now: float) -> int:
        """Apply every topic's retention; never removes an event a live delivery still needs,
        nor one above the cursor of a subscription of the topic (paused ones included).

        Returns how many events were removed.
        """

    async def offset_at(self, topic: str, when: float) -> int:
        """The offset of the last event of ``topic`` published before ``when`` (0: none)."""


class Subscriptions(Protocol):
    """Subscriptions: definitions, cursors and deliveries (fenced by the pusher's lease)."""

    async def put_subscription(
        self, spec: SubscriptionSpec, now: float, *, create: bool = False
    ) -> Subscription:
        """Create or replace a subscription's definition; its cursor, lease and state are kept.

        A new subscription's cursor starts at the topic's end (``start="latest"``) or before
        its first event (``start="earliest"``). With ``create``, only create it, decided by
        the insert (no race between two adds): an existing subscription with the same
        definition is returned unchanged, one with another definition raises
        :class:`~cronbus.errors.SubscriptionExistsError`. Names are unique per store: replacing
        a subscription of another namespace raises :class:`~cronbus.errors.ConflictError`, and
        so does reading a topic that exists in another namespace.
        """

    async def get_subscription(self, name: str) -> Subscription:
        """One subscription, or :class:`~cronbus.errors.SubscriptionNotFoundError`."""

    async def list_subscriptions(
        self, topic: str | None = None, namespace: str | None = None
    ) -> list[Subscription]:
        """Every subscription (of ``topic``, of ``namespace``), by name."""

    async def set_subscription_paused(
        self, name: str, paused: bool, reason: str | None, now: float
    ) -> Subscription:
        """Pause (with a reason: disabled, e.g. by a 410) or resume a subscription."""

    async def delete_subscription(self, name: str) -> None:
        """Delete a subscription and its deliveries."""

    async def replay(self, name: str, after: int, now: float) -> Subscription:
        """Move the cursor back (or on) to ``after``: events above it are matched and pushed
        again, through the same machinery, as new deliveries.

        A cursor never passes the topic's end: ``after`` beyond the topic's last offset moves
        it to that offset, read in the same statement, so the events published next are
        matched. The returned subscription shows where the cursor went. The lease is let go,
        fencing the holder: the next holder starts from the new cursor.
        """

    async def advance(
        self,
        lease: SubscriptionLease,
        cursor: int,
        deliveries: Sequence[NewDelivery],
        now: float,
    ) -> bool:
        """Record ``deliveries`` (pending, due now) and move the cursor to ``cursor``, in one
        transaction; False (and nothing done) if the lease is no longer held."""

    async def take_deliveries(
        self, lease: SubscriptionLease, now: float, fresh: int, retry: int
    ) -> list[Delivery]:
        """Move up to ``fresh`` due pending and ``retry`` due retry deliveries in flight and
        return them with their events, oldest offset first.

        For an ``ordered`` subscription only the earliest live (pending, in flight or retry)
        delivery of each key can be taken: a failing event holds back its own key only.
        """

    async def finish_deliveries(
        self, lease: SubscriptionLease, results: Sequence[DeliveryResult], now: float
    ) -> list[bool]:
        """Record pushes that ended (acked, retry or dead) with their attempts; each False if
        the lease is lost or the delivery no longer in flight."""

    async def next_delivery_due(self, subscription: str) -> float | None:
        """When the earliest pending or retry delivery of ``subscription`` is due."""

    async def get_delivery(self, delivery_id: int) -> Delivery:
        """One delivery with its event, or :class:`~cronbus.errors.DeliveryNotFoundError`."""

    async def list_deliveries(self, filter: DeliveryFilter) -> list[Delivery]:
        """Deliveries matching ``filter``, newest first (without their events)."""

    async def list_delivery_attempts(self, delivery_id: int) -> list[DeliveryAttempt]:
        """A delivery's attempts, oldest first."""

    async def count_deliveries(self, subscription: str) -> dict[DeliveryState, int]:
        """How many deliveries of ``subscription`` are in each state."""

    async def requeue_deliveries(
        self, delivery_ids: Sequence[int] | None, now: float, subscription: str | None = None
    ) -> list[int]:
        """Push dead deliveries again with a fresh attempt budget (None: every dead one, of
        ``subscription`` if given); return their ids."""

    async def delete_deliveries(self, delivery_ids: Sequence[int]) -> list[int]:
        """Delete dead deliveries (a dead-letter purge) with their attempts; return the ids
        deleted (deliveries in other states are left as they are)."""


class SubscriptionLeases(Protocol):
    """Leases on subscriptions' pushers, held by one dispatcher at a time."""

    async def acquire_subscriptions(
        self, holder: str, now: float, lease_seconds: float, limit: int
    ) -> list[SubscriptionLease]:
        """Renew ``holder``'s leases and take free or expired ones, up to ``limit`` in all.

        Paused subscriptions are neither taken nor renewed. Taking one bumps its epoch and
        puts its in-flight deliveries (from a holder that died) back to ``pending``.
        Returns every lease ``holder`` now has.
        """

    async def release_subscriptions(self, holder: str, names: Sequence[str]) -> None:
        """Give up leases (a dispatcher stopping), so others take them at once."""


class EventStore(Events, Subscriptions, SubscriptionLeases, Protocol):
    """What every store provides for the event bus."""


class Store(
    Lifecycle,
    Runs,
    Overview,
    RunLeases,
    Jobs,
    Workers,
    WakeUps,
    EventStore,
    Admin,
    ConnectorStore,
    RoleLeases,
    Snapshots,
    AlertStore,
    RetentionStore,
    Protocol,
):
    """What every store backend provides: every role (the admin ones in :mod:`.admin_ports`)."""


# -- what both backends share --------------------------------------------------------------
LIVE_STATES: tuple[RunState, ...] = (
    RunState.SCHEDULED,
    RunState.QUEUED,
    RunState.RUNNING,
    RunState.CANCELLING,
    RunState.WAITING,
)
"""The states :meth:`Overview.queue_depths` counts, in the order of a run's life (``failed`` is
never stored: a failed attempt moves its run on in the same transaction)."""


def queue_depths_from_rows(rows: Sequence[tuple[Any, ...]]) -> list[QueueDepth]:
    """Queue depths from ``(queue, state, count, oldest eta)`` rows, by queue then state."""
    order = {state: n for n, state in enumerate(LIVE_STATES)}
    depths = [
        QueueDepth(
            queue=queue,
            state=RunState(state),
            count=int(count),
            oldest=None if oldest is None else float(oldest),
        )
        for queue, state, count, oldest in rows
        if count
    ]
    return sorted(depths, key=lambda depth: (depth.queue, order[depth.state]))
