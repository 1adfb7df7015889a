"""The run state machine, written once.

::

    scheduled ──due──▶ queued ──claim──▶ running ──succeed──▶ succeeded
        ▲                 ▲                 │ ├──fail──▶ failed ──retry──▶ scheduled (backoff)
        │                 │                 │ │                └─give_up─▶ dead
        │                 └──────lose───────┤ └──cancel──▶ cancelling ──▶ cancelled
        │                                   │
    scheduled/queued ──cancel──▶ cancelled      scheduled/queued ──skip──▶ skipped
    dead/cancelled ──requeue──▶ queued

    running ──await──▶ waiting ──children_succeeded──▶ succeeded      (a fan-out parent)
                          ├──children_failed──▶ dead     └──cancel──▶ cancelled
    dead/cancelled ──revive──▶ waiting   (a parent whose failed children were requeued)

``failed`` is momentary: the store records a failed attempt and, in the same transaction, moves
the run on to ``scheduled`` (a retry) or ``dead``. Every change of a run's state, in Python or in
the SQL of a store, is derived from :data:`TRANSITIONS`, so the two cannot disagree.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from .errors import InvalidTransitionError


class RunState(enum.StrEnum):
    """Where a run is in its life."""

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"
    SKIPPED = "skipped"
    WAITING = "waiting"
    """A fan-out parent waiting for its child runs (it holds no lease and no worker slot)."""

    @property
    def terminal(self) -> bool:
        """True when the run will not change again without a requeue."""
        return self in TERMINAL


class AttemptOutcome(enum.StrEnum):
    """How one attempt of a run ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LOST = "lost"


class RunEvent(enum.StrEnum):
    """What can happen to a run."""

    DUE = "due"
    CLAIM = "claim"
    SUCCEED = "succeed"
    FAIL = "fail"
    RETRY = "retry"
    GIVE_UP = "give_up"
    CANCEL = "cancel"
    LOSE = "lose"
    SKIP = "skip"
    REQUEUE = "requeue"
    AWAIT = "await"
    """A parent's own attempt succeeded while its children are not all done."""
    CHILDREN_SUCCEEDED = "children_succeeded"
    CHILDREN_FAILED = "children_failed"
    REVIVE = "revive"
    """A finished parent waits again: some of its children were requeued."""


S = RunState
E = RunEvent

TERMINAL: frozenset[RunState] = frozenset({S.SUCCEEDED, S.CANCELLED, S.DEAD, S.SKIPPED})
ACTIVE: frozenset[RunState] = frozenset({S.RUNNING, S.CANCELLING})

TRANSITIONS: dict[RunEvent, dict[RunState, RunState]] = {
    E.DUE: {S.SCHEDULED: S.QUEUED},
    E.CLAIM: {S.QUEUED: S.RUNNING},
    # A cancel that arrives after the work is done loses to the work: the result stands.
    E.SUCCEED: {S.RUNNING: S.SUCCEEDED, S.CANCELLING: S.SUCCEEDED},
    E.FAIL: {S.RUNNING: S.FAILED, S.CANCELLING: S.CANCELLED},
    E.RETRY: {S.FAILED: S.SCHEDULED},
    E.GIVE_UP: {S.FAILED: S.DEAD},
    E.CANCEL: {
        S.SCHEDULED: S.CANCELLED,
        S.QUEUED: S.CANCELLED,
        S.RUNNING: S.CANCELLING,
        S.CANCELLING: S.CANCELLING,
        # Cancelling a parent cancels its children in the same transaction.
        S.WAITING: S.CANCELLED,
    },
    # A lost attempt is the worker's fault, not the task's: the run goes back to the queue.
    E.LOSE: {S.RUNNING: S.QUEUED, S.CANCELLING: S.CANCELLED},
    E.SKIP: {S.SCHEDULED: S.SKIPPED, S.QUEUED: S.SKIPPED},
    E.REQUEUE: {S.DEAD: S.QUEUED, S.CANCELLED: S.QUEUED},
    E.AWAIT: {S.RUNNING: S.WAITING},
    E.CHILDREN_SUCCEEDED: {S.WAITING: S.SUCCEEDED},
    E.CHILDREN_FAILED: {S.WAITING: S.DEAD},
    E.REVIVE: {S.DEAD: S.WAITING, S.CANCELLED: S.WAITING},
}


def sources(event: RunEvent) -> frozenset[RunState]:
    """The states from which ``event`` is allowed."""
    return frozenset(TRANSITIONS[event])


def transition(state: RunState, event: RunEvent) -> RunState:
    """Return the state after ``event``; raise :class:`InvalidTransitionError` if forbidden."""
    try:
        return TRANSITIONS[event][state]
    except KeyError:
        raise InvalidTransitionError(f"a {state.value} run cannot {event.value}") from None


def replay(state: RunState, events: Iterable[RunEvent]) -> RunState:
    """Apply ``events`` in order, as a store does inside one transaction."""
    for event in events:
        state = transition(state, event)
    return state


def sql_match(column: str, states: Iterable[enum.StrEnum]) -> str:
    """``column = 'x'`` for one state, ``column IN (...)`` for several: SQLite matches a partial
    index on ``state = 'x'`` only when the query says it the same way."""
    chosen = sorted(states)
    if len(chosen) == 1:
        return f"{column} = '{chosen[0].value}'"
    return f"{column} IN {sql_in(chosen)}"


def sql_in(states: Iterable[enum.StrEnum]) -> str:
    """Render states (of runs or deliveries) as an SQL ``IN`` list (the values are enum
    constants, never user input)."""
    return "(" + ", ".join(f"'{s.value}'" for s in sorted(states)) + ")"
