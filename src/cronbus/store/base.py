"""The store contract: the one shared state of cronbus, as a protocol.

Every role talks to the store only through :class:`Store`; each backend implements it in one
module, and ``tests/contract`` runs the same suite against each. The store never reads the clock:
callers pass ``now`` so tests can move time. Every method that changes a run derives its allowed
``from`` states from :mod:`cronbus.states`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

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
    Run,
    RunFilter,
    WorkerInfo,
    WorkerState,
)
from ..states import RunState

RUNS_CHANNEL = "runs"
"""Wake-up channel: new or requeued runs may be claimable."""
CONTROL_CHANNEL = "control"
"""Wake-up channel: a running run was asked to cancel."""
JOBS_CHANNEL = "jobs"
"""Wake-up channel: a job was added, changed, or is waiting for its next fire to be planned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldAttempt:
    """An attempt a worker still holds after a heartbeat, and whether it must stop."""

    run_id: int
    attempt_id: int
    cancelling: bool


class Listener(Protocol):
    """Wake-ups for one consumer; polling stays the safety net, never the source of latency."""

    async def wait(self, timeout: float) -> bool:
        """Wait until a wake-up arrives or ``timeout`` seconds pass; True if woken."""
        ...

    async def close(self) -> None:
        """Stop listening."""
        ...


class Store(Protocol):
    """What every store backend provides."""

    url: str

    async def open(self) -> None:
        """Connect and apply pending migrations."""
        ...

    async def close(self) -> None:
        """Release connections and wake-up sockets."""
        ...

    async def schema_version(self) -> int:
        """The newest migration applied."""
        ...

    # -- runs ----------------------------------------------------------------------------------
    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs durably, in one transaction; a known idempotency key returns its run."""
        ...

    async def claim(self, request: ClaimRequest, now: float) -> list[ClaimedRun]:
        """Atomically move due runs to ``running`` under a lease, fairly over the queues."""
        ...

    async def complete(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Record ended attempts; each is fenced by its attempt id (False: no longer held)."""
        ...

    async def complete_and_claim(
        self, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        """:meth:`complete` then :meth:`claim`, in one transaction (a busy worker's loop)."""
        ...

    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew the worker's leases and registry entry; return the attempts it still holds."""
        ...

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Turn expired leases into lost attempts and requeue their runs; return run ids."""
        ...

    async def age_retries(self, now: float, after: float) -> int:
        """Move retries queued for longer than ``after`` seconds into the fresh lane."""
        ...

    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a run: at once if it waits, via ``cancelling`` if it runs."""
        ...

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead or cancelled runs again with a fresh retry budget (None: all dead runs)."""
        ...

    async def get_run(self, run_id: int) -> Run:
        """One run, or :class:`~cronbus.errors.RunNotFoundError`."""
        ...

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id, in no particular order; unknown ids are left out."""
        ...

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Runs matching ``filter``, newest first."""
        ...

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""
        ...

    async def count_runs(self) -> dict[RunState, int]:
        """How many runs are in each state."""
        ...

    async def next_eta(self, queues: Sequence[str]) -> float | None:
        """When the earliest scheduled run of these queues becomes due, if any."""
        ...

    # -- jobs ----------------------------------------------------------------------------------
    async def put_job(
        self, spec: JobSpec, next_fire_at: float | None, now: float, *, create: bool = False
    ) -> Job:
        """Create or replace the job named ``spec.name`` (its fire count and id are kept).

        With ``create`` the name must be new: an existing job is left as it is and
        :class:`~cronbus.errors.JobExistsError` raised, in the same statement (no race).
        """
        ...

    async def put_jobs(self, jobs: Sequence[tuple[JobSpec, float | None]], now: float) -> None:
        """Create or replace several jobs (spec, next fire) in one transaction (a sync)."""
        ...

    async def get_job(self, name: str) -> Job:
        """One job, or :class:`~cronbus.errors.JobNotFoundError`."""
        ...

    async def list_jobs(self) -> list[Job]:
        """Every job, by name."""
        ...

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""
        ...

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing, keeping them; return those changed."""
        ...

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""
        ...

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs whose next fire is at or before ``until``, earliest first."""
        ...

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction; each only if its job's next fire is as expected."""
        ...

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""
        ...

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar (ISO dates on which jobs using it don't fire)."""
        ...

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""
        ...

    # -- workers -------------------------------------------------------------------------------
    async def register_worker(self, worker: WorkerInfo) -> None:
        """Add or replace a worker in the registry."""
        ...

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""
        ...

    async def list_workers(self, now: float, lease_seconds: float) -> list[WorkerInfo]:
        """Registered workers; those silent for longer than a lease are reported lost."""
        ...

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the registry rows of workers silent since before ``silent_since`` and
        holding no run; return their ids."""
        ...

    # -- wake-ups ------------------------------------------------------------------------------
    async def listen(self, channels: Sequence[str]) -> Listener:
        """Start receiving wake-ups for ``channels``."""
        ...

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake the listeners of ``channels`` in every process."""
        ...
