"""Routing: strategies, eligibility, rendezvous hashing, target assignment, edge validation."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbus.distribution.routing import (
    TARGETED,
    TURN_WRAP,
    LiveWorker,
    Strategy,
    assign_targets,
    check_failover,
    check_labels,
    check_route,
    choose,
    eligible,
    needs_load,
    needs_workers,
    rendezvous,
)
from cronbus.errors import InvalidArgumentError
from cronbus.model import FanOut, FanOutKind, NewRun


def worker(
    id: str,
    *,
    namespace: str = "default",
    queues: tuple[str, ...] = ("default",),
    labels: tuple[str, ...] = (),
    tasks: tuple[str, ...] = ("t",),
    load: int = 0,
) -> LiveWorker:
    """A live worker with handy defaults."""
    return LiveWorker(
        id=id,
        namespace=namespace,
        queues=queues,
        labels=frozenset(labels),
        tasks=frozenset(tasks),
        load=load,
    )


def run(route: str = "any", **fields: object) -> NewRun:
    """A run of task ``t`` on queue ``default`` with the given route fields."""
    base = NewRun(task="t", queue="default", eta=0.0, route=route)
    return dataclasses.replace(base, **fields)


def ids(workers: list[LiveWorker]) -> list[str]:
    return [w.id for w in workers]


def pick(strategy: Strategy, candidates: list[LiveWorker], **kw: object) -> str | None:
    """choose() with neutral defaults."""
    args: dict[str, object] = {"key": None, "order": (), "turn": 0, "rng": random.Random(1)}
    args.update(kw)
    return choose(strategy, candidates, **args)


# -- strategies and TARGETED ---------------------------------------------------------------------


def test_strategy_values() -> None:
    assert [s.value for s in Strategy] == [
        "any",
        "round_robin",
        "random",
        "hash",
        "least_busy",
        "failover",
        "labels",
        "pinned",
    ]
    assert Strategy("hash") == "hash"


def test_targeted_strategies() -> None:
    assert {s.value for s in TARGETED} == {
        "round_robin",
        "random",
        "hash",
        "least_busy",
        "failover",
    }


# -- eligible ------------------------------------------------------------------------------------


def test_eligible_filters_by_namespace_task_queue_and_labels_sorted_by_id() -> None:
    workers = [
        worker("z-ok", labels=("gpu", "big")),
        worker("a-ok", labels=("gpu",)),
        worker("other-ns", namespace="shop", labels=("gpu",)),
        worker("no-task", tasks=("u",), labels=("gpu",)),
        worker("no-queue", queues=("emails",), labels=("gpu",)),
        worker("no-label"),
        worker("every-queue", queues=("*",), labels=("gpu",)),
    ]
    assert ids(eligible(run(route_labels=("gpu",)), workers)) == ["a-ok", "every-queue", "z-ok"]


def test_eligible_needs_every_label() -> None:
    workers = [worker("a", labels=("gpu",)), worker("b", labels=("gpu", "big"))]
    assert ids(eligible(run(route_labels=("gpu", "big")), workers)) == ["b"]
    assert ids(eligible(run(), workers)) == ["a", "b"]


def test_eligible_queue_listed_among_others() -> None:
    workers = [worker("a", queues=("x", "default")), worker("b", queues=("x",))]
    assert ids(eligible(run(), workers)) == ["a"]


def test_eligible_namespace() -> None:
    workers = [worker("a"), worker("b", namespace="shop")]
    assert ids(eligible(run(namespace="shop"), workers)) == ["b"]


def test_eligible_none() -> None:
    assert eligible(run(), []) == []
    assert eligible(run(task="unknown"), [worker("a")]) == []


# -- rendezvous hashing --------------------------------------------------------------------------


def test_rendezvous_empty_and_single() -> None:
    assert rendezvous("k", []) is None
    assert rendezvous("k", ["only"]) == "only"


def test_rendezvous_is_stable_and_order_free() -> None:
    for key in ("a", "customer-17", "", "é"):
        assert rendezvous(key, ["w1", "w2", "w3"]) == rendezvous(key, ["w3", "w1", "w2"])


def test_rendezvous_adding_a_worker_moves_about_a_quarter_only_to_it() -> None:
    keys = [f"customer-{i}" for i in range(10_000)]
    before = {key: rendezvous(key, ["w1", "w2", "w3"]) for key in keys}
    after = {key: rendezvous(key, ["w1", "w2", "w3", "w4"]) for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert 0.22 <= len(moved) / len(keys) <= 0.28
    assert all(after[key] == "w4" for key in moved)


def test_rendezvous_removing_a_worker_moves_only_its_keys() -> None:
    keys = [f"k{i}" for i in range(5_000)]
    before = {key: rendezvous(key, ["w1", "w2", "w3", "w4"]) for key in keys}
    after = {key: rendezvous(key, ["w1", "w2", "w4"]) for key in keys}
    for key in keys:
        if before[key] != "w3":
            assert after[key] == before[key]
        else:
            assert after[key] != "w3"


def test_rendezvous_spreads_evenly() -> None:
    counts = Counter(rendezvous(f"order-{i}", ["a", "b", "c"]) for i in range(9_000))
    assert set(counts) == {"a", "b", "c"}
    assert all(2_700 <= n <= 3_300 for n in counts.values()), counts


@given(st.text(max_size=30), st.lists(st.text(min_size=1, max_size=8), min_size=1, unique=True))
def test_rendezvous_picks_one_of_the_ids(key: str, names: list[str]) -> None:
    assert rendezvous(key, names) in names


# -- choose --------------------------------------------------------------------------------------


def test_choose_no_candidates_is_none() -> None:
    for strategy in Strategy:
        assert pick(strategy, []) is None


def test_choose_untargeted_strategies_give_none() -> None:
    workers = [worker("a"), worker("b")]
    for strategy in (Strategy.ANY, Strategy.LABELS, Strategy.PINNED):
        assert pick(strategy, workers) is None


def test_choose_round_robin_cycles_in_id_order() -> None:
    workers = [worker("c"), worker("a"), worker("b")]
    picks = [pick(Strategy.ROUND_ROBIN, workers, turn=t) for t in range(7)]
    assert picks == ["a", "b", "c", "a", "b", "c", "a"]


def test_choose_random_uses_the_rng_and_covers_all() -> None:
    workers = [worker("a"), worker("b"), worker("c")]
    rng = random.Random(7)
    seen = Counter(pick(Strategy.RANDOM, workers, rng=rng) for _ in range(3_000))
    assert set(seen) == {"a", "b", "c"}
    assert all(n > 800 for n in seen.values())
    first = [pick(Strategy.RANDOM, workers, rng=random.Random(3)) for _ in range(5)]
    assert len(set(first)) == 1  # same seed, same draw


def test_choose_hash_matches_rendezvous_and_none_key_is_empty() -> None:
    workers = [worker("a"), worker("b"), worker("c")]
    assert pick(Strategy.HASH, workers, key="x") == rendezvous("x", ["a", "b", "c"])
    assert pick(Strategy.HASH, workers, key=None) == rendezvous("", ["a", "b", "c"])


def test_choose_least_busy_lowest_load_ties_by_id() -> None:
    workers = [worker("c", load=1), worker("b", load=3), worker("a", load=1)]
    assert pick(Strategy.LEAST_BUSY, workers) == "a"
    assert pick(Strategy.LEAST_BUSY, [worker("x", load=5), worker("y", load=0)]) == "y"


def test_choose_failover_order_ids_and_labels_skipping_dead_ones() -> None:
    live = [worker("b", labels=("gpu",)), worker("a", labels=("gpu",)), worker("c")]
    order = ("dead-1", "label:tpu", "label:gpu", "c")
    assert pick(Strategy.FAILOVER, live, order=order) == "a"  # smallest id carrying gpu
    assert pick(Strategy.FAILOVER, live, order=("dead-1", "c", "a")) == "c"
    assert pick(Strategy.FAILOVER, live, order=("dead-1", "label:tpu")) is None
    assert pick(Strategy.FAILOVER, live, order=()) is None


# -- assign_targets ------------------------------------------------------------------------------


def test_assign_round_robin_persists_through_turns() -> None:
    workers = [worker("w2"), worker("w1"), worker("w3")]
    runs = [run("round_robin") for _ in range(4)]
    out, turns = assign_targets(runs, workers, {})
    assert [r.target_worker for r in out] == ["w1", "w2", "w3", "w1"]
    assert turns == {("default", "t"): 4}
    out2, turns2 = assign_targets(runs[:2], workers, turns)
    assert [r.target_worker for r in out2] == ["w2", "w3"]
    assert turns2 == {("default", "t"): 6}


def test_assign_round_robin_turn_per_namespace_and_task() -> None:
    workers = [worker("a", tasks=("t", "u")), worker("b", tasks=("t", "u"))]
    runs = [run("round_robin"), run("round_robin", task="u"), run("round_robin")]
    out, turns = assign_targets(runs, workers, {("default", "u"): 1})
    assert [r.target_worker for r in out] == ["a", "b", "b"]
    assert turns == {("default", "t"): 2, ("default", "u"): 2}


def test_assign_round_robin_turn_wraps() -> None:
    out, turns = assign_targets(
        [run("round_robin")], [worker("a")], {("default", "t"): TURN_WRAP - 1}
    )
    assert out[0].target_worker == "a"
    assert turns == {("default", "t"): 0}


def test_assign_least_busy_counts_its_own_picks() -> None:
    workers = [worker("a", load=2), worker("b", load=0), worker("c", load=1)]
    out, turns = assign_targets([run("least_busy") for _ in range(5)], workers, {})
    # loads a2 b0 c1 -> b(1) -> b/c tie at 1, b first -> c ... every pick the least loaded
    assert [r.target_worker for r in out] == ["b", "b", "c", "a", "b"]
    assert turns == {}


def test_assign_hash_same_key_same_worker() -> None:
    workers = [worker("a"), worker("b"), worker("c")]
    runs = [run("hash", route_key=f"k{i % 3}") for i in range(9)]
    out, _ = assign_targets(runs, workers, {})
    for i, r in enumerate(out):
        assert r.target_worker == rendezvous(f"k{i % 3}", ["a", "b", "c"])


def test_assign_random_uses_given_rng() -> None:
    workers = [worker("a"), worker("b"), worker("c")]
    runs = [run("random") for _ in range(20)]
    one, _ = assign_targets(runs, workers, {}, random.Random(5))
    two, _ = assign_targets(runs, workers, {}, random.Random(5))
    assert [r.target_worker for r in one] == [r.target_worker for r in two]
    assert {r.target_worker for r in one} <= {"a", "b", "c"}


def test_assign_failover() -> None:
    workers = [worker("a", labels=("gpu",)), worker("b")]
    out, _ = assign_targets([run("failover", route_order=("gone", "b", "a"))], workers, {})
    assert out[0].target_worker == "b"


def test_assign_leaves_untargeted_and_already_targeted_runs_alone() -> None:
    workers = [worker("a"), worker("b")]
    runs = [
        run("any"),
        run("labels", route_labels=("x",)),
        run("pinned", target_worker="b"),
        run("round_robin", target_worker="b"),
    ]
    out, turns = assign_targets(runs, workers, {})
    assert all(o is r for o, r in zip(out, runs, strict=True))
    assert turns == {}


def test_assign_without_candidates_keeps_target_none_and_turn() -> None:
    runs = [run("round_robin"), run("least_busy"), run("hash", route_key="k")]
    out, turns = assign_targets(runs, [worker("x", tasks=("other",))], {("default", "t"): 3})
    assert [r.target_worker for r in out] == [None, None, None]
    assert turns == {}


def test_assign_respects_labels_for_targeted_runs() -> None:
    workers = [worker("a"), worker("b", labels=("gpu",)), worker("c", labels=("gpu",))]
    out, _ = assign_targets(
        [run("round_robin", route_labels=("gpu",)) for _ in range(3)], workers, {}
    )
    assert [r.target_worker for r in out] == ["b", "c", "b"]


def test_assign_unknown_stored_route_is_refused() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        assign_targets([run("sideways")], [worker("a")], {})
    assert caught.value.field == "route"


@given(
    st.lists(st.sampled_from(["round_robin", "least_busy", "random", "hash", "any"]), max_size=30),
    st.lists(st.integers(0, 5), min_size=0, max_size=5),
)
def test_assign_targets_only_eligible_workers(routes: list[str], loads: list[int]) -> None:
    workers = [worker(f"w{i}", load=n) for i, n in enumerate(loads)]
    workers.append(worker("stranger", tasks=("other",)))
    runs = [run(r, route_key="k") for r in routes]
    out, _ = assign_targets(runs, workers, {}, random.Random(0))
    for before, after in zip(runs, out, strict=True):
        if before.route == "any" or len(loads) == 0:
            assert after.target_worker is None
        else:
            assert after.target_worker in {f"w{i}" for i in range(len(loads))}


# -- needs_workers / needs_load ------------------------------------------------------------------


def test_needs_workers() -> None:
    assert not needs_workers([])
    assert not needs_workers([run("any"), run("labels", route_labels=("x",))])
    assert not needs_workers([run("round_robin", target_worker="a")])
    assert needs_workers([run("any"), run("hash", route_key="k")])
    assert needs_workers([run(fanout=FanOut(kind=FanOutKind.SHARDS, shards=2))])


def test_needs_load() -> None:
    assert not needs_load([run("round_robin"), run("any")])
    assert not needs_load([run("least_busy", target_worker="a")])
    assert needs_load([run("any"), run("least_busy")])


# -- check_route ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"route": "any"}, Strategy.ANY),
        ({"route": "round_robin"}, Strategy.ROUND_ROBIN),
        ({"route": "random", "labels": ["gpu"]}, Strategy.RANDOM),
        ({"route": "hash", "route_key": "customer"}, Strategy.HASH),
        ({"route": "hash", "route_key": len}, Strategy.HASH),
        ({"route": "least_busy"}, Strategy.LEAST_BUSY),
        ({"route": "failover", "failover": ["w1", "label:gpu"]}, Strategy.FAILOVER),
        ({"route": "labels", "labels": ("gpu", "big")}, Strategy.LABELS),
    ],
)
def test_check_route_accepts(kwargs: dict[str, object], expected: Strategy) -> None:
    assert check_route(**kwargs) is expected


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"route": "sideways"}, "route", "must be one of"),
        ({"route": 3}, "route", "must be one of"),
        ({"route": "sideways", "field": "options.route"}, "options.route", "must be one of"),
        ({"route": "pinned"}, "route", "broadcast"),
        ({"route": "hash"}, "route_key", "route_key"),
        ({"route": "failover"}, "failover", "failover=["),
        ({"route": "failover", "failover": []}, "failover", "failover=["),
        ({"route": "labels"}, "labels", "labels=["),
        ({"route": "labels", "labels": []}, "labels", "labels=["),
        ({"route": "any", "labels": ["has space"]}, "labels", "whitespace"),
        ({"route": "any", "labels": [""]}, "labels", "non-empty"),
        ({"route": "any", "labels": [3]}, "labels", "non-empty string"),
        ({"route": "labels", "labels": "gpu"}, "labels", "list of label names"),
        ({"route": "failover", "failover": "w1"}, "failover", "list of worker ids"),
        ({"route": "failover", "failover": ["label:"]}, "failover", "non-empty"),
        ({"route": "failover", "failover": ["label:a b"]}, "failover", "whitespace"),
        ({"route": "failover", "failover": ["w\x00"]}, "failover", "control"),
    ],
)
def test_check_route_refuses(kwargs: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_route(**kwargs)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_check_labels_and_failover_normalise() -> None:
    assert check_labels(None) == ()
    assert check_labels(["gpu", "big", "gpu"]) == ("gpu", "big")
    assert check_failover(None) == ()
    assert check_failover(["a", "label:gpu", "a"]) == ("a", "label:gpu")
