"""Run outcome events (:mod:`cronbus.worker.outcomes`): the attempt's number, and ids that stay
apart when a crash hands an attempt id out again."""

from __future__ import annotations

import json

from cronbus.model import ClaimedRun, Outcome
from cronbus.states import AttemptOutcome
from cronbus.validation import check_event_id
from cronbus.worker.outcomes import outcome_events


def claimed(fence: int, number: int = 3, attempt: int = 1) -> ClaimedRun:
    return ClaimedRun(
        run_id=7,
        attempt_id=40,
        attempt=attempt,
        number=number,
        fence=fence,
        task="t",
        queue="q",
        args_json="[]",
        kwargs_json="{}",
        max_attempts=1,
        timeout=None,
        eta=0.0,
    )


def succeeded(c: ClaimedRun) -> Outcome:
    return Outcome(
        run_id=c.run_id, attempt_id=c.attempt_id, outcome=AttemptOutcome.SUCCEEDED, fence=c.fence
    )


def test_the_event_names_the_attempts_number_not_its_try() -> None:
    c = claimed(fence=5, number=3, attempt=1)  # two attempts lost before this one
    (event,) = outcome_events(c, succeeded(c), 0.0)
    assert json.loads(event.data_json)["attempt"] == 3


def test_event_ids_are_stable_per_claim_and_apart_between_claims() -> None:
    old, new = claimed(fence=-(2**63)), claimed(fence=2**63 - 1)
    (first,) = outcome_events(old, succeeded(old), 0.0)
    (again,) = outcome_events(old, succeeded(old), 1.0)
    (other,) = outcome_events(new, succeeded(new), 0.0)
    assert first.id == again.id  # published twice, stored once
    assert first.id != other.id  # the same run and attempt id, another claim
    assert check_event_id(first.id) == first.id
    assert first.id == "run-7-40-8000000000000000-run.succeeded"
