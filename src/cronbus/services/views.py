"""Records the services return beside the store's own: a run with its attempts and hints, a
query of runs, a defer's answer. Frozen dataclasses, so the HTTP API derives its schemas from
them and the CLI renders them, from one definition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..model import Attempt, Run
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDetail:
    """One run with its attempts (oldest first, with their errors and logs), the runs it
    spawned, and why it may wait for ever (``waiting``: no live worker serves its queue...)."""

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
