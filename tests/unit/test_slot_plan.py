"""plan_slots: sharing a worker's free slots among queues, counting the runs already running."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cronbus.fairness import plan_shares, plan_slots, spare_shares
from cronbus.model import QueueShare

Plan = dict[str, tuple[int, int | None]]


def plan(*args: object, **kwargs: object) -> Plan:
    """plan_slots as {queue: (limit, most)}, checking its listing on the way."""
    shares = plan_slots(*args, **kwargs)
    assert all(isinstance(s, QueueShare) and s.limit >= 1 for s in shares)
    return {s.name: (s.limit, s.most) for s in shares}


def test_single_queue_gets_every_free_slot() -> None:
    assert plan([("a", 1)], 10, {}, 0) == {"a": (10, 10)}
    assert plan([("a", 5)], 10, {"a": 3}, 7) == {"a": (7, 7)}


def test_no_free_slot_plans_nothing() -> None:
    assert plan([("a", 1), ("b", 1)], 4, {"a": 4}, 0) == {}
    assert plan([("a", 1)], 4, {"a": 2, "b": 2}, 0) == {}


def test_quotas_by_weight() -> None:
    assert plan([("a", 1), ("b", 3)], 8, {}, 0) == {"a": (2, 7), "b": (6, 7)}
    assert plan([("a", 1), ("b", 1), ("c", 2)], 8, {}, 0) == {
        "a": (2, 6),
        "b": (2, 6),
        "c": (4, 6),
    }


def test_quotas_count_busy_runs() -> None:
    # a already holds 2 of its quota of 5: b is furthest below quota and served first.
    assert plan([("a", 1), ("b", 1)], 10, {"a": 2}, 0) == {"a": (3, 7), "b": (5, 8)}


def test_queues_below_quota_come_first() -> None:
    # a is far over its quota (5); the two free slots go to b, which is below it.
    assert plan([("a", 1), ("b", 1)], 10, {"a": 8}, 0) == {"b": (2, 2)}


def test_a_queue_keeps_one_slot_for_every_other_known_queue() -> None:
    assert plan([("a", 1)], 10, {}, 0, others=["b", "c"]) == {"a": (8, 8)}
    # a busy other queue keeps what it holds
    assert plan([("a", 1)], 10, {"b": 4}, 0) == {"a": (6, 6)}
    assert plan([("a", 1)], 10, {"b": 4}, 0, others=["b", "c"]) == {"a": (5, 5)}


def test_most_lets_a_queue_take_unused_shares_up_to_its_bound() -> None:
    shares = plan([("a", 1), ("b", 1), ("c", 1)], 9, {}, 0)
    assert shares == {"a": (3, 7), "b": (3, 7), "c": (3, 7)}


def test_fewer_slots_than_queues_rotates() -> None:
    queues = [("a", 1), ("b", 1), ("c", 1)]
    assert plan(queues, 2, {}, 0) == {"a": (1, 1), "b": (1, 1)}
    assert plan(queues, 2, {}, 1) == {"b": (1, 1), "c": (1, 1)}
    assert plan(queues, 2, {}, 2) == {"c": (1, 1), "a": (1, 1)}
    assert [s.name for s in plan_slots(queues, 2, {}, 2)] == ["c", "a"]


def test_concurrency_one_still_serves() -> None:
    assert plan([("a", 1), ("b", 1)], 1, {}, 0) == {"a": (1, 1)}
    assert plan([("a", 1), ("b", 1)], 1, {}, 1) == {"b": (1, 1)}


@pytest.mark.parametrize(
    ("queues", "concurrency"),
    [([], 4), ([("a", 1), ("a", 2)], 4), ([("a", 0)], 4), ([("a", 1)], -1)],
)
def test_caller_bugs_raise(queues: list[tuple[str, int]], concurrency: int) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the messages are covered by plan_shares' tests
        plan_slots(queues, concurrency, {}, 0)


# -- properties ----------------------------------------------------------------------------------

NAMES = ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7"]


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[tuple[str, int]], int, dict[str, int], list[str]]:
    """Queues to claim from, the worker's concurrency, what runs now, and other known queues."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    queues = [(name, draw(st.integers(1, 6))) for name in names]
    concurrency = draw(st.integers(1, 40))
    busy = draw(st.dictionaries(st.sampled_from(NAMES), st.integers(0, 10), max_size=5))
    others = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    assume(sum(busy.values()) <= concurrency)
    return queues, concurrency, busy, others


def bound(name: str, concurrency: int, busy: dict[str, int], known: set[str]) -> int:
    """The most ``name`` may hold: concurrency less one slot (or what it holds) per other."""
    kept = sum(max(1, busy.get(other, 0)) for other in known if other != name)
    return max(1, concurrency - kept)


@given(situations(), st.integers(-100, 100))
def test_properties(
    situation: tuple[list[tuple[str, int]], int, dict[str, int], list[str]], rotation: int
) -> None:
    queues, concurrency, busy, others = situation
    shares = plan_slots(queues, concurrency, busy, rotation, others)
    free = concurrency - sum(busy.values())
    given_ = {s.name: s.limit for s in shares}
    names = [name for name, _ in queues]
    known = set(names) | set(others) | {q for q, n in busy.items() if n > 0}
    caps = {name: bound(name, concurrency, busy, known) for name in names}
    held = {name: busy.get(name, 0) + given_.get(name, 0) for name in names}

    # Sums never exceed the free slots, and none are wasted while a queue has room.
    assert sum(given_.values()) <= free
    room = sum(max(0, caps[n] - busy.get(n, 0)) for n in names)
    assert sum(given_.values()) == min(free, room)
    # Only queues asked for, in rotated order, each with 1 or more.
    assert set(given_) <= set(names)
    assert all(s.limit >= 1 for s in shares)
    order = [names.index(s.name) for s in shares]
    start = rotation % len(names)
    assert order == sorted(order, key=lambda i: (i - start) % len(names))
    for share in shares:
        cap, running = caps[share.name], busy.get(share.name, 0)
        # A queue never holds more than its bound, nor may the store's second pass make it.
        assert running + share.limit <= cap
        assert share.most is not None
        assert share.limit <= share.most <= free
        assert running + share.most <= cap
    # Queues below quota first: when one ends below its quota (and had room for it), nobody
    # took slots beyond their own quota.
    quotas = dict.fromkeys(names, 1) | dict(plan_shares(queues, concurrency, rotation))
    starved = [n for n in names if held[n] < min(quotas[n], caps[n])]
    if starved:
        for name in given_:
            assert held[name] <= max(quotas[name], busy.get(name, 0))


@given(situations(), st.integers(0, 100))
def test_single_known_queue_gets_everything(
    situation: tuple[list[tuple[str, int]], int, dict[str, int], list[str]], rotation: int
) -> None:
    queues, concurrency, _, _ = situation
    name, weight = queues[0]
    running = min(concurrency, 3)
    shares = plan_slots([(name, weight)], concurrency, {name: running}, rotation)
    free = concurrency - running
    assert shares == ([QueueShare(name=name, limit=free, most=free)] if free else [])


@given(
    st.lists(
        st.tuples(st.sampled_from(NAMES), st.integers(1, 9)), min_size=2, unique_by=lambda q: q[0]
    ),
    st.data(),
)
def test_fewer_slots_than_queues_serves_every_queue_within_a_round(
    queues: list[tuple[str, int]], data: st.DataObject
) -> None:
    concurrency = data.draw(st.integers(1, len(queues) - 1))
    start = data.draw(st.integers(-50, 50))
    served = set()
    for rotation in range(start, start + len(queues)):
        served |= {s.name for s in plan_slots(queues, concurrency, {}, rotation)}
    assert served == {name for name, _ in queues}


def test_a_queue_the_plan_skipped_gets_a_spare_share_of_its_room() -> None:
    # Two slow runs busy, four slots: the plan gives the two free slots to the empty fast
    # queue (below its quota); slow may still hold a third, taken if fast leaves them.
    planned = plan_slots([("slow", 1), ("fast", 1)], 4, {"slow": 2}, 0)
    assert {s.name: (s.limit, s.most) for s in planned} == {"fast": (2, 2)}
    spare = spare_shares([("slow", 1), ("fast", 1)], 4, {"slow": 2}, planned)
    assert spare == [QueueShare(name="slow", limit=0, most=1)]
    # A queue at its bound gets none; nothing free, nothing spare.
    assert spare_shares([("slow", 1), ("fast", 1)], 4, {"slow": 3}, []) == [
        QueueShare(name="fast", limit=0, most=1)
    ]
    assert spare_shares([("slow", 1)], 4, {"slow": 4}, []) == []
