"""Attempts a worker holds in the store without knowing it (orphaned claims), and giving them up.

A worker's "record outcomes and claim" transaction can commit and still raise (the connection
dropped during COMMIT): the runs it claimed are ``running`` under the worker's id, but the worker
never learnt of them. Heartbeats renew every lease a worker holds, by worker id, so without
this those runs would stay ``running`` for as long as the worker lives.

:class:`Holdings` tracks the attempts the worker knows (from their claim until their outcome is
recorded) and the claims in flight. An attempt a heartbeat lists that the worker does not know
is an orphan once a second heartbeat lists it again and every claim that was in flight when the
first one returned has returned since: a claim still in flight may have committed before the
heartbeat read the store, and an attempt recorded just after a heartbeat read it is no longer
listed by the next one. Orphans are completed as lost without using a retry, so their runs are
queued again.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..model import ClaimedRun, ErrorInfo, Outcome
from ..states import AttemptOutcome
from ..store.ports import HeldAttempt, RunLeases

ORPHANED = ErrorInfo(
    type="OrphanedClaim",
    message="claimed by a transaction whose commit was not confirmed; requeued",
)

log = logging.getLogger("cronbus.worker")
_Key = tuple[int, int]
"""An attempt as the store tells it apart: its id and its claim's fence."""


def _key(attempt_id: int, fence: int) -> _Key:
    return (attempt_id, fence)


class Holdings:
    """The attempts a worker knows it holds, the claims in flight, and the orphans seen."""

    def __init__(self) -> None:
        self._known: set[_Key] = set()
        self._in_flight: set[int] = set()
        self._tokens = itertools.count()
        # An unknown attempt seen once, with the claims that were in flight at that moment.
        self._suspects: dict[_Key, frozenset[int]] = {}

    def claimed(self, run: ClaimedRun) -> None:
        """The worker learnt of ``run``'s attempt (a claim returned it)."""
        self._known.add(_key(run.attempt_id, run.fence))

    def settled(self, run: ClaimedRun) -> None:
        """``run``'s attempt no longer needs its lease: its outcome was recorded, dropped, or
        the worker gave the attempt up."""
        self._known.discard(_key(run.attempt_id, run.fence))

    def knows(self, attempt_id: int, fence: int) -> bool:
        """Whether the worker learnt of this attempt under this fence and has not settled it."""
        return _key(attempt_id, fence) in self._known

    @contextmanager
    def claiming(self) -> Iterator[None]:
        """Mark a claim in flight. The runs it returns must be passed to :meth:`claimed`
        inside the block, with no ``await`` between the claim's return and the registration,
        so no heartbeat can see the claim ended and its runs unknown."""
        token = next(self._tokens)
        self._in_flight.add(token)
        try:
            yield
        finally:
            self._in_flight.discard(token)

    def orphans(self, held: Sequence[HeldAttempt]) -> list[HeldAttempt]:
        """The attempts of a heartbeat that just returned (``held``) that are orphans; the
        unknown ones seen for the first time are remembered for the next heartbeat."""
        found: list[HeldAttempt] = []
        suspects: dict[_Key, frozenset[int]] = {}
        for entry in held:
            key = _key(entry.attempt_id, entry.fence)
            if key in self._known:
                continue
            seen = self._suspects.get(key)
            if seen is not None and not seen & self._in_flight:
                found.append(entry)
            else:
                # Keep the first sighting's claims: a later claim cannot have made an attempt
                # that an earlier heartbeat already listed.
                suspects[key] = seen if seen is not None else frozenset(self._in_flight)
        self._suspects = suspects
        return found


def orphan_outcome(entry: HeldAttempt) -> Outcome:
    """The outcome that gives up an orphaned attempt: lost, without using a retry, fenced by
    the claim's own token so it cannot end an attempt claimed since."""
    return Outcome(
        run_id=entry.run_id,
        attempt_id=entry.attempt_id,
        fence=entry.fence,
        outcome=AttemptOutcome.LOST,
        error=ORPHANED,
        counts=False,
    )


async def give_up_orphans(
    store: RunLeases, worker_id: str, orphans: Sequence[HeldAttempt], now: float
) -> None:
    """Complete ``orphans`` as lost (their runs are queued again without using a retry)."""
    try:
        done = await store.complete([orphan_outcome(entry) for entry in orphans], now)
    except Exception:
        # The next heartbeats list them again, and this is tried once more.
        log.exception("giving up %d orphaned claims failed; trying again later", len(orphans))
        return
    for entry, ok in zip(orphans, done, strict=True):
        log.warning(
            "run %d: attempt %d was claimed for worker %s by a transaction whose commit was not "
            "confirmed; %s",
            entry.run_id,
            entry.attempt_id,
            worker_id,
            "requeued" if ok else "already ended",
            extra={"action": "run.orphaned"},
        )
