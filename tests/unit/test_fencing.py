"""The pure rules of run fences (:mod:`cronbus.store.fencing`): the token, and the decision that
tells a completion retried after an ambiguous commit from a late worker's."""

from __future__ import annotations

import pytest

from cronbus.model import Outcome
from cronbus.states import AttemptOutcome
from cronbus.store.fencing import EndedAttempt, already_recorded, new_fence, settle

OK = AttemptOutcome.SUCCEEDED


def outcome(kind: AttemptOutcome = OK, *, attempt_id: int = 7, fence: int | None = 42) -> Outcome:
    return Outcome(run_id=1, attempt_id=attempt_id, outcome=kind, fence=fence)


def test_fences_are_signed_64_bit_and_do_not_repeat() -> None:
    fences = [new_fence() for _ in range(10_000)]
    assert all(-(2**63) <= f < 2**63 for f in fences)
    assert len(set(fences)) == len(fences)
    assert any(f < 0 for f in fences)  # the whole signed range is used
    assert any(f > 0 for f in fences)


@pytest.mark.parametrize(
    ("ended", "recorded"),
    [
        (EndedAttempt(7, 42, OK), True),  # the first try committed: a retry of it
        (None, False),  # the attempt has not ended (or is unknown): the fence refused it
        (EndedAttempt(7, 43, OK), False),  # another claim's attempt with the same id
        (EndedAttempt(7, 42, AttemptOutcome.FAILED), False),  # it ended otherwise
        (EndedAttempt(7, 42, AttemptOutcome.LOST), False),  # reaped before the completion
        (EndedAttempt(8, 42, OK), False),  # another attempt
    ],
)
def test_a_refused_completion_counts_as_recorded_only_if_its_attempt_ended_so(
    ended: EndedAttempt | None, recorded: bool
) -> None:
    assert already_recorded(outcome(), ended) is recorded


def test_without_a_fence_the_attempt_id_and_outcome_decide() -> None:
    assert already_recorded(outcome(fence=None), EndedAttempt(7, 43, OK))
    assert not already_recorded(outcome(fence=None), EndedAttempt(7, 43, AttemptOutcome.FAILED))


def test_settle_turns_only_retries_true() -> None:
    outcomes = [outcome(attempt_id=1), outcome(attempt_id=2), outcome(attempt_id=3)]
    ended = {2: EndedAttempt(2, 42, OK), 3: EndedAttempt(3, 41, OK)}
    assert settle(outcomes, [True, False, False], ended) == [True, True, False]
