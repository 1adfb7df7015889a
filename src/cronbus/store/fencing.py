"""Fences and clocks of run leases: the rules both stores follow, written once.

**The fence.** Every claim draws a random 64-bit token (:func:`new_fence`), stored on the run
with its lease and on the attempt. A completion is recorded only while the run still holds
that attempt under that token. The attempt id alone is not enough on PostgreSQL: claims commit
asynchronously, and after a server crash a sequence can hand out the same value again, so a
run requeued by the crash could get the very attempt id its old owner still holds. A random
token does not repeat (one chance in 2**64), and unlike "lease owner + attempt id" it holds
even when two processes share a worker name (``--name``) or one worker claims the same run
twice.

**The clock.** On PostgreSQL a lease's expiry is computed and compared with the server's clock
(``statement_timestamp()``), for claims, heartbeats and the reaper: the caller's ``now`` does
not enter, so a worker whose clock is off neither steals others' leases (a reaper ahead) nor
keeps its own too long (a heartbeat ahead), nor loses it early (a clock behind). A lease is
``lease_seconds`` of the server's time after the claim or the last heartbeat. SQLite lives on one
machine with one clock, so it uses the caller's ``now``. Every other time the store records
(``started_at``, ``finished_at``, ``eta``...) stays the caller's ``now``. Tests that move time by
hand on PostgreSQL switch a store to the caller's clock (:data:`CALLER_CLOCK`).

**An ambiguous commit.** When the connection fails during a commit, the caller cannot know
whether its completion was recorded, and tries again; the fence then refuses the second try,
because the run no longer holds the attempt. :func:`already_recorded` tells such a retry from
a late worker: the attempt itself already ended, with this fence and this outcome, which only
the holder of the fence could have written (the run outcome events of that commit are the
worker's to publish, and it does so for every completion reported as recorded).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal

from ..model import Outcome
from ..states import AttemptOutcome

LeaseClock = Literal["server", "caller"]
"""Whose clock times run leases: the database server's (default on PostgreSQL), or the
caller's ``now`` (SQLite, and tests that move time by hand)."""
SERVER_CLOCK: LeaseClock = "server"
CALLER_CLOCK: LeaseClock = "caller"

_HALF = 1 << 63


def new_fence() -> int:
    """A random token for one claim: a signed 64-bit integer (a ``bigint`` column)."""
    return secrets.randbits(64) - _HALF


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    """What the store holds of an attempt that already ended: its fence and outcome."""

    attempt_id: int
    fence: int | None
    outcome: AttemptOutcome


def already_recorded(outcome: Outcome, ended: EndedAttempt | None) -> bool:
    """Whether a completion the fence refused had in fact been recorded already (a retry after
    an ambiguous commit): its attempt ended with the same outcome, under the same fence."""
    if ended is None or ended.attempt_id != outcome.attempt_id:
        return False
    if outcome.fence is not None and ended.fence != outcome.fence:
        return False
    return ended.outcome is outcome.outcome


def settle(outcomes: list[Outcome], done: list[bool], ended: dict[int, EndedAttempt]) -> list[bool]:
    """``done`` with the refused outcomes that :func:`already_recorded` accepts turned true
    (``ended``: the ended attempts of the refused outcomes, by attempt id)."""
    return [
        ok or already_recorded(outcome, ended.get(outcome.attempt_id))
        for outcome, ok in zip(outcomes, done, strict=True)
    ]
