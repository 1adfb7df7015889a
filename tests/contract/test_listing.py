"""The store contract for listings, counts and purges: keyset pages newest first (by namespace,
state, task, queue, job and creation time), counts and runs per minute by namespace, and the
deletion of ended runs and dead deliveries."""

from __future__ import annotations

import pytest

from cronbus.errors import DeliveryNotFoundError, RunNotFoundError
from cronbus.events.records import (
    DeliveryOutcome,
    DeliveryResult,
    NewDelivery,
    NewEvent,
    SubscriptionSpec,
)
from cronbus.events.states import DeliveryState
from cronbus.model import (
    ClaimedRun,
    ClaimRequest,
    ErrorInfo,
    JobSpec,
    NewRun,
    Outcome,
    QueueShare,
    Run,
    RunFilter,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store

T0 = 1_700_000_000.0
LEASE = 30.0
HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}


def new(namespace: str = "a", task: str = "t", queue: str = "q", **kw: object) -> NewRun:
    eta = kw.pop("eta", T0)
    return NewRun(task=task, queue=queue, eta=eta, namespace=namespace, **kw)  # type: ignore[arg-type]


def claim(namespace: str = "a", queue: str = "q", limit: int = 100) -> ClaimRequest:
    return ClaimRequest(
        worker_id="w",
        queues=[QueueShare(name=queue, limit=limit)],
        limit=limit,
        lease_seconds=LEASE,
        namespace=namespace,
    )


def ended(c: ClaimedRun, outcome: AttemptOutcome = AttemptOutcome.SUCCEEDED) -> Outcome:
    error = None if outcome is AttemptOutcome.SUCCEEDED else ErrorInfo(type="E", message="m")
    return Outcome(run_id=c.run_id, attempt_id=c.attempt_id, outcome=outcome, error=error)


async def page_through(store: Store, filter: RunFilter) -> list[list[int]]:
    """Every page of a listing, following the keyset as a client would."""
    pages: list[list[int]] = []
    before: int | None = None
    while True:
        rows = await store.list_runs(
            RunFilter(
                states=filter.states,
                task=filter.task,
                job_id=filter.job_id,
                queue=filter.queue,
                limit=filter.limit,
                before_id=before,
                namespace=filter.namespace,
                created_after=filter.created_after,
                created_before=filter.created_before,
            )
        )
        if not rows:
            return pages
        pages.append([run.id for run in rows])
        before = rows[-1].id


def ids(runs: list[Run]) -> list[int]:
    return [run.id for run in runs]


# -- listings --------------------------------------------------------------------------------------
async def test_keyset_pages_of_a_namespace_cover_it_once_newest_first(store: Store) -> None:
    ours = [d.id for d in await store.defer([new("a") for _ in range(7)], T0)]
    await store.defer([new("b") for _ in range(3)], T0)
    pages = await page_through(store, RunFilter(namespace="a", limit=3))
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [i for p in pages for i in p] == sorted(ours, reverse=True)
    runs = await store.list_runs(RunFilter(namespace="a", limit=2))
    assert [r.namespace for r in runs] == ["a", "a"]


async def test_listings_filter_by_state_task_queue_and_job(store: Store) -> None:
    job = await store.put_job(
        JobSpec(name="j", task="t", trigger={"kind": "every", "seconds": 10.0}, namespace="a"),
        T0,
        T0,
    )
    runs = [
        new(task="mail", queue="q"),
        new(task="bill", queue="slow"),
        new(task="mail", queue="slow"),
        new(task="mail", queue="q", job_id=job.id, fire_at=T0),
        new(task="bill", queue="q", eta=T0 + 60),
        new("b", task="mail", queue="q"),
    ]
    # One at a time, so ids follow this order (a batch numbers keyed runs after plain ones).
    a = [(await store.defer([run], T0))[0].id for run in runs]
    (c,) = await store.claim(claim(queue="slow", limit=1), T0)
    assert c.run_id == a[1]

    async def listed(**kw: object) -> list[int]:
        return ids(await store.list_runs(RunFilter(namespace="a", **kw)))  # type: ignore[arg-type]

    assert await listed(task="mail") == [a[3], a[2], a[0]]
    assert await listed(queue="slow") == [a[2], a[1]]
    assert await listed(job_id=job.id) == [a[3]]
    assert await listed(states=[RunState.SCHEDULED]) == [a[4]]
    assert await listed(states=[RunState.RUNNING]) == [a[1]]
    assert await listed(states=[RunState.QUEUED], task="mail", queue="q") == [a[3], a[0]]
    assert await listed(states=[RunState.QUEUED, RunState.SCHEDULED]) == [a[4], a[3], a[2], a[0]]
    assert await listed(states=[RunState.QUEUED, RunState.RUNNING], limit=2) == [a[3], a[2]]
    assert await listed(task="mail", before_id=a[3]) == [a[2], a[0]]
    assert await listed(task="nothing") == []
    pages = await page_through(
        store, RunFilter(namespace="a", states=[RunState.QUEUED, RunState.RUNNING], limit=2)
    )
    assert pages == [[a[3], a[2]], [a[1], a[0]]]


async def test_a_listing_of_every_namespace_merges_them_newest_first(store: Store) -> None:
    made = await store.defer([new(ns) for ns in ("a", "b", "default", "b", "a", "c")], T0)
    every = [d.id for d in made]
    assert ids(await store.list_runs(RunFilter())) == sorted(every, reverse=True)
    pages = await page_through(store, RunFilter(limit=4))
    assert pages == [sorted(every, reverse=True)[:4], sorted(every, reverse=True)[4:]]
    got = await store.list_runs(RunFilter(task="t", before_id=every[4], limit=3))
    assert ids(got) == [every[3], every[2], every[1]]
    assert {r.namespace for r in await store.list_runs(RunFilter(limit=10))} == {
        "a",
        "b",
        "c",
        "default",
    }
    assert await store.list_runs(RunFilter(namespace="nobody")) == []


async def test_listings_filter_by_creation_time(store: Store) -> None:
    first = [d.id for d in await store.defer([new(), new()], T0)]
    second = [d.id for d in await store.defer([new(), new()], T0 + 60)]
    third = [d.id for d in await store.defer([new()], T0 + 120)]

    async def listed(**kw: object) -> list[int]:
        return ids(await store.list_runs(RunFilter(namespace="a", **kw)))  # type: ignore[arg-type]

    assert await listed(created_after=T0 + 60) == sorted(second + third, reverse=True)
    assert await listed(created_before=T0 + 60) == sorted(first, reverse=True)
    assert await listed(created_after=T0 + 1, created_before=T0 + 120) == sorted(
        second, reverse=True
    )
    assert await listed(created_after=T0 + 60, limit=1, before_id=third[0]) == [second[1]]
    assert await listed(created_after=T0 + 500) == []


async def test_a_listing_without_room_is_empty(store: Store) -> None:
    await store.defer([new()], T0)
    assert await store.list_runs(RunFilter(namespace="a", limit=0)) == []


# -- counts ----------------------------------------------------------------------------------------
async def test_counts_by_namespace(store: Store) -> None:
    await store.defer([new("a"), new("a"), new("a", eta=T0 + 60), new("b")], T0)
    await store.claim(claim("a", limit=1), T0)
    assert await store.count_runs("a") == {
        RunState.QUEUED: 1,
        RunState.RUNNING: 1,
        RunState.SCHEDULED: 1,
    }
    assert await store.count_runs("b") == {RunState.QUEUED: 1}
    assert await store.count_runs("nobody") == {}
    assert await store.count_runs() == {
        RunState.QUEUED: 2,
        RunState.RUNNING: 1,
        RunState.SCHEDULED: 1,
    }


async def test_runs_per_minute_count_ended_runs_by_minute_and_state(store: Store) -> None:
    minute = 60 * (int(T0) // 60 + 1)  # the start of a minute, after T0
    await store.defer([new("a") for _ in range(4)] + [new("b")], T0)
    taken = await store.claim(claim("a"), T0)
    await store.complete([ended(taken[0]), ended(taken[1])], minute + 5)
    await store.complete([ended(taken[2], AttemptOutcome.FAILED)], minute + 59)
    await store.complete([ended(taken[3])], minute + 61)
    (other,) = await store.claim(claim("b"), T0)
    await store.complete([ended(other)], minute + 10)
    assert await store.runs_per_minute("a", minute, minute + 120) == [
        (float(minute), "dead", 1),
        (float(minute), "succeeded", 2),
        (float(minute + 60), "succeeded", 1),
    ]
    # The window is [since, until): a run that ended at until is left out, as are other
    # namespaces and runs still going.
    assert await store.runs_per_minute("a", minute, minute + 61) == [
        (float(minute), "dead", 1),
        (float(minute), "succeeded", 2),
    ]
    assert await store.runs_per_minute("b", minute, minute + 120) == [
        (float(minute), "succeeded", 1)
    ]
    assert await store.runs_per_minute(None, minute, minute + 60) == [
        (float(minute), "dead", 1),
        (float(minute), "succeeded", 3),
    ]
    assert await store.runs_per_minute("a", minute + 120, minute + 240) == []


# -- purges ----------------------------------------------------------------------------------------
async def test_delete_runs_removes_ended_runs_only_with_their_attempts(store: Store) -> None:
    made = [d.id for d in await store.defer([new(args_json="[1]") for _ in range(4)], T0)]
    first, second = await store.claim(claim(limit=2), T0)
    await store.complete([ended(first), ended(second, AttemptOutcome.FAILED)], T0 + 1)
    await store.cancel(made[2], T0 + 1)
    # made[3] is still queued: it stays, and so does an unknown id.
    deleted = await store.delete_runs([*made, 999_999], T0 + 2)
    assert deleted == made[:3]
    for run_id in made[:3]:
        with pytest.raises(RunNotFoundError):
            await store.get_run(run_id)
        assert await store.list_attempts(run_id) == []
    kept = await store.get_run(made[3])
    assert (kept.state, kept.args) == (RunState.QUEUED, [1])
    assert await store.count_runs("a") == {RunState.QUEUED: 1}
    assert await store.delete_runs([], T0) == []
    # A new run never gets the id of a deleted one back with its old payload.
    (again,) = await store.defer([new()], T0 + 3)
    assert again.id > made[3]
    assert (await store.get_run(again.id)).args == []


async def test_delete_deliveries_removes_dead_ones_only(store: Store) -> None:
    spec = SubscriptionSpec(name="s", topic="orders", target=dict(HOOK), start="earliest")
    await store.put_subscription(spec, T0)
    events = [
        NewEvent(id=f"e{i}", type="t", source="test", time=T0, data_json="{}") for i in (1, 2, 3)
    ]
    await store.append("orders", events, T0)
    (lease,) = await store.acquire_subscriptions("d1", T0, LEASE, limit=5)
    news = [NewDelivery(offset=o, event_id=f"e{o}", key=None) for o in (1, 2, 3)]
    assert await store.advance(lease, 3, news, T0)
    taken = await store.take_deliveries(lease, T0, fresh=3, retry=0)
    one, two, three = sorted(d.id for d in taken)
    results = [
        DeliveryResult(
            delivery_id=one,
            outcome=DeliveryOutcome.FAILED,
            started_at=T0,
            finished_at=T0,
            status=500,
        ),
        DeliveryResult(
            delivery_id=two,
            outcome=DeliveryOutcome.ACKED,
            started_at=T0,
            finished_at=T0,
            status=200,
        ),
    ]
    assert await store.finish_deliveries(lease, results, T0) == [True, True]
    assert (await store.get_delivery(one)).state is DeliveryState.DEAD
    assert await store.delete_deliveries([one, two, three, 999_999]) == [one]
    with pytest.raises(DeliveryNotFoundError):
        await store.get_delivery(one)
    assert await store.list_delivery_attempts(one) == []
    assert (await store.get_delivery(two)).state is DeliveryState.ACKED
    assert (await store.get_delivery(three)).state is DeliveryState.IN_FLIGHT
    assert await store.delete_deliveries([]) == []


async def test_creation_bounds_hold_when_clocks_disagree_with_ids(store: Store) -> None:
    # Writers with skewed clocks: ids follow the inserts, not the creation times.
    late = (await store.defer([new()], T0 + 120))[0].id
    early = (await store.defer([new()], T0))[0].id
    middle = (await store.defer([new()], T0 + 60))[0].id
    assert late < early < middle

    async def listed(**kw: object) -> list[int]:
        return ids(await store.list_runs(RunFilter(namespace="a", **kw)))  # type: ignore[arg-type]

    assert await listed(created_after=T0 + 60) == [middle, late]
    assert await listed(created_after=T0 + 61) == [late]
    assert await listed(created_before=T0 + 60) == [early]
    assert await listed(created_after=T0, created_before=T0 + 100) == [middle, early]


async def test_a_window_with_many_runs_pages_through_all_of_them(store: Store) -> None:
    many = 620
    await store.defer([new() for _ in range(30)], T0)
    recent = [d.id for d in await store.defer([new() for _ in range(many)], T0 + 60)]
    pages = await page_through(store, RunFilter(namespace="a", limit=250, created_after=T0 + 60))
    assert [i for p in pages for i in p] == sorted(recent, reverse=True)
    newest = await store.list_runs(RunFilter(namespace="a", limit=3, created_after=T0 + 30))
    assert ids(newest) == sorted(recent, reverse=True)[:3]
