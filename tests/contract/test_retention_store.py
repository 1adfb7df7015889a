"""The retention contract (both stores): finished runs read oldest first; deletes remove only
what is still finished, unchanged and not held by a live family member; ended deliveries go
with their attempts, live ones stay; events go only once nothing needs them."""

from __future__ import annotations

from cronbus.errors import RunNotFoundError
from cronbus.events.records import (
    DeliveryOutcome,
    DeliveryResult,
    NewDelivery,
    NewEvent,
    SubscriptionSpec,
)
from cronbus.events.states import DeliveryState
from cronbus.model import (
    ClaimRequest,
    ErrorInfo,
    FanOut,
    FanOutKind,
    NewRun,
    Outcome,
    QueueShare,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store
from cronbus.store.retention_ports import FinishedRun

T0 = 1_700_000_000.0
LATER = T0 + 1_000


def new(task: str = "t", eta: float = T0, **kw: object) -> NewRun:
    return NewRun(task=task, queue="q", eta=eta, **kw)  # type: ignore[arg-type]


def claim_request(limit: int = 1, task: str | None = None) -> ClaimRequest:
    return ClaimRequest(
        worker_id="w1", queues=[QueueShare(name="q", limit=limit)], limit=limit, lease_seconds=30
    )


def outcome(run_id: int, attempt_id: int, ok: bool = True) -> Outcome:
    if ok:
        return Outcome(
            run_id=run_id, attempt_id=attempt_id, outcome=AttemptOutcome.SUCCEEDED, result_json="1"
        )
    return Outcome(
        run_id=run_id,
        attempt_id=attempt_id,
        outcome=AttemptOutcome.FAILED,
        error=ErrorInfo(type="ValueError", message="boom", traceback="tb"),
    )


async def finish(store: Store, at: float, ok: bool = True) -> int:
    """Defer one run, claim it and end it at ``at``; its id."""
    (done,) = await store.defer([new()], T0)
    (claimed,) = await store.claim(claim_request(), at)
    assert claimed.run_id == done.id
    await store.complete([outcome(claimed.run_id, claimed.attempt_id, ok)], at)
    return done.id


async def read_all(store: Store, before: float = LATER) -> list[FinishedRun]:
    return await store.finished_runs("default", before, None, 100)


async def test_finished_runs_are_read_oldest_first_and_live_ones_never(store: Store) -> None:
    late = await finish(store, T0 + 20)
    early = await finish(store, T0 + 10, ok=False)
    (waiting,) = await store.defer([new()], T0)
    (cancelled,) = await store.defer([new(eta=T0 + 500)], T0)
    await store.cancel(cancelled.id, T0 + 30)
    found = await read_all(store)
    assert [(r.id, r.state) for r in found] == [
        (early, RunState.DEAD),
        (late, RunState.SUCCEEDED),
        (cancelled.id, RunState.CANCELLED),
    ]
    assert not any(r.held for r in found)
    # Up to a time, from a keyset position, of some states.
    assert [r.id for r in await read_all(store, before=T0 + 20)] == [early, late]
    after = (found[0].finished_at, found[0].id)
    assert [r.id for r in await store.finished_runs("default", LATER, after, 1)] == [late]
    only = await store.finished_runs("default", LATER, None, 10, [RunState.CANCELLED])
    assert [r.id for r in only] == [cancelled.id]
    assert await store.finished_runs("other", LATER, None, 10) == []

    purged = await store.purge_runs(found)
    assert purged.removed == 3
    assert 0 <= purged.seconds < 5
    for gone in (early, late, cancelled.id):
        try:
            await store.get_run(gone)
        except RunNotFoundError:
            continue
        raise AssertionError(f"run {gone} was not purged")
    assert (await store.get_run(waiting.id)).state is RunState.QUEUED
    assert await read_all(store) == []


async def test_a_run_requeued_since_it_was_read_is_kept(store: Store) -> None:
    dead = await finish(store, T0 + 10, ok=False)
    found = await read_all(store)
    assert await store.requeue([dead], T0 + 11) == [dead]
    assert (await store.purge_runs(found)).removed == 0
    assert (await store.get_run(dead)).state is RunState.QUEUED
    # Ended again later, it is a new candidate (a new finished_at): the old read still misses.
    (claimed,) = await store.claim(claim_request(), T0 + 12)
    await store.complete([outcome(claimed.run_id, claimed.attempt_id)], T0 + 13)
    assert (await store.purge_runs(found)).removed == 0
    assert (await store.purge_runs(await read_all(store))).removed == 1


async def test_a_family_goes_parent_first_and_never_while_a_child_lives(store: Store) -> None:
    (parent,) = await store.defer([new(fanout=FanOut(kind=FanOutKind.SHARDS, shards=2))], T0)
    (running,) = await store.claim(claim_request(), T0 + 1)
    assert running.run_id != parent.id
    # Cancelling the parent cancels its queued child at once; the running one is cancelling.
    await store.cancel(parent.id, T0 + 2)
    assert (await store.get_run(parent.id)).state is RunState.CANCELLED
    assert (await store.get_run(running.run_id)).state is RunState.CANCELLING
    found = await read_all(store)
    by_id = {r.id: r for r in found}
    assert by_id[parent.id].held  # a child still lives
    assert all(r.held for r in found)  # and children wait for their parent
    assert (await store.purge_runs(found)).removed == 0
    assert (await store.get_run(parent.id)).state is RunState.CANCELLED

    await store.complete([outcome(running.run_id, running.attempt_id, ok=False)], T0 + 3)
    found = await read_all(store)
    assert [r.id for r in found if not r.held] == [parent.id]
    assert (await store.purge_runs(found)).removed == 1
    # The children, orphans now, go next.
    children = await read_all(store)
    assert len(children) == 2
    assert not any(r.held for r in children)
    assert (await store.purge_runs(children)).removed == 2
    assert await read_all(store) == []


async def test_ended_deliveries_go_with_their_attempts_and_live_ones_stay(store: Store) -> None:
    spec = SubscriptionSpec(
        name="s",
        topic="orders",
        target={"kind": "webhook", "url": "http://127.0.0.1:9/h"},
        start="earliest",
    )
    subscription = await store.put_subscription(spec, T0)
    events = [
        NewEvent(id=f"e{i}", type="t", source="s", time=T0, data_json="{}") for i in range(1, 5)
    ]
    await store.append("orders", events, T0)
    (lease,) = await store.acquire_subscriptions("d1", T0, 30.0, limit=10)
    news = [NewDelivery(offset=o, event_id=f"e{o}", key=None) for o in (1, 2, 3, 4)]
    assert await store.advance(lease, 4, news, T0)
    one, two, three = await store.take_deliveries(lease, T0, fresh=3, retry=0)

    def result(delivery_id: int, kind: DeliveryOutcome) -> DeliveryResult:
        return DeliveryResult(
            delivery_id=delivery_id, outcome=kind, started_at=T0 + 1, finished_at=T0 + 1
        )

    results = [
        result(one.id, DeliveryOutcome.ACKED),
        result(two.id, DeliveryOutcome.TIMED_OUT),
        result(three.id, DeliveryOutcome.ACKED),
    ]
    await store.finish_deliveries(lease, results, T0 + 1)
    acked = DeliveryState.ACKED
    assert (await store.purge_deliveries(subscription.id, acked, T0, 10)).removed == 0
    assert (await store.purge_deliveries(subscription.id, acked, T0 + 1, 1)).removed == 1
    assert (await store.purge_deliveries(subscription.id, acked, T0 + 1, 10)).removed == 1
    counts = await store.count_deliveries("s")
    assert counts == {DeliveryState.DEAD: 1, DeliveryState.PENDING: 1}
    dead = DeliveryState.DEAD
    assert (await store.purge_deliveries(subscription.id, dead, LATER, 10)).removed == 1
    assert await store.list_delivery_attempts(two.id) == []
    assert await store.count_deliveries("s") == {DeliveryState.PENDING: 1}

    # Events: the one a pending delivery needs stays, and nothing above the cursor goes.
    purged = await store.purge_events("orders", 0, 4, 100)
    assert purged.removed == 3
    assert purged.last is None
    assert [e.offset for e in await store.read_events("orders", 0, 10)] == [4]


async def test_events_above_a_cursor_stay_and_batches_go_on_past_needed_ones(
    store: Store,
) -> None:
    spec = SubscriptionSpec(
        name="s",
        topic="orders",
        target={"kind": "webhook", "url": "http://127.0.0.1:9/h"},
        start="earliest",
    )
    await store.put_subscription(spec, T0)
    events = [
        NewEvent(id=f"e{i}", type="t", source="s", time=T0, data_json="{}") for i in range(1, 7)
    ]
    await store.append("orders", events, T0)
    (lease,) = await store.acquire_subscriptions("d1", T0, 30.0, limit=10)
    # Deliveries of 1 and 2 are pending (needed); the cursor is at 4.
    news = [NewDelivery(offset=o, event_id=f"e{o}", key=None) for o in (1, 2)]
    assert await store.advance(lease, 4, news, T0)
    first = await store.purge_events("orders", 0, 6, 2)
    assert (first.removed, first.last) == (0, 2)
    second = await store.purge_events("orders", first.last or 0, 6, 2)
    assert (second.removed, second.last) == (2, 4)
    third = await store.purge_events("orders", second.last or 0, 6, 2)
    assert (third.removed, third.last) == (0, None)
    assert [e.offset for e in await store.read_events("orders", 0, 10)] == [1, 2, 5, 6]
    topic = await store.get_topic("orders")
    assert topic.events == 4


async def test_reclaim_space_reports_pages(store: Store) -> None:
    reclaimed = await store.reclaim_space(100)
    assert reclaimed.removed >= 0


async def test_run_namespaces_include_those_nobody_registered(store: Store) -> None:
    assert await store.run_namespaces() == []
    await store.defer([new(), NewRun(task="t", queue="q", eta=T0, namespace="shop")], T0)
    assert await store.run_namespaces() == ["default", "shop"]
