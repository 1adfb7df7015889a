"""The store contract for distribution: task-aware claims, routing, limits and fan-out.

Every backend must pass these, unchanged (DESIGN11). Time moves by hand (``now`` = T0 + ...),
except where rate windows meet ``next_eta``, which reads the wall clock.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from cronbus.distribution.fanout import map_children
from cronbus.distribution.routing import rendezvous
from cronbus.errors import InvalidArgumentError, LeaseLostError
from cronbus.model import (
    ClaimedRun,
    ClaimRequest,
    ErrorInfo,
    FanOut,
    FanOutKind,
    Fire,
    JobSpec,
    NewRun,
    Outcome,
    QueueShare,
    Run,
    WorkerInfo,
    WorkerState,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store
from cronbus.store.logic import WORKER_GONE, job_run

T0 = 1_700_000_000.0
LEASE = 30.0


def new(task: str = "t", queue: str = "q", eta: float = T0, **kw: object) -> NewRun:
    return NewRun(task=task, queue=queue, eta=eta, **kw)  # type: ignore[arg-type]


def claim_request(
    worker: str = "w1",
    limit: int = 10,
    tasks: Sequence[str] | None = None,
    labels: Sequence[str] = (),
    queue: str = "q",
    most: int | None = None,
) -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker,
        queues=[QueueShare(name=queue, limit=limit, most=most)],
        limit=limit,
        lease_seconds=LEASE,
        tasks=tasks,
        labels=labels,
    )


def ok(c: ClaimedRun, result: str = "1") -> Outcome:
    return Outcome(
        run_id=c.run_id,
        attempt_id=c.attempt_id,
        outcome=AttemptOutcome.SUCCEEDED,
        result_json=result,
        fence=c.fence,
    )


def dead(c: ClaimedRun) -> Outcome:
    return Outcome(
        run_id=c.run_id,
        attempt_id=c.attempt_id,
        outcome=AttemptOutcome.FAILED,
        error=ErrorInfo(type="ValueError", message="boom"),
        fence=c.fence,
    )


def worker(
    worker_id: str,
    *,
    tasks: Sequence[str] = ("t",),
    labels: Sequence[str] = (),
    queues: Sequence[str] = ("q",),
    heartbeat_at: float = T0,
    lease_seconds: float = LEASE,
    state: WorkerState = WorkerState.ALIVE,
) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="h",
        pid=1,
        queues=list(queues),
        labels=list(labels),
        concurrency=4,
        version="0",
        started_at=T0 - 10,
        heartbeat_at=heartbeat_at,
        state=state,
        tasks=list(tasks),
        lease_seconds=lease_seconds,
    )


async def register(store: Store, *infos: WorkerInfo) -> None:
    for info in infos:
        await store.register_worker(info)


async def targets(store: Store, ids: Sequence[int]) -> list[str | None]:
    return [run.target_worker for run in await store.get_runs(ids)]


async def defer_ids(store: Store, runs: Sequence[NewRun], now: float = T0) -> list[int]:
    return [d.id for d in await store.defer(runs, now)]


async def children_of(store: Store, parent: int) -> list[Run]:
    return await store.list_children(parent, None, 1000)


# -- task-aware claims ----------------------------------------------------------------------------


async def test_claim_takes_only_tasks_the_worker_knows(store: Store) -> None:
    a, b = await defer_ids(store, [new("a"), new("b")])
    claimed = await store.claim(claim_request(tasks=["a", "c"]), T0)
    assert [c.run_id for c in claimed] == [a]
    assert await store.claim(claim_request(tasks=[]), T0) == []
    (other,) = await store.claim(claim_request(tasks=None), T0)
    assert other.run_id == b


async def test_claim_leaves_runs_targeted_at_other_workers(store: Store) -> None:
    (run_id,) = await defer_ids(store, [new(target_worker="w2")])
    assert await store.claim(claim_request("w1"), T0) == []
    (claimed,) = await store.claim(claim_request("w2"), T0)
    assert claimed.run_id == run_id


async def test_claim_needs_every_route_label(store: Store) -> None:
    (run_id,) = await defer_ids(store, [new(route="labels", route_labels=("gpu", "eu"))])
    assert await store.claim(claim_request("w1"), T0) == []
    assert await store.claim(claim_request("w1", labels=["gpu"]), T0) == []
    (claimed,) = await store.claim(claim_request("w2", labels=["eu", "x", "gpu"]), T0)
    assert claimed.run_id == run_id


async def test_plain_runs_are_claimed_by_workers_with_labels(store: Store) -> None:
    (run_id,) = await defer_ids(store, [new()])
    (claimed,) = await store.claim(claim_request(labels=["gpu"], tasks=["t"]), T0)
    assert claimed.run_id == run_id


async def test_queue_share_most_bounds_the_second_pass(store: Store) -> None:
    await defer_ids(store, [new() for _ in range(10)])
    request = ClaimRequest(
        worker_id="w1",
        queues=[QueueShare(name="q", limit=2, most=3), QueueShare(name="empty", limit=2)],
        limit=8,
        lease_seconds=LEASE,
    )
    assert len(await store.claim(request, T0)) == 3


async def test_a_spare_share_takes_what_the_planned_queues_leave_up_to_its_room(
    store: Store,
) -> None:
    await defer_ids(store, [new(queue="slow") for _ in range(4)])
    request = ClaimRequest(
        worker_id="w1",
        queues=[QueueShare(name="fast", limit=2, most=2), QueueShare(name="slow", limit=0, most=1)],
        limit=2,
        lease_seconds=LEASE,
    )
    # The fast queue is empty: its two slots are left, and the slow queue takes one (its room).
    (claimed,) = await store.claim(request, T0)
    assert claimed.queue == "slow"


# -- routing --------------------------------------------------------------------------------------


async def test_round_robin_spreads_over_live_workers_in_turn(store: Store) -> None:
    await register(
        store,
        worker("w1"),
        worker("w2"),
        worker("w3"),
        worker("w4", heartbeat_at=T0 - 100),  # silent for longer than its lease
        worker("w5", state=WorkerState.DRAINING),
        worker("w6", tasks=["other"]),
    )
    ids = await defer_ids(store, [new(route="round_robin") for _ in range(4)])
    ids += await defer_ids(store, [new(route="round_robin")])
    ids += await defer_ids(store, [new(route="round_robin")])
    assert await targets(store, ids) == ["w1", "w2", "w3", "w1", "w2", "w3"]
    (plain,) = await defer_ids(store, [new()])
    assert await targets(store, [plain]) == [None]


async def test_hash_routing_is_stable_per_key(store: Store) -> None:
    await register(store, worker("w1"), worker("w2"), worker("w3"))
    keys = [f"customer-{i}" for i in range(12)]
    ids = await defer_ids(store, [new(route="hash", route_key=key) for key in keys])
    again = await defer_ids(store, [new(route="hash", route_key=key) for key in keys])
    first = await targets(store, ids)
    assert first == await targets(store, again)
    assert first == [rendezvous(key, ["w1", "w2", "w3"]) for key in keys]
    assert len(set(first)) > 1


async def test_failover_takes_the_first_live_entry(store: Store) -> None:
    await register(store, worker("w1"), worker("w2", labels=["gpu"]), worker("w3", labels=["gpu"]))
    order = ("w9", "label:gpu", "w1")
    (first,) = await defer_ids(store, [new(route="failover", route_order=order)])
    (second,) = await defer_ids(store, [new(route="failover", route_order=("w1", "w2"))])
    (none,) = await defer_ids(store, [new(route="failover", route_order=("w9",))])
    assert await targets(store, [first, second, none]) == ["w2", "w1", None]


async def test_least_busy_counts_running_and_targeted_runs(store: Store) -> None:
    await register(store, worker("w1"), worker("w2"), worker("w3"))
    await defer_ids(store, [new(), new()])
    assert len(await store.claim(claim_request("w1", limit=2), T0)) == 2
    await defer_ids(store, [new(target_worker="w2")])
    ids = await defer_ids(store, [new(route="least_busy") for _ in range(4)])
    assert await targets(store, ids) == ["w3", "w2", "w3", "w1"]


async def test_random_routing_picks_an_eligible_worker(store: Store) -> None:
    await register(store, worker("w1"), worker("w2", tasks=["other"]), worker("w3"))
    ids = await defer_ids(store, [new(route="random") for _ in range(20)])
    assert set(await targets(store, ids)) <= {"w1", "w3"}


async def test_routing_narrows_by_labels_and_queue(store: Store) -> None:
    await register(
        store,
        worker("w1", labels=["gpu"]),
        worker("w2"),
        worker("w3", labels=["gpu"], queues=["other"]),
    )
    ids = await defer_ids(
        store, [new(route="round_robin", route_labels=("gpu",)) for _ in range(3)]
    )
    assert await targets(store, ids) == ["w1", "w1", "w1"]


async def test_no_candidate_leaves_the_target_empty(store: Store) -> None:
    await register(store, worker("w1", tasks=["other"]))
    (run_id,) = await defer_ids(store, [new(route="round_robin")])
    assert await targets(store, [run_id]) == [None]
    (claimed,) = await store.claim(claim_request("w7"), T0)
    assert claimed.run_id == run_id


async def test_reroute_moves_runs_of_a_worker_that_left(store: Store) -> None:
    await register(store, worker("w1"), worker("w2"))
    ids = await defer_ids(store, [new(route="round_robin") for _ in range(4)])
    assert await targets(store, ids) == ["w1", "w2", "w1", "w2"]
    assert await store.reroute(T0 + 1) == 0
    await store.set_worker_state("w1", WorkerState.STOPPED, T0 + 1)
    assert await store.reroute(T0 + 2) == 2
    assert await targets(store, ids) == ["w2", "w2", "w2", "w2"]
    # Silent for longer than its lease: gone as well; nobody left, so any worker may run them.
    assert await store.reroute(T0 + LEASE + 5) == 4
    assert await targets(store, ids) == [None, None, None, None]
    assert len(await store.claim(claim_request("w9"), T0 + LEASE + 5)) == 4


# -- limits ---------------------------------------------------------------------------------------


async def test_concurrency_limit_is_never_exceeded_and_runs_go_in_order(store: Store) -> None:
    limited: dict[str, Any] = {"limit_key": "default:t", "limit_max": 2}
    ids = await defer_ids(store, [new(**limited) for _ in range(5)])
    (free,) = await defer_ids(store, [new("u")])
    first = await store.claim(claim_request(limit=10), T0)
    assert [c.run_id for c in first] == [*ids[:2], free]
    assert await store.claim(claim_request("w2", limit=10), T0) == []
    await store.complete([ok(first[0])], T0 + 1)
    second = await store.claim(claim_request("w2", limit=10), T0 + 1)
    assert [c.run_id for c in second] == [ids[2]]
    await store.complete([ok(first[1]), ok(second[0])], T0 + 2)
    third = await store.claim(claim_request(limit=10), T0 + 2)
    assert [c.run_id for c in third] == ids[3:]


async def test_concurrency_limit_counts_runs_per_key(store: Store) -> None:
    runs = [new(limit_key=f"default:t:{key}", limit_max=1) for key in ("a", "a", "b", "b")]
    ids = await defer_ids(store, runs)
    claimed = await store.claim(claim_request(limit=10), T0)
    assert [c.run_id for c in claimed] == [ids[0], ids[2]]


async def test_rate_window_caps_claims_and_resets(store: Store) -> None:
    period = 60.0
    start = T0 - T0 % period
    rated: dict[str, Any] = {"rate_key": "default:t", "rate_max": 2, "rate_period": period}
    ids = await defer_ids(store, [new(eta=start, **rated) for _ in range(5)], start)
    first = await store.claim(claim_request(limit=10), start + 1)
    assert [c.run_id for c in first] == ids[:2]
    await store.complete([ok(c) for c in first], start + 2)
    assert await store.claim(claim_request(limit=10), start + 30) == []
    second = await store.claim(claim_request(limit=10), start + period)
    assert [c.run_id for c in second] == ids[2:4]
    third = await store.claim(claim_request(limit=10), start + 2 * period + 5)
    assert [c.run_id for c in third] == ids[4:]


async def test_next_eta_wakes_idle_workers_when_a_full_window_ends(store: Store) -> None:
    period = 7 * 86_400.0  # one window for the whole test, however slow the machine
    now = time.time()
    end = math.floor(now / period) * period + period
    rated: dict[str, Any] = {"rate_key": "default:t", "rate_max": 1, "rate_period": period}
    await defer_ids(store, [new(eta=now, **rated), new(eta=now, **rated)], now)
    assert await store.next_eta(["q"]) is None
    assert len(await store.claim(claim_request(limit=10), now)) == 1
    assert await store.next_eta(["q"]) == pytest.approx(end)
    assert await store.next_eta(None) == pytest.approx(end)
    assert await store.next_eta(["q"], "elsewhere") is None


# -- fan-out --------------------------------------------------------------------------------------


async def test_broadcast_makes_one_pinned_child_per_live_worker(store: Store) -> None:
    await register(
        store,
        worker("w1"),
        worker("w2", labels=["gpu"]),
        worker("w3", tasks=["other"]),
        worker("w4", heartbeat_at=T0 - 100),
        worker("w5", labels=["gpu"]),
    )
    (parent,) = await defer_ids(store, [new(fanout=FanOut(kind=FanOutKind.BROADCAST))])
    run = await store.get_run(parent)
    assert run.state is RunState.WAITING
    assert run.children is not None
    assert (run.children.kind, run.children.total, run.children.ended) == ("broadcast", 3, 0)
    kids = await children_of(store, parent)
    assert [(c.child_index, c.target_worker, c.route) for c in kids] == [
        (0, "w1", "pinned"),
        (1, "w2", "pinned"),
        (2, "w5", "pinned"),
    ]
    assert all(c.parent_id == parent and c.state is RunState.QUEUED for c in kids)
    (gpu,) = await defer_ids(
        store, [new(fanout=FanOut(kind=FanOutKind.BROADCAST, labels=("gpu",)))]
    )
    assert [c.target_worker for c in await children_of(store, gpu)] == ["w2", "w5"]


async def test_broadcast_without_live_workers_waits_then_is_a_dead_letter(store: Store) -> None:
    # Issue 30 item 13: it once ended at once (a fire before workers registered was lost); it
    # never succeeds with no children.
    await register(store, worker("w1", tasks=["other"]))
    (parent,) = await defer_ids(store, [new(fanout=FanOut(kind=FanOutKind.BROADCAST))])
    run = await store.get_run(parent)
    assert run.state is RunState.WAITING
    assert run.children is not None
    assert run.children.total == 0
    assert await store.settle_broadcasts(T0 + 4.9, 5.0) == 0  # within its wait
    assert (await store.get_run(parent)).state is RunState.WAITING
    assert await store.settle_broadcasts(T0 + 5.0, 5.0) == 1
    run = await store.get_run(parent)
    assert run.state is RunState.DEAD
    message = "no live worker serves task t on queue q (waited 5 s)"
    assert run.error is not None
    assert (run.error.type, run.error.message) == ("NoLiveWorker", message)
    assert run.children is not None
    assert (run.children.total, run.children.note) == (0, message)
    assert await children_of(store, parent) == []
    assert await store.settle_broadcasts(T0 + 6, 5.0) == 0  # ended: nothing more


async def test_a_broadcast_no_worker_came_for_is_requeued_to_wait_again(store: Store) -> None:
    (parent,) = await defer_ids(store, [new(fanout=FanOut(kind=FanOutKind.BROADCAST))])
    assert await store.settle_broadcasts(T0 + 5, 5.0) == 1  # dead: no live worker came
    assert await store.requeue([parent], T0 + 100) == [parent]
    run = await store.get_run(parent)
    assert run.state is RunState.WAITING
    assert run.children is not None
    assert run.children.note == ""
    assert await store.settle_broadcasts(T0 + 104, 5.0) == 0  # its wait counts from now
    await register(store, worker("w1", heartbeat_at=T0 + 104))
    assert await store.settle_broadcasts(T0 + 104.5, 5.0) == 1
    (child,) = await children_of(store, parent)
    assert (child.target_worker, child.state) == ("w1", RunState.QUEUED)
    # And one requeued with no worker ends dead again, a wait after its requeue.
    (other,) = await defer_ids(
        store, [new(fanout=FanOut(kind=FanOutKind.BROADCAST, labels=("x",)))]
    )
    assert await store.settle_broadcasts(T0 + 200, 5.0) == 1
    assert await store.requeue(None, T0 + 300) == [other]
    assert await store.settle_broadcasts(T0 + 304, 5.0) == 0
    assert await store.settle_broadcasts(T0 + 305, 5.0) == 1
    run = await store.get_run(other)
    assert run.state is RunState.DEAD
    assert run.error is not None
    assert run.error.message.endswith("(waited 5 s)")


async def test_broadcast_waiting_for_workers_expands_when_one_registers(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.BROADCAST, labels=("gpu",))
    (parent,) = await defer_ids(store, [new(fanout=fan, args_json="[3]")])
    await register(
        store,
        worker("w1", labels=["gpu"], heartbeat_at=T0 + 2),
        worker("w2", heartbeat_at=T0 + 2),  # no gpu: not one of the broadcast's workers
    )
    assert await store.settle_broadcasts(T0 + 3, 5.0) == 1
    (child,) = await children_of(store, parent)
    assert (child.target_worker, child.state, child.args) == ("w1", RunState.QUEUED, [3])
    (claimed,) = await store.claim(claim_request("w1", labels=["gpu"]), T0 + 4)
    await store.complete([ok(claimed)], T0 + 5)
    run = await store.get_run(parent)
    assert run.state is RunState.SUCCEEDED
    assert run.children is not None
    assert (run.children.total, run.children.succeeded) == (1, 1)
    assert await store.settle_broadcasts(T0 + 60, 5.0) == 0


async def test_broadcast_child_of_a_worker_that_left_ends_dead(store: Store) -> None:
    await register(store, worker("w1"), worker("w2"))
    (parent,) = await defer_ids(store, [new(fanout=FanOut(kind=FanOutKind.BROADCAST))])
    (c1,) = await store.claim(claim_request("w1"), T0 + 1)
    await store.complete([ok(c1)], T0 + 2)
    await store.set_worker_state("w2", WorkerState.STOPPED, T0 + 3)
    assert await store.reroute(T0 + 4) == 1
    kids = await children_of(store, parent)
    assert [c.state for c in kids] == [RunState.SUCCEEDED, RunState.DEAD]
    assert kids[1].error is not None
    assert kids[1].error.type == WORKER_GONE
    assert "w2" in kids[1].error.message
    run = await store.get_run(parent)
    assert run.state is RunState.DEAD
    assert run.children is not None
    assert (run.children.ended, run.children.succeeded) == (2, 1)


async def test_shards_tell_each_child_its_place(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=4)
    (parent,) = await defer_ids(store, [new(fanout=fan, args_json="[7]")])
    claimed = await store.claim(claim_request(limit=10), T0)
    assert sorted((c.parent_id, c.child_index, c.shard_total) for c in claimed) == [
        (parent, i, 4) for i in range(4)
    ]
    assert all(c.args == [7] for c in claimed)
    assert (await store.get_run(parent)).state is RunState.WAITING


async def test_parent_ends_with_its_last_child(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=3)
    good, bad = await defer_ids(store, [new(fanout=fan), new(fanout=fan, task="u")])
    claimed = await store.claim(claim_request(limit=10), T0)
    by_parent = {p: [c for c in claimed if c.parent_id == p] for p in (good, bad)}
    await store.complete([ok(c) for c in by_parent[good][:2]], T0 + 1)
    assert (await store.get_run(good)).state is RunState.WAITING
    await store.complete([ok(by_parent[good][2]), dead(by_parent[bad][0])], T0 + 2)
    run = await store.get_run(good)
    assert run.state is RunState.SUCCEEDED
    assert run.finished_at == T0 + 2
    assert run.children is not None
    assert (run.children.ended, run.children.succeeded) == (3, 3)
    assert (await store.get_run(bad)).state is RunState.WAITING
    await store.complete([ok(c) for c in by_parent[bad][1:]], T0 + 3)
    run = await store.get_run(bad)
    assert run.state is RunState.DEAD
    assert run.children is not None
    assert (run.children.ended, run.children.succeeded) == (3, 2)


async def test_reaped_child_that_dies_is_counted(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=1)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    await store.claim(claim_request(), T0)
    assert len(await store.reap(T0 + LEASE + 1, max_lost=1)) == 1
    run = await store.get_run(parent)
    assert run.state is RunState.DEAD
    assert run.children is not None
    assert run.children.ended == 1


async def _running_parent(store: Store) -> ClaimedRun:
    await defer_ids(store, [new("body")])
    (parent,) = await store.claim(claim_request(tasks=["body"]), T0)
    return parent


def _items(parent: ClaimedRun, start: int, values: Sequence[int]) -> list[NewRun]:
    calls = [(json.dumps([v]), "{}") for v in values]
    return map_children(parent.run_id, new("item"), start, calls)


async def test_map_children_are_made_once_per_index(store: Store) -> None:
    parent = await _running_parent(store)
    assert await store.spawn(parent, _items(parent, 0, [1, 2, 3]), None, T0 + 1) == 3
    assert await store.spawn(parent, _items(parent, 0, [1, 2, 3]), None, T0 + 1) == 0
    assert await store.spawn(parent, _items(parent, 2, [3, 4]), None, T0 + 1) == 1
    kids = await children_of(store, parent.run_id)
    assert [(c.child_index, c.args) for c in kids] == [(0, [1]), (1, [2]), (2, [3]), (3, [4])]
    run = await store.get_run(parent.run_id)
    assert run.children is not None
    assert (run.children.kind, run.children.total) == ("map", 4)


async def test_map_parent_waits_for_children_then_succeeds(store: Store) -> None:
    parent = await _running_parent(store)
    await store.spawn(parent, _items(parent, 0, [1, 2]), None, T0 + 1)
    await store.complete([ok(parent, '"body done"')], T0 + 2)
    run = await store.get_run(parent.run_id)
    assert run.state is RunState.WAITING
    assert run.lease_owner is None
    kids = await store.claim(claim_request(tasks=["item"]), T0 + 3)
    await store.complete([ok(kids[0])], T0 + 4)
    assert (await store.get_run(parent.run_id)).state is RunState.WAITING
    await store.complete([ok(kids[1])], T0 + 5)
    assert (await store.get_run(parent.run_id)).state is RunState.SUCCEEDED


async def test_map_parent_whose_children_ended_first_settles_at_once(store: Store) -> None:
    parent = await _running_parent(store)
    await store.spawn(parent, _items(parent, 0, [1]), None, T0 + 1)
    (kid,) = await store.claim(claim_request(tasks=["item"]), T0 + 2)
    await store.complete([dead(kid)], T0 + 3)
    assert (await store.get_run(parent.run_id)).state is RunState.RUNNING
    await store.complete([ok(parent)], T0 + 4)
    assert (await store.get_run(parent.run_id)).state is RunState.DEAD


async def test_spawn_after_the_lease_was_reaped_is_refused(store: Store) -> None:
    parent = await _running_parent(store)
    await store.reap(T0 + LEASE + 1, max_lost=5)
    with pytest.raises(LeaseLostError):
        await store.spawn(parent, _items(parent, 0, [1]), None, T0 + LEASE + 2)
    assert await children_of(store, parent.run_id) == []


async def test_reduce_gets_the_results_in_index_order(store: Store) -> None:
    parent = await _running_parent(store)
    reduce = new("total", args_json="[]")
    await store.spawn(parent, _items(parent, 0, [1, 2, 3]), reduce, T0 + 1)
    await store.complete([ok(parent)], T0 + 2)
    kids = sorted(await store.claim(claim_request(tasks=["item"]), T0 + 3), key=lambda c: -c.run_id)
    for kid in kids:  # last index first: the order of ends must not matter
        assert (await store.get_run(parent.run_id)).state is RunState.WAITING
        await store.complete([ok(kid, json.dumps({"i": kid.child_index}))], T0 + 4)
    run = await store.get_run(parent.run_id)
    assert run.state is RunState.WAITING
    assert run.children is not None
    assert run.children.reduce_run_id is not None
    reduce_run = await store.get_run(run.children.reduce_run_id)
    assert (reduce_run.task, reduce_run.parent_id, reduce_run.child_index) == (
        "total",
        parent.run_id,
        None,
    )
    assert reduce_run.args == [[{"i": 0}, {"i": 1}, {"i": 2}]]
    listed = await children_of(store, parent.run_id)
    assert [c.id for c in listed][-1] == reduce_run.id
    assert len(listed) == 4
    (claimed,) = await store.claim(claim_request(tasks=["total"]), T0 + 5)
    await store.complete([ok(claimed, "6")], T0 + 6)
    run = await store.get_run(parent.run_id)
    assert run.state is RunState.SUCCEEDED
    assert run.children is not None
    assert (run.children.ended, run.children.succeeded) == (3, 3)


async def test_failed_reduce_fails_the_parent(store: Store) -> None:
    parent = await _running_parent(store)
    await store.spawn(parent, _items(parent, 0, [1]), new("total"), T0 + 1)
    (kid,) = await store.claim(claim_request(tasks=["item"]), T0 + 2)
    await store.complete([ok(kid)], T0 + 3)
    await store.complete([ok(parent)], T0 + 4)
    (claimed,) = await store.claim(claim_request(tasks=["total"]), T0 + 5)
    assert claimed.parent_id == parent.run_id
    assert claimed.args == [[1]]
    await store.complete([dead(claimed)], T0 + 6)
    assert (await store.get_run(parent.run_id)).state is RunState.DEAD


async def test_cancel_of_a_waiting_parent_cancels_its_children(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=3)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    (running,) = await store.claim(claim_request(limit=1), T0)
    assert await store.cancel(parent, T0 + 1) is RunState.CANCELLED
    kids = await children_of(store, parent)
    assert [c.state for c in kids] == [
        RunState.CANCELLING,
        RunState.CANCELLED,
        RunState.CANCELLED,
    ]
    run = await store.get_run(parent)
    assert run.children is not None
    assert run.children.ended == 2
    await store.complete([ok(running)], T0 + 2)
    run = await store.get_run(parent)
    assert run.state is RunState.CANCELLED
    assert run.children is not None
    assert run.children.ended == 3


async def test_requeue_of_a_child_revives_its_parent(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=2)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    first, second = await store.claim(claim_request(limit=2), T0)
    await store.complete([ok(first), dead(second)], T0 + 1)
    assert (await store.get_run(parent)).state is RunState.DEAD
    assert await store.requeue([second.run_id], T0 + 2) == sorted([second.run_id, parent])
    run = await store.get_run(parent)
    assert run.state is RunState.WAITING
    assert run.finished_at is None
    assert run.children is not None
    assert (run.children.ended, run.children.succeeded) == (1, 1)
    (again,) = await store.claim(claim_request(), T0 + 3)
    await store.complete([ok(again)], T0 + 4)
    run = await store.get_run(parent)
    assert run.state is RunState.SUCCEEDED
    assert run.children is not None
    assert (run.children.ended, run.children.succeeded) == (2, 2)


async def test_requeue_of_a_parent_requeues_its_failed_children(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=3)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    a, b, c = await store.claim(claim_request(limit=3), T0)
    await store.complete([ok(a), dead(b), dead(c)], T0 + 1)
    assert await store.requeue([parent], T0 + 2) == sorted([parent, b.run_id, c.run_id])
    run = await store.get_run(parent)
    assert run.state is RunState.WAITING
    assert run.children is not None
    assert run.children.ended == 1
    assert [k.state for k in await children_of(store, parent)] == [
        RunState.SUCCEEDED,
        RunState.QUEUED,
        RunState.QUEUED,
    ]


async def test_requeue_of_every_dead_run_revives_parents_instead_of_running_them(
    store: Store,
) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=1)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    (kid,) = await store.claim(claim_request(), T0)
    await store.complete([dead(kid)], T0 + 1)
    assert await store.requeue(None, T0 + 2) == sorted([parent, kid.run_id])
    assert (await store.get_run(parent)).state is RunState.WAITING
    (again,) = await store.claim(claim_request(), T0 + 3)
    assert again.run_id == kid.run_id


async def test_list_children_pages_by_index(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=5)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    pages, after = [], None
    while True:
        page = await store.list_children(parent, after, 2)
        pages.append([c.child_index for c in page])
        if len(page) < 2:
            break
        after = page[-1].child_index
    assert pages == [[0, 1], [2, 3], [4]]
    assert await store.list_children(parent + 1000, None, 10) == []


async def test_job_fan_out_is_stored_and_fired(store: Store) -> None:
    trigger = {"kind": "every", "seconds": 10.0}
    job = await store.put_job(
        JobSpec(name="j", task="t", trigger=trigger, queue="q", shards=2), T0, T0
    )
    assert (job.spec.broadcast, job.spec.shards) == (False, 2)
    other = await store.put_job(
        JobSpec(name="b", task="t", trigger=trigger, broadcast=True), T0, T0
    )
    assert (await store.get_job("b")).spec.broadcast
    assert other.spec.shards is None
    plan = Fire(job_id=job.id, expected=T0, next_fire_at=T0 + 10, runs=[job_run(job, T0, T0)])
    assert await store.fire([plan], T0) == [True]
    claimed = await store.claim(claim_request(limit=10), T0)
    assert [c.child_index for c in sorted(claimed, key=lambda c: c.run_id)] == [0, 1]
    (parent_id,) = {c.parent_id for c in claimed}
    assert parent_id is not None
    parent = await store.get_run(parent_id)
    assert (parent.job_id, parent.state) == (job.id, RunState.WAITING)


# -- the registry ---------------------------------------------------------------------------------


async def test_workers_keep_their_lease(store: Store) -> None:
    await register(store, worker("w1", lease_seconds=12.5))
    (info,) = await store.list_workers(T0)
    assert info.lease_seconds == 12.5


async def test_unknown_tasks_are_those_no_live_worker_knows(store: Store) -> None:
    await register(
        store,
        worker("w1", tasks=["a"]),
        worker("w2", tasks=["b"], heartbeat_at=T0 - 100),
        worker("w3", tasks=["c"], state=WorkerState.STOPPED),
    )
    await defer_ids(store, [new("a"), new("b"), new("c"), new("d", eta=T0 + 60)])
    await defer_ids(store, [new("b", namespace="other")])
    assert await store.unknown_tasks(T0) == ["b", "c"]
    await register(store, worker("w2", tasks=["b", "c"], heartbeat_at=T0))
    assert await store.unknown_tasks(T0) == []
    assert await store.unknown_tasks(T0, "other") == ["b"]


async def test_counters_match_the_children_states(store: Store) -> None:
    fan = FanOut(kind=FanOutKind.SHARDS, shards=6)
    (parent,) = await defer_ids(store, [new(fanout=fan)])
    claimed = await store.claim(claim_request(limit=4), T0)
    await store.complete([ok(claimed[0]), dead(claimed[1])], T0 + 1)
    await store.reap(T0 + LEASE + 5, max_lost=1)
    kids = await children_of(store, parent)
    states = Counter(k.state for k in kids)
    run = await store.get_run(parent)
    assert run.children is not None
    assert run.children.ended == sum(n for s, n in states.items() if s.terminal)
    assert run.children.succeeded == states[RunState.SUCCEEDED]


async def test_shards_are_routed_as_they_go_in(store: Store) -> None:
    await register(store, worker("w1"), worker("w2"))
    fan = FanOut(kind=FanOutKind.SHARDS, shards=4)
    (parent,) = await defer_ids(store, [new(fanout=fan, route="round_robin")])
    assert await targets(store, [parent]) == [None]
    kids = await children_of(store, parent)
    assert [k.target_worker for k in kids] == ["w1", "w2", "w1", "w2"]


async def test_cancel_of_a_parent_reaches_its_reduce_run(store: Store) -> None:
    parent = await _running_parent(store)
    await store.spawn(parent, _items(parent, 0, [1]), new("total"), T0 + 1)
    (kid,) = await store.claim(claim_request(tasks=["item"]), T0 + 2)
    await store.complete([ok(kid), ok(parent)], T0 + 3)
    (reducing,) = await store.claim(claim_request(tasks=["total"]), T0 + 4)
    assert await store.cancel(parent.run_id, T0 + 5) is RunState.CANCELLED
    assert (await store.get_run(reducing.run_id)).state is RunState.CANCELLING
    await store.complete([dead(reducing)], T0 + 6)
    assert (await store.get_run(reducing.run_id)).state is RunState.CANCELLED
    assert (await store.get_run(parent.run_id)).state is RunState.CANCELLED


async def test_spawn_refuses_children_without_their_place(store: Store) -> None:
    parent = await _running_parent(store)
    stray = new("item", parent_id=parent.run_id)
    with pytest.raises(InvalidArgumentError):
        await store.spawn(parent, [stray], None, T0 + 1)
    other = ClaimedRun(
        run_id=parent.run_id,
        attempt_id=parent.attempt_id,
        attempt=1,
        number=1,
        fence=parent.fence + 1,
        task="body",
        queue="q",
        args_json="[]",
        kwargs_json="{}",
        max_attempts=1,
        timeout=None,
        eta=T0,
    )
    with pytest.raises(LeaseLostError):
        await store.spawn(other, _items(parent, 0, [1]), None, T0 + 1)
    assert await children_of(store, parent.run_id) == []
