"""Fan-out: expanding broadcast and shards parents, map children, the reduce run, settling."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbus.distribution.fanout import (
    Pending,
    Settle,
    Tally,
    after_reduce,
    encode_reduce,
    expand,
    map_children,
    no_worker_error,
    no_worker_note,
    pending,
    reduce_run,
    settle,
    summary,
    with_broadcast_labels,
)
from cronbus.distribution.routing import LiveWorker
from cronbus.model import Children, FanOut, FanOutKind, NewRun, Overlap
from cronbus.states import RunState


def worker(id: str, *, labels: tuple[str, ...] = (), **fields: object) -> LiveWorker:
    """A live worker of namespace ``default`` serving ``default`` and knowing task ``t``."""
    base = LiveWorker(
        id=id,
        namespace="default",
        queues=("default",),
        labels=frozenset(labels),
        tasks=frozenset({"t"}),
    )
    return dataclasses.replace(base, **fields)


PARENT = NewRun(
    task="t",
    queue="default",
    args_json='[1, "two"]',
    kwargs_json='{"x": 3}',
    priority=7,
    eta=1_000.0,
    max_attempts=4,
    timeout=30.0,
    idempotency_key="once",
    route="round_robin",
    route_labels=("eu",),
    limit_key="default:t",
    limit_max=2,
    rate_key="default:t",
    rate_max=10,
    rate_period=60.0,
    job_id=12,
    fire_at=990.0,
    concurrency_key="job:12",
    overlap=Overlap.SKIP,
    namespace="default",
)
"""A parent with every field a child must drop or keep set to something."""


def fanned(kind: FanOutKind, **fields: object) -> NewRun:
    return dataclasses.replace(PARENT, fanout=FanOut(kind=kind, **fields))


def assert_plain_child(child: NewRun, parent_id: int) -> None:
    """What every child drops and keeps."""
    assert child.parent_id == parent_id
    assert child.fanout is None
    assert child.idempotency_key is None
    assert child.job_id is None
    assert child.fire_at is None
    assert child.concurrency_key is None
    assert child.overlap is Overlap.ALLOW
    for name in ("task", "queue", "args_json", "kwargs_json", "priority", "eta", "namespace"):
        assert getattr(child, name) == getattr(PARENT, name), name
    for name in ("max_attempts", "timeout", "limit_key", "limit_max", "rate_key", "rate_max"):
        assert getattr(child, name) == getattr(PARENT, name), name
    assert child.rate_period == PARENT.rate_period


# -- expand: broadcast ---------------------------------------------------------------------------


def test_broadcast_one_pinned_child_per_eligible_worker() -> None:
    workers = [
        worker("w3", labels=("eu",)),
        worker("w1", labels=("eu",)),
        worker("w2", labels=("eu",), tasks=frozenset({"other"})),
        worker("w4", labels=("eu",), namespace="shop"),
        worker("w5", labels=("eu",), queues=("emails",)),
        worker("w6", labels=("eu",), queues=("*",)),
        worker("w7"),  # lacks the parent's route label
    ]
    children = expand(40, fanned(FanOutKind.BROADCAST), workers)
    assert [c.target_worker for c in children] == ["w1", "w3", "w6"]
    assert [c.child_index for c in children] == [0, 1, 2]
    for child in children:
        assert_plain_child(child, 40)
        assert child.route == "pinned"
        assert child.shard_total is None
        assert child.route_key is None
        assert child.route_order == ()


def test_broadcast_labels_filter_and_add_to_route_labels() -> None:
    workers = [
        worker("a", labels=("eu", "gpu")),
        worker("b", labels=("eu",)),
        worker("c", labels=("gpu",)),
    ]
    children = expand(1, fanned(FanOutKind.BROADCAST, labels=("gpu", "eu")), workers)
    assert [c.target_worker for c in children] == ["a"]
    assert children[0].route_labels == ("eu", "gpu")


def test_broadcast_without_worker_is_empty_and_note_names_the_task() -> None:
    assert expand(1, fanned(FanOutKind.BROADCAST), []) == []
    assert no_worker_note("billing.close", "ops", 10.0) == (
        "no live worker serves task billing.close on queue ops (waited 10 s)"
    )
    error = no_worker_error("billing.close", "ops", 2.5)
    assert (error.type, error.message) == (
        "NoLiveWorker",
        "no live worker serves task billing.close on queue ops (waited 2.5 s)",
    )


def test_a_broadcast_without_children_waits_then_gives_up() -> None:
    assert pending(2, 100.0, 100.0, 10.0) is Pending.EXPAND
    assert pending(1, 100.0, 500.0, 10.0) is Pending.EXPAND  # late, but a worker is here
    assert pending(0, 100.0, 109.9, 10.0) is Pending.WAIT
    assert pending(0, 100.0, 110.0, 10.0) is Pending.GIVE_UP
    assert pending(0, 100.0, 100.0, 0.0) is Pending.GIVE_UP


def test_a_stored_broadcast_parent_keeps_its_labels_among_its_route_labels() -> None:
    parent = fanned(FanOutKind.BROADCAST, labels=("gpu", "eu"))
    stored = with_broadcast_labels(parent)
    assert stored.fanout is not None
    assert stored.fanout.labels == ()
    workers = [worker("a", labels=("eu", "gpu")), worker("b", labels=("eu",))]
    # Expanded from the stored row later, it finds the same workers with the same labels.
    assert expand(1, stored, workers) == expand(1, parent, workers)
    shards = fanned(FanOutKind.SHARDS, shards=2)
    assert with_broadcast_labels(shards) is shards


# -- expand: shards ------------------------------------------------------------------------------


def test_shards_children_keep_routes_and_limits() -> None:
    children = expand(9, fanned(FanOutKind.SHARDS, shards=4), [worker("w1")])
    assert [c.child_index for c in children] == [0, 1, 2, 3]
    assert {c.shard_total for c in children} == {4}
    for child in children:
        assert_plain_child(child, 9)
        assert child.route == "round_robin"
        assert child.route_labels == ("eu",)
        assert child.target_worker is None


def test_shards_do_not_need_workers() -> None:
    assert len(expand(9, fanned(FanOutKind.SHARDS, shards=3), [])) == 3


def test_expand_without_fanout_or_map_is_empty() -> None:
    assert expand(1, PARENT, [worker("a")]) == []
    assert expand(1, fanned(FanOutKind.MAP), [worker("a")]) == []


# -- map_children --------------------------------------------------------------------------------


def test_map_children_indexes_and_arguments() -> None:
    calls = [("[1]", "{}"), ("[2]", '{"k": 1}'), ("[3]", "{}")]
    children = map_children(5, PARENT, 1_000, calls)
    assert [c.child_index for c in children] == [1_000, 1_001, 1_002]
    assert [(c.args_json, c.kwargs_json) for c in children] == calls
    for child in children:
        assert child.parent_id == 5
        assert child.fanout is None
        assert child.idempotency_key is None
        assert child.job_id is None
        assert child.concurrency_key is None
        assert child.overlap is Overlap.ALLOW
        assert child.shard_total is None
        assert child.priority == 7


def test_map_children_none() -> None:
    assert map_children(5, PARENT, 0, []) == []


# -- encode_reduce / reduce_run ------------------------------------------------------------------


def test_reduce_round_trip() -> None:
    template = dataclasses.replace(PARENT, task="sum", route="hash", route_key="k")
    spec = encode_reduce(template)
    json.loads(spec)  # plain JSON text
    made = reduce_run(spec, 77, ["1", None, '{"a": [2]}', '"x"'], 2_000.0)
    assert made.args_json == '[[1,null,{"a": [2]},"x"]]'
    assert json.loads(made.args_json) == [[1, None, {"a": [2]}, "x"]]
    assert made.kwargs_json == "{}"
    assert made.parent_id == 77
    assert made.child_index is None
    assert made.eta == 2_000.0
    kept = [
        "task",
        "queue",
        "priority",
        "max_attempts",
        "timeout",
        "namespace",
        "route",
        "route_key",
        "route_labels",
        "route_order",
        "limit_key",
        "limit_max",
        "rate_key",
        "rate_max",
        "rate_period",
    ]
    for name in kept:
        assert getattr(made, name) == getattr(template, name), name
    for name in ("idempotency_key", "job_id", "fire_at", "concurrency_key", "fanout"):
        assert getattr(made, name) is None, name
    assert made.route_labels == ("eu",)  # a tuple again, as NewRun holds it


def test_reduce_of_no_results() -> None:
    made = reduce_run(encode_reduce(PARENT), 1, [], 0.0)
    assert made.args_json == "[[]]"


@given(st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans())))
def test_reduce_args_are_the_results_in_order(values: list[object]) -> None:
    results = [None if v is None else json.dumps(v) for v in values]
    made = reduce_run(encode_reduce(PARENT), 3, results, 1.0)
    assert json.loads(made.args_json) == [values]


# -- settle --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "ended", "succeeded", "has_reduce", "reduce", "expected"),
    [
        (3, 0, 0, False, None, Settle.WAIT),
        (3, 2, 2, False, None, Settle.WAIT),
        (3, 2, 1, True, None, Settle.WAIT),
        (3, 3, 3, False, None, Settle.SUCCEED),
        (3, 3, 2, False, None, Settle.FAIL),
        (3, 3, 0, True, None, Settle.FAIL),
        (3, 3, 3, True, None, Settle.REDUCE),
        (3, 3, 3, True, 99, Settle.SUCCEED),
        (0, 0, 0, False, None, Settle.SUCCEED),
        (0, 0, 0, True, None, Settle.REDUCE),
    ],
)
def test_settle(
    total: int, ended: int, succeeded: int, has_reduce: bool, reduce: int | None, expected: Settle
) -> None:
    tally = Tally(
        total=total, ended=ended, succeeded=succeeded, has_reduce=has_reduce, reduce_run=reduce
    )
    assert settle(tally) is expected


def test_after_reduce() -> None:
    assert after_reduce(RunState.SUCCEEDED) is Settle.SUCCEED
    for state in (RunState.DEAD, RunState.CANCELLED, RunState.SKIPPED):
        assert after_reduce(state) is Settle.FAIL


# -- summary -------------------------------------------------------------------------------------


def test_summary() -> None:
    done = Children(kind=FanOutKind.SHARDS, total=4, ended=4, succeeded=3)
    assert summary(done) == "3 of 4 children succeeded (shards)"
    going = Children(kind=FanOutKind.MAP, total=10, ended=4, succeeded=4, reduce_run_id=None)
    assert summary(going) == "4 of 10 children ended, 4 succeeded (map)"
    reduced = Children(kind=FanOutKind.MAP, total=1, ended=1, succeeded=1, reduce_run_id=8)
    assert summary(reduced) == "1 of 1 child succeeded (map); reduce run 8"
    empty = Children(kind=FanOutKind.BROADCAST, total=0, ended=0, succeeded=0, note="no one")
    assert summary(empty) == "no children (broadcast): no one"
