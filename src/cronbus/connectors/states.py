"""The connector task state machine, written once (the shape of a run's and a delivery's).

::

    unassigned ──assign──▶ running ──fail──▶ failed ──restart──▶ unassigned
        ▲  ▲                 │  │                                   ▲
        │  └──────lose───────┘  └──pause──▶ paused ──resume─────────┤
        │                                                            │
        └──────────────────────── stop ──▶ stopped ──resume──────────┘

``assign`` is a worker taking the task's lease (bumping its epoch, which fences any older
holder); ``lose`` is its lease running out or being released (a worker stopping or dying): the
task waits for the next worker, its committed positions intact. ``fail`` records why the task
cannot go on (tolerance ``none``); only ``restart`` brings it back. ``pause`` and ``stop``
apply to unassigned, running and failed tasks alike: a paused task keeps its place and comes
back with ``resume``; a stopped one is parked until resumed (a connector being stopped or
having stopped on its own). ``restart`` also applies to a running or paused task: its holder
is fenced and the task starts afresh from its committed positions.
"""

from __future__ import annotations

import enum

from ..errors import InvalidTransitionError


class TaskState(enum.StrEnum):
    """Where a connector task is in its life."""

    UNASSIGNED = "unassigned"
    RUNNING = "running"
    PAUSED = "paused"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def takeable(self) -> bool:
        """True when a worker may take the task's lease."""
        return self is TaskState.UNASSIGNED


class TaskEvent(enum.StrEnum):
    """What can happen to a connector task."""

    ASSIGN = "assign"
    LOSE = "lose"
    FAIL = "fail"
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    RESTART = "restart"


S = TaskState
E = TaskEvent

TRANSITIONS: dict[TaskEvent, dict[TaskState, TaskState]] = {
    E.ASSIGN: {S.UNASSIGNED: S.RUNNING},
    E.LOSE: {S.RUNNING: S.UNASSIGNED},
    E.FAIL: {S.RUNNING: S.FAILED},
    E.PAUSE: {S.UNASSIGNED: S.PAUSED, S.RUNNING: S.PAUSED, S.FAILED: S.PAUSED},
    E.RESUME: {S.PAUSED: S.UNASSIGNED, S.STOPPED: S.UNASSIGNED},
    E.STOP: {
        S.UNASSIGNED: S.STOPPED,
        S.RUNNING: S.STOPPED,
        S.FAILED: S.STOPPED,
        S.PAUSED: S.STOPPED,
    },
    E.RESTART: {
        S.FAILED: S.UNASSIGNED,
        S.RUNNING: S.UNASSIGNED,
        S.PAUSED: S.UNASSIGNED,
        S.STOPPED: S.UNASSIGNED,
        S.UNASSIGNED: S.UNASSIGNED,
    },
}

HELD: frozenset[TaskState] = frozenset({S.RUNNING})
"""States in which a worker holds the task's lease (every other state has no holder)."""


def sources(event: TaskEvent) -> frozenset[TaskState]:
    """The states from which ``event`` is allowed."""
    return frozenset(TRANSITIONS[event])


def transition(state: TaskState, event: TaskEvent) -> TaskState:
    """Return the state after ``event``; raise :class:`InvalidTransitionError` if forbidden."""
    try:
        return TRANSITIONS[event][state]
    except KeyError:
        message = f"a {state.value} connector task cannot {event.value}"
        raise InvalidTransitionError(message) from None
