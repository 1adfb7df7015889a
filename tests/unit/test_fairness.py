"""Sharing a claim batch among weighted queues: parsing the spec and planning the shares."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbus.errors import ConfigurationError
from cronbus.fairness import MAX_QUEUE_NAME, parse_queues, plan_shares

Queues = list[tuple[str, int]]

names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-",
    min_size=1,
    max_size=12,
)
queue_lists = st.lists(
    st.tuples(names, st.integers(1, 20)), min_size=1, max_size=12, unique_by=lambda q: q[0]
)
limits = st.integers(0, 200)
rotations = st.integers(-(10**6), 10**6)


def total(plan: list[tuple[str, int]]) -> int:
    """The number of slots a plan hands out."""
    return sum(share for _, share in plan)


# -- parse_queues ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("default", (("default", 1),)),
        ("a,b:3,c", (("a", 1), ("b", 3), ("c", 1))),
        (" a , b : 3 ,c ", (("a", 1), ("b", 3), ("c", 1))),
        ("emails.high:10,emails-low,x_1:1", (("emails.high", 10), ("emails-low", 1), ("x_1", 1))),
        (["a", "b:2"], (("a", 1), ("b", 2))),
        (("a,b:2", "c:4"), (("a", 1), ("b", 2), ("c", 4))),
        ("q:007", (("q", 7),)),
        ("n" * MAX_QUEUE_NAME, (("n" * MAX_QUEUE_NAME, 1),)),
    ],
)
def test_parse_queues(spec: str | list[str], expected: tuple[tuple[str, int], ...]) -> None:
    assert parse_queues(spec) == expected


def test_parse_keeps_the_given_order() -> None:
    assert [name for name, _ in parse_queues("z,a,m")] == ["z", "a", "m"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no queue given"),
        ("  ", "no queue given"),
        (",", "no queue given"),
        ([], "no queue given"),
        ("a,,b", "empty queue name"),
        ("a,b,", "empty queue name"),
        (",a", "empty queue name"),
        (":3", "empty queue name"),
        (["a", ""], "empty queue name"),
        ("a,b,a", "listed twice"),
        ("a:1,a:2", "listed twice"),
        (["a", "b,a"], "listed twice"),
        ("a:", "whole number"),
        ("a:x", "whole number"),
        ("a:1.5", "whole number"),
        ("a:-1", "whole number"),
        ("a:+3", "whole number"),
        ("a:1_0", "whole number"),
        ("a:\u0663", "whole number"),  # ARABIC-INDIC DIGIT THREE: int() would take it
        ("a:2:3", "whole number"),
        ("a:0", ">= 1"),
        ("a:00", ">= 1"),
        ("a:" + "9" * 5000, "too large"),
        ("n" * (MAX_QUEUE_NAME + 1), "the limit is 100"),
        ("emails/high", "may only hold"),
        ("a b", "may only hold"),
        ("caf\u00e9", "may only hold"),
        ("a;b", "may only hold"),
    ],
)
def test_parse_errors(spec: str | list[str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_queues(spec)


def test_parse_refuses_non_string_items() -> None:
    with pytest.raises(ConfigurationError, match="must be strings"):
        parse_queues(["a", 3])  # type: ignore[list-item]


def test_duplicate_message_names_the_queue_and_the_spec() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_queues("emails,reports,emails:2")
    assert "'emails'" in str(info.value)
    assert "emails,reports,emails:2" in str(info.value)


@given(queue_lists)
def test_parse_round_trips(queues: Queues) -> None:
    spec = ",".join(f"{name}:{weight}" for name, weight in queues)
    assert parse_queues(spec) == tuple(queues)
    assert parse_queues(spec.split(",")) == tuple(queues)


# -- plan_shares: examples ------------------------------------------------------------------------


def test_weights_three_to_one_with_eight_slots() -> None:
    assert plan_shares([("a", 3), ("b", 1)], 8, 0) == [("a", 6), ("b", 2)]


def test_equal_weights_split_evenly() -> None:
    assert plan_shares([("a", 1), ("b", 1), ("c", 1)], 9, 0) == [("a", 3), ("b", 3), ("c", 3)]


def test_leftover_goes_to_the_first_queue_of_the_rotation() -> None:
    queues = [("a", 1), ("b", 1), ("c", 1)]
    assert plan_shares(queues, 4, 0) == [("a", 2), ("b", 1), ("c", 1)]
    assert plan_shares(queues, 4, 1) == [("b", 2), ("c", 1), ("a", 1)]
    assert plan_shares(queues, 4, 2) == [("c", 2), ("a", 1), ("b", 1)]


def test_every_queue_gets_a_slot_however_light() -> None:
    plan = dict(plan_shares([("heavy", 1000), ("light", 1), ("tiny", 1)], 5, 0))
    assert plan == {"heavy": 3, "light": 1, "tiny": 1}


def test_ties_in_remainders_go_to_the_queue_listed_first() -> None:
    # Quotas of 10 slots over weights 10:5:3:2 are 5, 2.5, 1.5 and 1: b and c tie for the spare.
    plan = plan_shares([("a", 10), ("b", 5), ("c", 3), ("d", 2)], 10, 0)
    assert plan == [("a", 5), ("b", 3), ("c", 1), ("d", 1)]


def test_minimum_slots_can_push_another_queue_below_one() -> None:
    # Round 1: c..f have quotas below one and get one slot each, leaving 4 for a and b.
    # Round 2: b's quota of those 4 is 4 * 21/101 < 1, so b gets one too and a the rest.
    queues = [("a", 80), ("b", 21), ("c", 1), ("d", 1), ("e", 1), ("f", 1)]
    plan = dict(plan_shares(queues, 8, 0))
    assert plan == {"a": 3, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}


def test_limit_equal_to_queue_count_is_one_each() -> None:
    plan = plan_shares([("a", 50), ("b", 1), ("c", 1)], 3, 0)
    assert plan == [("a", 1), ("b", 1), ("c", 1)]


def test_fewer_slots_than_queues_serves_a_rotating_window() -> None:
    queues = [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
    assert plan_shares(queues, 2, 0) == [("a", 1), ("b", 1)]
    assert plan_shares(queues, 2, 1) == [("b", 1), ("c", 1)]
    assert plan_shares(queues, 2, 3) == [("d", 1), ("a", 1)]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_limit_one_serves_every_queue_over_n_consecutive_claims(n: int) -> None:
    queues = [(f"q{i}", i + 1) for i in range(n)]
    for first in (0, 5, 1_000_003):
        served = [plan_shares(queues, 1, r)[0][0] for r in range(first, first + n)]
        assert sorted(served) == sorted(name for name, _ in queues)


def test_zero_limit_is_an_empty_plan() -> None:
    assert plan_shares([("a", 1)], 0, 3) == []


def test_a_single_queue_takes_everything() -> None:
    assert plan_shares([("only", 4)], 17, 99) == [("only", 17)]


def test_negative_rotation_wraps() -> None:
    assert plan_shares([("a", 1), ("b", 1), ("c", 1)], 1, -1) == [("c", 1)]


def test_accepts_parse_queues_output() -> None:
    assert plan_shares(parse_queues("a:3,b"), 8, 0) == [("a", 6), ("b", 2)]


@pytest.mark.parametrize(
    ("queues", "limit", "message"),
    [
        ([("a", 1)], -1, "limit"),
        ([], 3, "no queues"),
        ([("a", 1), ("a", 2)], 3, "unique"),
        ([("a", 0)], 3, "weights"),
        ([("a", -2), ("b", 1)], 3, "weights"),
    ],
)
def test_plan_refuses_bad_arguments(queues: Queues, limit: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_shares(queues, limit, 0)


# -- plan_shares: properties ----------------------------------------------------------------------


@given(queue_lists, limits, rotations)
def test_shares_sum_to_limit(queues: Queues, limit: int, rotation: int) -> None:
    assert total(plan_shares(queues, limit, rotation)) == limit


@given(queue_lists, limits, rotations)
def test_only_known_queues_with_positive_shares(queues: Queues, limit: int, rotation: int) -> None:
    plan = plan_shares(queues, limit, rotation)
    known = {name for name, _ in queues}
    assert all(name in known and share >= 1 for name, share in plan)
    assert len({name for name, _ in plan}) == len(plan)


@given(queue_lists, limits, rotations)
def test_every_queue_served_when_slots_suffice(queues: Queues, limit: int, rotation: int) -> None:
    plan = plan_shares(queues, limit, rotation)
    if limit >= len(queues):
        assert {name for name, _ in plan} == {name for name, _ in queues}
    else:
        assert len(plan) == limit
        assert all(share == 1 for _, share in plan)


@given(queue_lists, limits, rotations)
def test_plan_starts_at_the_rotation(queues: Queues, limit: int, rotation: int) -> None:
    plan = plan_shares(queues, limit, rotation)
    start = rotation % len(queues)
    rotated = [name for name, _ in queues[start:] + queues[:start]]
    assert [name for name, _ in plan] == rotated[: len(plan)]


@given(queue_lists, limits, rotations)
def test_heavier_queue_never_gets_fewer_slots(queues: Queues, limit: int, rotation: int) -> None:
    if limit < len(queues):
        return  # one slot each to a rotating window: weights do not apply
    shares = dict(plan_shares(queues, limit, rotation))
    for a, wa in queues:
        for b, wb in queues:
            if wa > wb:
                assert shares[a] >= shares[b]


@given(queue_lists, limits, rotations)
def test_no_share_exceeds_its_rounded_up_quota(queues: Queues, limit: int, rotation: int) -> None:
    weights = sum(weight for _, weight in queues)
    for name, share in plan_shares(queues, limit, rotation):
        weight = dict(queues)[name]
        assert share <= max(1, math.ceil(limit * weight / weights))


@given(queue_lists, st.integers(0, 200), rotations)
def test_shares_match_quotas_when_every_quota_is_a_slot(
    queues: Queues, extra: int, rotation: int
) -> None:
    # With the limit a multiple of the total weight, every quota is a whole number >= 1.
    weights = sum(weight for _, weight in queues)
    limit = weights * (1 + extra % 5)
    shares = dict(plan_shares(queues, limit, rotation))
    assert shares == {name: limit * weight // weights for name, weight in queues}


@given(st.lists(names, min_size=1, max_size=12, unique=True), st.integers(0, 200), rotations)
def test_equal_weights_differ_by_at_most_one(names_: list[str], limit: int, rotation: int) -> None:
    plan = plan_shares([(name, 1) for name in names_], limit, rotation)
    if plan:
        shares = [share for _, share in plan]
        assert max(shares) - min(shares) <= 1


@given(queue_lists, st.integers(1, 200), rotations)
def test_every_queue_served_over_consecutive_claims(
    queues: Queues, limit: int, rotation: int
) -> None:
    n = len(queues)
    served: Counter[str] = Counter()
    for r in range(rotation, rotation + n):
        served.update(name for name, _ in plan_shares(queues, limit, r))
    assert set(served) == {name for name, _ in queues}
    if limit < n:
        # A window of `limit` queues slides one step per claim: each is served `limit` times.
        assert set(served.values()) == {limit}


@given(st.lists(names, min_size=1, max_size=12, unique=True), st.integers(1, 50), rotations)
def test_leftovers_rotate_among_equal_queues(names_: list[str], limit: int, rotation: int) -> None:
    # Over len(queues) consecutive claims, equal queues receive exactly equal totals.
    queues = [(name, 1) for name in names_]
    received: Counter[str] = Counter()
    for r in range(rotation, rotation + len(queues)):
        received.update(dict(plan_shares(queues, limit, r)))
    assert len(set(received.values())) == 1


@given(queue_lists, limits, rotations)
def test_plan_is_deterministic(queues: Queues, limit: int, rotation: int) -> None:
    assert plan_shares(queues, limit, rotation) == plan_shares(queues, limit, rotation)


@given(queue_lists, limits, rotations)
def test_rotation_is_taken_modulo_the_queue_count(
    queues: Queues, limit: int, rotation: int
) -> None:
    assert plan_shares(queues, limit, rotation) == plan_shares(
        queues, limit, rotation + len(queues)
    )
