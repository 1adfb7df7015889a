"""The delivery state machine, written once (the same shape as a run's).

::

    pending ──send──▶ in_flight ──ack──▶ acked
       ▲  ▲               ├──fail──▶ retry ──send──▶ in_flight
       │  └────lose───────┤
       │                  └──give_up──▶ dead
       └──────────requeue──────────────┘  (from dead)

``lose`` is a push whose dispatcher died or lost its lease: the delivery goes back to be pushed
again, without spending an attempt (the push may have reached the target: at least once).
``pending`` is the fresh lane, ``retry`` the lower-priority lane of failed pushes.
"""

from __future__ import annotations

import enum

from ..errors import InvalidTransitionError


class DeliveryState(enum.StrEnum):
    """Where a delivery is in its life."""

    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    ACKED = "acked"
    RETRY = "retry"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        """True when the delivery will not change again without a requeue."""
        return self in (DeliveryState.ACKED, DeliveryState.DEAD)


class DeliveryEvent(enum.StrEnum):
    """What can happen to a delivery."""

    SEND = "send"
    ACK = "ack"
    FAIL = "fail"
    GIVE_UP = "give_up"
    LOSE = "lose"
    REQUEUE = "requeue"


D = DeliveryState
E = DeliveryEvent

TRANSITIONS: dict[DeliveryEvent, dict[DeliveryState, DeliveryState]] = {
    E.SEND: {D.PENDING: D.IN_FLIGHT, D.RETRY: D.IN_FLIGHT},
    E.ACK: {D.IN_FLIGHT: D.ACKED},
    E.FAIL: {D.IN_FLIGHT: D.RETRY},
    E.GIVE_UP: {D.IN_FLIGHT: D.DEAD},
    E.LOSE: {D.IN_FLIGHT: D.PENDING},
    E.REQUEUE: {D.DEAD: D.PENDING},
}

LIVE: frozenset[DeliveryState] = frozenset({D.PENDING, D.IN_FLIGHT, D.RETRY})
"""Deliveries that will still be pushed: retention keeps their events."""


def sources(event: DeliveryEvent) -> frozenset[DeliveryState]:
    """The states from which ``event`` is allowed."""
    return frozenset(TRANSITIONS[event])


def transition(state: DeliveryState, event: DeliveryEvent) -> DeliveryState:
    """Return the state after ``event``; raise :class:`InvalidTransitionError` if forbidden."""
    try:
        return TRANSITIONS[event][state]
    except KeyError:
        raise InvalidTransitionError(f"a {state.value} delivery cannot {event.value}") from None
