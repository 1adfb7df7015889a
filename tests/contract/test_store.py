"""The store contract: every backend must pass these, unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronbus.errors import InvalidTransitionError, RunNotFoundError
from cronbus.model import (
    ClaimedRun,
    ClaimRequest,
    ErrorInfo,
    Lane,
    NewRun,
    Outcome,
    QueueShare,
    RunFilter,
    WorkerInfo,
    WorkerState,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import RUNS_CHANNEL, Store, open_store

T0 = 1_700_000_000.0
LEASE = 30.0


def new(task: str = "t", queue: str = "q", eta: float = T0, **kw: object) -> NewRun:
    return NewRun(task=task, queue=queue, eta=eta, **kw)  # type: ignore[arg-type]


def request(*queues: tuple[str, int], limit: int | None = None, worker: str = "w1") -> ClaimRequest:
    shares = [QueueShare(name=q, limit=n) for q, n in queues]
    return ClaimRequest(
        worker_id=worker,
        queues=shares,
        limit=limit if limit is not None else sum(n for _, n in queues),
        lease_seconds=LEASE,
    )


def ok(c: ClaimedRun, result: str = "1") -> Outcome:
    return Outcome(
        run_id=c.run_id,
        attempt_id=c.attempt_id,
        outcome=AttemptOutcome.SUCCEEDED,
        result_json=result,
    )


def failed(c: ClaimedRun, retry_at: float | None = None) -> Outcome:
    return Outcome(
        run_id=c.run_id,
        attempt_id=c.attempt_id,
        outcome=AttemptOutcome.FAILED,
        error=ErrorInfo(type="ValueError", message="boom", traceback="tb"),
        retry_at=retry_at,
    )


async def test_defer_creates_queued_and_scheduled_runs(store: Store) -> None:
    done = await store.defer([new(), new(eta=T0 + 60)], T0)
    assert [d.created for d in done] == [True, True]
    assert done[1].id > done[0].id
    first, second = await store.get_run(done[0].id), await store.get_run(done[1].id)
    assert (first.state, second.state) == (RunState.QUEUED, RunState.SCHEDULED)
    assert first.args == []
    assert first.kwargs == {}


async def test_defer_keeps_payloads(store: Store) -> None:
    (d,) = await store.defer([new(args_json='[1, "a"]', kwargs_json='{"k": [true]}')], T0)
    run = await store.get_run(d.id)
    assert run.args == [1, "a"]
    assert run.kwargs == {"k": [True]}


async def test_idempotency_key_returns_the_existing_run(store: Store) -> None:
    (a,) = await store.defer([new(idempotency_key="k1")], T0)
    b, c = await store.defer([new(idempotency_key="k1"), new(idempotency_key="k2")], T0)
    assert a.created
    assert not b.created
    assert c.created
    assert b.id == a.id
    assert c.id != a.id
    assert sum((await store.count_runs()).values()) == 2


async def test_duplicate_keys_in_one_batch_make_one_run(store: Store) -> None:
    a, b = await store.defer([new(idempotency_key="x"), new(idempotency_key="x")], T0)
    assert a.id == b.id
    assert a.created
    assert not b.created


async def test_bulk_defer_returns_ids_in_order(store: Store) -> None:
    runs = [new(task=f"t{i}") for i in range(500)]
    done = await store.defer(runs, T0)
    assert len({d.id for d in done}) == 500
    fetched = {r.id: r.task for r in await store.get_runs([d.id for d in done])}
    assert [fetched[d.id] for d in done] == [f"t{i}" for i in range(500)]


async def test_claim_takes_a_lease_and_creates_an_attempt(store: Store) -> None:
    (d,) = await store.defer([new(max_attempts=3, timeout=5.0)], T0)
    (c,) = await store.claim(request(("q", 10)), T0 + 1)
    assert (c.run_id, c.attempt, c.max_attempts, c.timeout) == (d.id, 1, 3, 5.0)
    run = await store.get_run(d.id)
    assert run.state is RunState.RUNNING
    assert run.lease_owner == "w1"
    assert run.lease_expires == T0 + 1 + LEASE
    (attempt,) = await store.list_attempts(d.id)
    assert (attempt.id, attempt.number, attempt.worker_id) == (c.attempt_id, 1, "w1")
    assert attempt.outcome is None
    assert await store.claim(request(("q", 10)), T0 + 1) == []


async def test_claim_respects_limit_and_priority(store: Store) -> None:
    done = await store.defer([new(priority=p) for p in (0, 5, 1, 5)], T0)
    claimed = await store.claim(request(("q", 3)), T0)
    assert [c.run_id for c in claimed] == [done[1].id, done[3].id, done[2].id]


async def test_scheduled_runs_are_claimed_only_when_due(store: Store) -> None:
    (d,) = await store.defer([new(eta=T0 + 10)], T0)
    assert await store.next_eta(["q"]) == T0 + 10
    assert await store.next_eta(["other"]) is None
    assert await store.claim(request(("q", 5)), T0 + 9.999) == []
    (c,) = await store.claim(request(("q", 5)), T0 + 10)
    assert c.run_id == d.id


async def test_claim_serves_every_queue_in_one_batch(store: Store) -> None:
    await store.defer([new(queue="big") for _ in range(2000)], T0)
    (small,) = await store.defer([new(queue="small")], T0 + 1)
    claimed = await store.claim(request(("big", 8), ("small", 8)), T0 + 2)
    assert small.id in {c.run_id for c in claimed}
    assert len(claimed) == 16  # the small queue's unused share went to the big one


async def test_claim_skips_runs_pinned_to_another_worker(store: Store) -> None:
    (mine,) = await store.defer([new(target_worker="w2")], T0)
    assert await store.claim(request(("q", 5), worker="w1"), T0) == []
    (c,) = await store.claim(request(("q", 5), worker="w2"), T0)
    assert c.run_id == mine.id


async def test_complete_success_records_result(store: Store) -> None:
    (d,) = await store.defer([new()], T0)
    (c,) = await store.claim(request(("q", 1)), T0)
    assert await store.complete([ok(c, '{"x": 1}')], T0 + 2) == [True]
    run = await store.get_run(d.id)
    assert run.state is RunState.SUCCEEDED
    assert run.result == {"x": 1}
    assert run.finished_at == T0 + 2
    assert run.lease_owner is None
    (attempt,) = await store.list_attempts(d.id)
    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert attempt.finished_at == T0 + 2


async def test_completion_is_fenced_by_attempt(store: Store) -> None:
    (d,) = await store.defer([new()], T0)
    (old,) = await store.claim(request(("q", 1), worker="late"), T0)
    assert await store.reap(T0 + LEASE + 1, max_lost=10) == [d.id]
    (new_claim,) = await store.claim(request(("q", 1), worker="w2"), T0 + LEASE + 2)
    assert new_claim.attempt_id != old.attempt_id
    assert await store.complete([failed(old)], T0 + LEASE + 3) == [False]
    run = await store.get_run(d.id)
    assert run.state is RunState.RUNNING
    assert run.lease_owner == "w2"
    assert await store.complete([ok(new_claim)], T0 + LEASE + 4) == [True]
    assert (await store.get_run(d.id)).state is RunState.SUCCEEDED
    assert await store.complete([ok(old)], T0 + LEASE + 5) == [False]


async def test_failure_with_retry_goes_to_the_retry_lane(store: Store) -> None:
    (d,) = await store.defer([new(max_attempts=2)], T0)
    (c,) = await store.claim(request(("q", 1)), T0)
    assert await store.complete([failed(c, retry_at=T0 + 5)], T0 + 1) == [True]
    run = await store.get_run(d.id)
    assert (run.state, run.eta, run.lane) == (RunState.SCHEDULED, T0 + 5, Lane.RETRY)
    assert run.error == ErrorInfo(type="ValueError", message="boom", traceback="tb")
    (again,) = await store.claim(request(("q", 1)), T0 + 5)
    assert again.attempt == 2


async def test_fresh_runs_go_before_retries_until_retries_age(store: Store) -> None:
    (retry,) = await store.defer([new()], T0)
    (c,) = await store.claim(request(("q", 1)), T0)
    await store.complete([failed(c, retry_at=T0 + 1)], T0)
    (fresh,) = await store.defer([new()], T0 + 2)
    (first,) = await store.claim(request(("q", 1)), T0 + 3)
    assert first.run_id == fresh.id
    (fresh2,) = await store.defer([new(eta=T0 + 3)], T0 + 3)
    assert await store.age_retries(T0 + 100, after=60) == 1
    (second,) = await store.claim(request(("q", 1)), T0 + 100)
    assert second.run_id == retry.id  # aged into the fresh lane, older than fresh2
    assert fresh2.id != retry.id


async def test_failure_without_retry_is_dead(store: Store) -> None:
    (d,) = await store.defer([new()], T0)
    (c,) = await store.claim(request(("q", 1)), T0)
    await store.complete([failed(c)], T0 + 1)
    run = await store.get_run(d.id)
    assert run.state is RunState.DEAD
    assert run.finished_at == T0 + 1
    dead = await store.list_runs(RunFilter(states=[RunState.DEAD]))
    assert [r.id for r in dead] == [d.id]


async def test_requeue_gives_dead_runs_a_fresh_budget(store: Store) -> None:
    a, b = await store.defer([new(max_attempts=1), new()], T0)
    for c in await store.claim(request(("q", 2)), T0):
        await store.complete([failed(c)], T0)
    assert await store.requeue([a.id], T0 + 1) == [a.id]
    assert (await store.get_run(a.id)).state is RunState.QUEUED
    (c,) = await store.claim(request(("q", 1)), T0 + 2)
    assert (c.run_id, c.attempt) == (a.id, 1)
    assert await store.requeue(None, T0 + 3) == [b.id]
    assert await store.requeue([a.id], T0 + 3) == []  # running, not dead


async def test_lost_outcome_requeues_without_using_a_retry(store: Store) -> None:
    (d,) = await store.defer([new()], T0)
    (c,) = await store.claim(request(("q", 1)), T0)
    lost = Outcome(
        run_id=c.run_id, attempt_id=c.attempt_id, outcome=AttemptOutcome.LOST, counts=False
    )
    assert await store.complete([lost], T0 + 1) == [True]
    assert (await store.get_run(d.id)).state is RunState.QUEUED
    (again,) = await store.claim(request(("q", 1)), T0 + 2)
    assert again.attempt == 1
    attempts = await store.list_attempts(d.id)
    assert [a.number for a in attempts] == [1, 2]


async def test_heartbeat_renews_leases_and_reports_cancels(store: Store) -> None:
    a, b = await store.defer([new(), new()], T0)
    claimed = await store.claim(request(("q", 2)), T0)
    assert await store.cancel(b.id, T0 + 1) is RunState.CANCELLING
    held = await store.heartbeat("w1", T0 + 20, LEASE)
    assert {h.attempt_id for h in held} == {c.attempt_id for c in claimed}
    assert {h.run_id for h in held if h.cancelling} == {b.id}
    assert await store.reap(T0 + LEASE + 1, max_lost=10) == []
    assert (await store.get_run(a.id)).lease_expires == T0 + 20 + LEASE


async def test_reap_requeues_and_gives_up_after_max_lost(store: Store) -> None:
    (d,) = await store.defer([new()], T0)
    now = T0
    for _ in range(2):
        (_c,) = await store.claim(request(("q", 1)), now)
        now += LEASE + 1
        assert await store.reap(now, max_lost=3) == [d.id]
        assert (await store.get_run(d.id)).state is RunState.QUEUED
    await store.claim(request(("q", 1)), now)
    assert await store.reap(now + LEASE + 1, max_lost=3) == [d.id]
    run = await store.get_run(d.id)
    assert run.state is RunState.DEAD
    assert run.error is not None
    assert "lost 3 times" in run.error.message
    outcomes = [a.outcome for a in await store.list_attempts(d.id)]
    assert outcomes == [AttemptOutcome.LOST] * 3


async def test_cancel(store: Store) -> None:
    a, b, c = await store.defer([new(), new(eta=T0 + 100), new()], T0)
    assert await store.cancel(a.id, T0) is RunState.CANCELLED
    assert await store.cancel(b.id, T0) is RunState.CANCELLED
    (claimed,) = await store.claim(request(("q", 1)), T0)
    assert claimed.run_id == c.id
    assert await store.cancel(c.id, T0) is RunState.CANCELLING
    with pytest.raises(InvalidTransitionError):
        await store.cancel(a.id, T0)
    with pytest.raises(RunNotFoundError):
        await store.cancel(9999, T0)
    stopped = Outcome(
        run_id=claimed.run_id, attempt_id=claimed.attempt_id, outcome=AttemptOutcome.CANCELLED
    )
    assert await store.complete([stopped], T0 + 1) == [True]
    assert (await store.get_run(c.id)).state is RunState.CANCELLED


async def test_expired_cancelling_run_ends_cancelled(store: Store) -> None:
    (d,) = await store.defer([new()], T0)
    await store.claim(request(("q", 1)), T0)
    await store.cancel(d.id, T0)
    assert await store.reap(T0 + LEASE + 1, max_lost=10) == [d.id]
    assert (await store.get_run(d.id)).state is RunState.CANCELLED


async def test_list_and_count(store: Store) -> None:
    done = await store.defer([new(task="a"), new(task="b", queue="other"), new(task="a")], T0)
    assert [r.id for r in await store.list_runs(RunFilter(task="a"))] == [done[2].id, done[0].id]
    assert [r.id for r in await store.list_runs(RunFilter(queue="other"))] == [done[1].id]
    assert len(await store.list_runs(RunFilter(limit=1))) == 1
    older = await store.list_runs(RunFilter(before_id=done[2].id))
    assert [r.id for r in older] == [done[1].id, done[0].id]
    assert await store.count_runs() == {RunState.QUEUED: 3}
    with pytest.raises(RunNotFoundError):
        await store.get_run(12345)


async def test_worker_registry(store: Store) -> None:
    info = WorkerInfo(
        id="w1",
        host="h",
        pid=1,
        queues=["q"],
        concurrency=4,
        version="0",
        started_at=T0,
        heartbeat_at=T0,
    )
    await store.register_worker(info)
    await store.defer([new()], T0)
    await store.claim(request(("q", 1)), T0)
    (w,) = await store.list_workers(T0 + 1)
    assert (w.id, w.state, len(w.running), list(w.queues)) == ("w1", WorkerState.ALIVE, 1, ["q"])
    await store.heartbeat("w1", T0 + 20, LEASE)
    (w,) = await store.list_workers(T0 + 40)
    assert w.state is WorkerState.ALIVE
    (w,) = await store.list_workers(T0 + 100)
    assert w.state is WorkerState.LOST
    await store.set_worker_state("w1", WorkerState.STOPPED, T0 + 100)
    (w,) = await store.list_workers(T0 + 1000)
    assert w.state is WorkerState.STOPPED


async def test_a_worker_is_lost_by_its_own_registered_lease(store: Store) -> None:
    # Whoever reads the registry, the worker's own lease decides (cronbus.liveness).
    short = WorkerInfo(
        id="w-short",
        host="h",
        pid=1,
        queues=["q"],
        concurrency=1,
        version="0",
        started_at=T0,
        heartbeat_at=T0,
        lease_seconds=5.0,
    )
    await store.register_worker(short)
    await store.register_worker(replace(short, id="w-long", lease_seconds=60.0))
    states = {w.id: w.state for w in await store.list_workers(T0 + 5)}
    assert states == {"w-short": WorkerState.ALIVE, "w-long": WorkerState.ALIVE}
    states = {w.id: w.state for w in await store.list_workers(T0 + 5.5)}
    assert states == {"w-short": WorkerState.LOST, "w-long": WorkerState.ALIVE}


async def test_silent_workers_are_pruned_unless_they_hold_a_run(store: Store) -> None:
    def info(worker_id: str, heartbeat_at: float) -> WorkerInfo:
        return WorkerInfo(
            id=worker_id,
            host="h",
            pid=1,
            queues=["q"],
            labels=["gpu", "eu-west"],
            concurrency=4,
            version="0",
            started_at=T0,
            heartbeat_at=heartbeat_at,
        )

    for worker_id, seen in (("gone", T0), ("holding", T0), ("fresh", T0 + 500)):
        await store.register_worker(info(worker_id, seen))
    await store.defer([new()], T0)
    await store.claim(request(("q", 1), worker="holding"), T0)
    assert await store.prune_workers(T0 + 100) == ["gone"]
    left = {w.id: w for w in await store.list_workers(T0 + 501)}
    assert set(left) == {"holding", "fresh"}
    assert list(left["fresh"].labels) == ["gpu", "eu-west"]
    assert await store.prune_workers(T0 + 100) == []


async def test_listeners_are_woken_in_process(store: Store) -> None:
    listener = await store.listen([RUNS_CHANNEL])
    assert await listener.wait(0.01) is False
    await store.defer([new()], T0)
    assert await listener.wait(5) is True
    await listener.close()


async def test_listeners_are_woken_from_another_store_object(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        listener = await store.listen([RUNS_CHANNEL])
        assert await listener.wait(0.01) is False
        await other.defer([new()], T0)  # another connection, as another process would
        assert await listener.wait(5) is True
        await listener.close()
    finally:
        await other.close()


async def test_reopening_applies_no_migration_twice(store: Store) -> None:
    version = await store.schema_version()
    assert version >= 1
    again = open_store(store.url)
    await again.open()
    try:
        assert await again.schema_version() == version
        (d,) = await again.defer([new()], T0)
        assert (await store.get_run(d.id)).state is RunState.QUEUED
    finally:
        await again.close()
