"""The store's part of a worker serving every queue (issue 9, item 11): which queues hold runs a
claim could take, and when the next scheduled run of any queue is due. Every store, unchanged."""

from __future__ import annotations

from cronbus.fairness import plan_shares
from cronbus.model import ClaimRequest, NewRun, Outcome, QueueShare
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store

T0 = 1_700_000_000.0


def new(queue: str, eta: float = T0) -> NewRun:
    return NewRun(task="t", queue=queue, eta=eta)


def every(names: list[str], limit: int, rotation: int = 0) -> ClaimRequest:
    """A claim shared among ``names`` as a worker serving every queue shares it."""
    shares = plan_shares([(name, 1) for name in names], limit, rotation)
    return ClaimRequest(
        worker_id="w1",
        queues=[QueueShare(name=name, limit=n) for name, n in shares],
        limit=limit,
        lease_seconds=30.0,
    )


async def test_an_empty_store_has_no_ready_queue(store: Store) -> None:
    assert await store.ready_queues(T0) == []
    assert await store.next_eta(None) is None


async def test_ready_queues_are_those_with_queued_runs_by_name(store: Store) -> None:
    await store.defer([new("zeta"), new("alpha"), new("alpha"), new("m-1.x_y")], T0)
    assert await store.ready_queues(T0) == ["alpha", "m-1.x_y", "zeta"]


async def test_scheduled_runs_make_their_queue_ready_once_due(store: Store) -> None:
    await store.defer([new("later", eta=T0 + 10), new("now")], T0)
    assert await store.ready_queues(T0) == ["now"]
    assert await store.ready_queues(T0 + 9.999) == ["now"]
    # Due but not yet promoted (no claim ran): listed, so that a claim asks for it.
    assert await store.ready_queues(T0 + 10) == ["later", "now"]


async def test_running_and_finished_runs_make_no_queue_ready(store: Store) -> None:
    await store.defer([new("a"), new("b")], T0)
    (a,) = await store.claim(every(["a"], 1), T0)
    assert (await store.get_run(a.run_id)).state is RunState.RUNNING
    assert await store.ready_queues(T0) == ["b"]
    ok = Outcome(
        run_id=a.run_id,
        attempt_id=a.attempt_id,
        outcome=AttemptOutcome.SUCCEEDED,
        result_json="null",
    )
    assert await store.complete([ok], T0 + 1) == [True]
    (b,) = await store.claim(every(["b"], 1), T0 + 1)
    assert await store.ready_queues(T0 + 1) == []
    assert b.queue == "b"


async def test_next_eta_of_every_queue_is_the_earliest_scheduled_run(store: Store) -> None:
    await store.defer([new("a", eta=T0 + 30), new("b", eta=T0 + 20), new("c")], T0)
    assert await store.next_eta(None) == T0 + 20
    assert await store.next_eta(["a"]) == T0 + 30
    assert await store.next_eta(["c"]) is None


async def test_a_lone_queue_gets_a_share_of_a_claim_beside_a_deep_one(store: Store) -> None:
    await store.defer([new("big") for _ in range(1000)], T0)
    (lone,) = await store.defer([new("lone")], T0 + 1)
    names = await store.ready_queues(T0 + 1)
    assert names == ["big", "lone"]
    claimed = await store.claim(every(names, 4), T0 + 1)
    assert lone.id in {c.run_id for c in claimed}
    assert len(claimed) == 4  # the lone queue's unused share went to the big one
    assert await store.ready_queues(T0 + 1) == ["big"]


async def test_ready_queues_reads_many_queues(store: Store) -> None:
    names = [f"q{i:03d}" for i in range(150)]
    await store.defer([new(name) for name in names for _ in range(3)], T0)
    assert await store.ready_queues(T0) == names
