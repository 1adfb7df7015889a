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

    # -- wake-ups ------------------------------------------------------------------------------
    async def listen(self, channels: Sequence[str]) -> Listener:
        """Start receiving wake-ups for ``channels``."""
        ...

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake the listeners of ``channels`` in every process."""
        ...
