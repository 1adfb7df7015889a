"""Store logic shared by every backend: pure decisions, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..model import Job, Lane, NewRun, Outcome, Overlap
from ..states import AttemptOutcome, RunEvent, RunState, transition

LEASE_EXPIRED = "LeaseExpired"
P = TypeVar("P")


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """How a run's row changes when one of its attempts ends."""

    state: RunState
    eta: float
    lane: Lane
    used: int
    lost: int
    finished_at: float | None


def finish(state: RunState, outcome: Outcome, eta: float, now: float) -> Finish:
    """Decide a run's next state from its current one and how its attempt ended.

    ``eta`` is the run's current due time; it changes only when a retry is scheduled.
    """
    used = 1 if outcome.counts else 0
    lost = 0 if outcome.counts else 1
    lane = Lane.FRESH
    if outcome.outcome is AttemptOutcome.SUCCEEDED:
        new = transition(state, RunEvent.SUCCEED)
    elif outcome.outcome is AttemptOutcome.LOST:
        new = transition(state, RunEvent.LOSE)
        eta = min(eta, now)
    else:
        new = transition(state, RunEvent.FAIL)
        if new is RunState.FAILED:
            if outcome.retry_at is None:
                new = transition(new, RunEvent.GIVE_UP)
            else:
                new = transition(new, RunEvent.RETRY)
                eta, lane = outcome.retry_at, Lane.RETRY
    return Finish(
        state=new,
        eta=eta,
        lane=lane,
        used=used,
        lost=lost,
        finished_at=now if new.terminal else None,
    )


def job_run(job: Job, fire_at: float, eta: float) -> NewRun:
    """The run of ``job`` for its fire at ``fire_at``, due at ``eta``."""
    spec = job.spec
    return NewRun(
        task=spec.task,
        queue=spec.queue,
        args_json=spec.args_json,
        kwargs_json=spec.kwargs_json,
        priority=spec.priority,
        eta=eta,
        max_attempts=spec.max_attempts,
        timeout=spec.timeout,
        job_id=job.id,
        fire_at=fire_at,
        concurrency_key=None if spec.overlap is Overlap.ALLOW else f"job:{job.id}",
        overlap=spec.overlap,
    )


def overlap_decisions(
    picks: Sequence[P],
    busy: Mapping[str, Sequence[int]],
    policy: Callable[[P], tuple[str | None, str | None]],
) -> tuple[list[P], list[P], list[int]]:
    """Apply job overlap policies among picked runs that share a concurrency key.

    ``busy`` maps keys to the ids of their running runs; ``policy`` gives a pick's key and
    overlap. Returns the runs to start, those to end ``skipped``, and the busy runs to cancel:
    a ``queue`` run whose key is busy (or taken earlier in this batch) waits; a ``skip`` one
    ends skipped; a ``replace`` one asks the busy runs to cancel and starts.
    """
    waiting = {key: list(ids) for key, ids in busy.items()}
    kept: list[P] = []
    skipped: list[P] = []
    cancel: list[int] = []
    taken: set[str] = set()
    for pick in picks:
        key, name = policy(pick)
        overlap = Overlap(name or Overlap.ALLOW)
        if key is None or overlap is Overlap.ALLOW:
            kept.append(pick)
        elif key in waiting and overlap is Overlap.REPLACE and key not in taken:
            cancel.extend(waiting.pop(key))
            kept.append(pick)
        elif key in waiting or key in taken:
            if overlap is Overlap.SKIP:
                skipped.append(pick)
            # QUEUE (or a second REPLACE in one batch): it waits for the next claim.
        else:
            kept.append(pick)
        if key is not None:
            taken.add(key)
    return kept, skipped, cancel
