"""When a worker takes an attempt a heartbeat lists for an orphan (issue 9, item 10): only an
unknown attempt listed by two heartbeats, once the claims in flight at the first have returned."""

from __future__ import annotations

from cronbus.model import ClaimedRun
from cronbus.states import AttemptOutcome
from cronbus.store.ports import HeldAttempt
from cronbus.worker.orphans import Holdings, orphan_outcome


def held(attempt_id: int, fence: int = 100) -> HeldAttempt:
    return HeldAttempt(
        run_id=attempt_id + 1000, attempt_id=attempt_id, cancelling=False, fence=fence
    )


def claimed(attempt_id: int, fence: int = 100) -> ClaimedRun:
    return ClaimedRun(
        run_id=attempt_id + 1000,
        attempt_id=attempt_id,
        attempt=1,
        number=1,
        fence=fence,
        task="t",
        queue="default",
        args_json="[]",
        kwargs_json="{}",
        max_attempts=1,
        timeout=None,
        eta=0.0,
    )


def test_an_unknown_attempt_is_an_orphan_at_its_second_sighting() -> None:
    holdings = Holdings()
    assert holdings.orphans([held(1)]) == []
    assert holdings.orphans([held(1)]) == [held(1)]


def test_a_known_attempt_is_never_an_orphan() -> None:
    holdings = Holdings()
    holdings.claimed(claimed(1))
    for _ in range(3):
        assert holdings.orphans([held(1)]) == []


def test_the_same_attempt_id_under_another_fence_is_unknown() -> None:
    holdings = Holdings()
    holdings.claimed(claimed(1, fence=100))
    assert holdings.orphans([held(1, fence=200)]) == []
    assert holdings.orphans([held(1, fence=200)]) == [held(1, fence=200)]


def test_a_claim_in_flight_at_the_first_sighting_defers_the_verdict_until_it_returns() -> None:
    holdings = Holdings()
    with holdings.claiming():
        # The claim committed before the heartbeat read the store, but has not returned yet.
        assert holdings.orphans([held(1)]) == []
        assert holdings.orphans([held(1)]) == []  # still in flight: still not an orphan
        holdings.claimed(claimed(1))  # it returned with the attempt
    assert holdings.orphans([held(1)]) == []


def test_a_claim_started_after_the_first_sighting_does_not_defer_the_verdict() -> None:
    holdings = Holdings()
    assert holdings.orphans([held(1)]) == []
    with holdings.claiming():
        # This claim cannot have made an attempt that an earlier heartbeat listed.
        assert holdings.orphans([held(1)]) == [held(1)]


def test_an_attempt_recorded_after_a_heartbeat_read_it_is_not_an_orphan() -> None:
    holdings = Holdings()
    holdings.claimed(claimed(1))
    holdings.settled(claimed(1))  # recorded while a heartbeat that lists it was on its way
    assert holdings.orphans([held(1)]) == []
    assert holdings.orphans([]) == []  # the next heartbeat no longer lists it
    assert holdings.orphans([held(2)]) == []


def test_an_orphans_outcome_is_lost_without_using_a_retry_under_its_own_fence() -> None:
    outcome = orphan_outcome(held(1, fence=-7))
    assert (outcome.run_id, outcome.attempt_id, outcome.fence) == (1001, 1, -7)
    assert outcome.outcome is AttemptOutcome.LOST
    assert outcome.counts is False
    assert outcome.error is not None
    assert outcome.error.type == "OrphanedClaim"
