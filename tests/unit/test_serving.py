"""What a worker serves: ``*`` for every queue, and claiming again when slots were left free."""

from __future__ import annotations

import pytest

from cronbus.errors import ConfigurationError
from cronbus.fairness import EVERY, parse_queues, serves, serves_every_queue
from cronbus.worker.serving import Serving


@pytest.mark.parametrize("spec", ["*", " * ", ["*"], [" *"]])
def test_a_star_alone_means_every_queue(spec: str | list[str]) -> None:
    assert parse_queues(spec) == EVERY
    assert serves_every_queue(parse_queues(spec))
    serving = Serving(spec)
    assert (serving.every, serving.registered, serving.eta_queues) == (True, ["*"], None)
    assert serving.describe() == "every queue"


@pytest.mark.parametrize("spec", ["*,a", "a,*", "*:3", "**", ["*", "a"], "*" + "x" * 500])
def test_a_star_with_other_queues_or_a_weight_is_refused(spec: str | list[str]) -> None:
    with pytest.raises(ConfigurationError, match=r"'\*' \(every queue\) cannot be") as caught:
        parse_queues(spec)
    assert len(str(caught.value)) < 200


def test_named_queues_keep_their_meaning() -> None:
    serving = Serving("default,emails:3")
    assert not serving.every
    assert serving.current() == (("default", 1), ("emails", 3))
    assert serving.registered == serving.eta_queues == ["default", "emails"]
    assert serving.describe() == "default,emails:3"


def test_serves_names_the_queue_or_a_star() -> None:
    assert serves(["*"], "bulk-emails")
    assert serves(["a", "bulk-emails"], "bulk-emails")
    assert not serves(["a", "b"], "bulk-emails")
    assert not serves([], "a")


def test_a_claim_that_left_slots_free_asks_the_next_queues_at_once() -> None:
    serving = Serving("a,b,c,d,e")
    # One slot: each claim asks one queue; four misses in a row ask four more queues at once.
    assert [serving.claim_again(1, 0) for _ in range(5)] == [True, True, True, True, False]
    # Then a new round begins.
    assert serving.claim_again(1, 0)


def test_a_full_claim_starts_the_count_again() -> None:
    serving = Serving("a,b,c,d,e")
    assert serving.claim_again(1, 0)
    assert serving.claim_again(1, 0)
    assert not serving.claim_again(1, 1)
    assert [serving.claim_again(1, 0) for _ in range(5)] == [True, True, True, True, False]


def test_enough_slots_for_every_queue_never_claims_again() -> None:
    serving = Serving("a,b")
    assert not serving.claim_again(2, 0)
    assert not serving.claim_again(8, 3)
    # Two slots, five queues: three claims ask them all.
    serving = Serving("a,b,c,d,e")
    assert [serving.claim_again(2, 1) for _ in range(3)] == [True, True, False]
