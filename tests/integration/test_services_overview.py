"""The overview service on a real SQLite file and a PostgreSQL schema: every figure of the
snapshot from runs, workers, jobs and deliveries made through the store's own calls, its
version, its sharing between concurrent callers, and its access check."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.errors import ForbiddenError
from cronbus.events.records import DeliveryOutcome, DeliveryResult, NewDelivery
from cronbus.job_specs import JobOptions
from cronbus.model import QueueDepth, WorkerInfo, WorkerState
from cronbus.services import LOCAL, EventInput, Overview, Services, SubscriptionInput, stats
from cronbus.services import overview as overview_module
from cronbus.states import AttemptOutcome, RunState
from cronbus.store.logic import job_run
from integration.test_services_fixtures import OTHER, READER, STORES, end_run, open_on


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


async def fresh(services: Services) -> Overview:
    """A snapshot computed now, not one cached by an earlier call."""
    stats.CACHE.clear()
    return await services.overview.snapshot()


async def register(app: App, worker_id: str, *, age: float = 0.0) -> None:
    """A worker of ``default`` that last beat ``age`` seconds ago."""
    now = app.clock.now()
    await app.store.register_worker(
        WorkerInfo(
            id=worker_id,
            host="h",
            pid=1,
            queues=["*"],
            concurrency=2,
            version="t",
            started_at=now - age,
            heartbeat_at=now - age,
            tasks=["add"],
        )
    )


async def fail_deliveries(app: App, services: Services) -> None:
    """Subscription ``hook`` with three deliveries pushed by a pretend dispatcher: one
    retrying, one dead, one acknowledged; ``calm`` with nothing wrong; ``off`` disabled by
    cronbus; ``resting`` paused by an operator."""
    await services.topics.publish("orders", [EventInput(type="o", data=n) for n in range(3)])
    for name in ("hook", "calm", "off", "resting"):
        await services.subscriptions.create(
            SubscriptionInput(name=name, topic="orders", webhook=f"http://127.0.0.1:9/{name}")
        )
    store, now = app.store, app.clock.now()
    await services.subscriptions.pause("resting")
    await store.set_subscription_paused("off", True, "target gone (410)", now)
    await store.replay("hook", 0, now)
    (lease,) = [
        lease
        for lease in await store.acquire_subscriptions("d", now, 60.0, 10)
        if lease.subscription == "hook"
    ]
    events = await store.read_events("orders", 0, 10)
    news = [NewDelivery(offset=e.offset, event_id=e.id, key=e.key) for e in events]
    assert await store.advance(lease, events[-1].offset, news, now)
    taken = await store.take_deliveries(lease, now, 3, 3)
    outcomes = [
        (DeliveryOutcome.FAILED, now + 3600.0),
        (DeliveryOutcome.FAILED, None),  # no retry: dead
        (DeliveryOutcome.ACKED, None),
    ]
    results = [
        DeliveryResult(
            delivery_id=delivery.id,
            outcome=outcome,
            started_at=now,
            finished_at=now,
            status=503 if outcome is DeliveryOutcome.FAILED else 204,
            retry_at=retry_at,
        )
        for delivery, (outcome, retry_at) in zip(taken, outcomes, strict=True)
    ]
    assert await store.finish_deliveries(lease, results, now) == [True] * 3
    await store.release_subscriptions("d", ["hook"])


async def test_an_empty_namespace_has_zero_figures_and_a_steady_version(opened: App) -> None:
    services = Services(opened, LOCAL)
    first = await fresh(services)
    assert first.namespace == "default"
    assert set(first.runs.values()) == {0}
    assert set(first.runs) == set(RunState)
    assert first.queues == ()
    assert first.workers == {WorkerState.ALIVE: 0, WorkerState.DRAINING: 0, WorkerState.LOST: 0}
    assert (first.dead_letters, first.failing_subscriptions) == (0, ())
    assert first.lag.samples == 0
    assert first.lag.p99 is None
    assert len(first.minutes) == 60
    assert first.version
    again = await fresh(services)
    assert again.version == first.version
    assert again.taken_at >= first.taken_at


async def test_every_figure_comes_from_the_store(opened: App) -> None:
    services = Services(opened, LOCAL)
    before = await fresh(services)
    # Runs: two queued in default, one queued in mail, one succeeded, one dead.
    for _ in range(2):
        await services.runs.defer("add", [1, 2])
    await services.runs.defer("send", ["a@example.com"])
    done = (await services.runs.defer("add", [1, 2], queue="ended-ok")).run.id
    await end_run(opened, done, AttemptOutcome.SUCCEEDED)
    dead = (await services.runs.defer("add", [1, 2], queue="ended-dead")).run.id
    await end_run(opened, dead, AttemptOutcome.FAILED)
    await services.runs.defer("add", [1, 2], delay=3600.0)
    # Workers: alive, draining, lost (silent past the 3 s lease), stopped (not counted).
    await register(opened, "w-alive")
    await register(opened, "w-draining")
    await opened.store.set_worker_state("w-draining", WorkerState.DRAINING, opened.clock.now())
    await register(opened, "w-lost", age=60.0)
    await register(opened, "w-stopped")
    await opened.store.set_worker_state("w-stopped", WorkerState.STOPPED, opened.clock.now())
    # The scheduler's lag: two fires of a job, created 4 s and 1 s after they were due.
    await services.jobs.create("tick", "add", JobOptions(every=60.0, args=[1, 2]))
    job = await opened.store.get_job("tick")
    now = opened.clock.now()
    await opened.store.defer([job_run(job, now - 4.0, now), job_run(job, now - 1.0, now)], now)
    await fail_deliveries(opened, services)

    found = await fresh(services)
    assert found.runs[RunState.QUEUED] == 5  # two adds, a send, two job fires
    assert found.runs[RunState.SUCCEEDED] == 1
    assert found.runs[RunState.DEAD] == 1
    assert found.runs[RunState.SCHEDULED] == 1
    depths = {(d.queue, d.state): d for d in found.queues}
    assert depths[("default", RunState.QUEUED)].count == 4
    assert depths[("mail", RunState.QUEUED)].count == 1
    assert depths[("default", RunState.SCHEDULED)].count == 1
    assert all(isinstance(d, QueueDepth) and d.oldest is not None for d in found.queues)
    assert not any(q.startswith("ended-") for q, _ in depths)
    assert found.workers == {
        WorkerState.ALIVE: 1,
        WorkerState.DRAINING: 1,
        WorkerState.LOST: 1,
    }
    assert (found.dead_runs, found.dead_deliveries, found.dead_letters) == (1, 1, 2)
    assert found.failing_subscriptions == ("hook", "off")
    assert found.lag.samples == 2
    assert found.lag.p50 == pytest.approx(1.0, abs=0.01)
    assert found.lag.p99 == pytest.approx(4.0, abs=0.01)
    assert found.lag.max == pytest.approx(4.0, abs=0.01)
    assert sum(bucket.total for bucket in found.minutes) == 2
    assert found.version != before.version


async def test_the_version_changes_with_a_figure_and_only_then(opened: App) -> None:
    services = Services(opened, LOCAL)
    first = await fresh(services)
    await services.runs.defer("add", [1, 2])
    second = await fresh(services)
    assert second.version != first.version
    assert (await fresh(services)).version == second.version
    await register(opened, "w1")
    assert (await fresh(services)).version != second.version


async def test_concurrent_callers_share_one_snapshot_for_its_ttl(opened: App) -> None:
    stats.CACHE.clear()
    callers = [Services(opened, LOCAL) for _ in range(20)]
    found = await asyncio.gather(*(s.overview.snapshot() for s in callers))
    assert all(snapshot is found[0] for snapshot in found)
    # Within the TTL a change is not seen yet; after it, it is.
    await callers[0].runs.defer("add", [1, 2])
    assert await callers[1].overview.snapshot() is found[0]
    await asyncio.sleep(overview_module.TTL + 0.1)  # the TTL itself is what is tested here
    later = await callers[2].overview.snapshot()
    assert later is not found[0]
    assert later.runs[RunState.QUEUED] == 1


async def test_namespaces_have_their_own_snapshots(opened: App) -> None:
    services = Services(opened, LOCAL)
    await services.namespaces.create("other")
    await services.using("other").runs.defer("add", [1, 2])
    assert (await fresh(services)).runs[RunState.QUEUED] == 0
    assert (await services.using("other").overview.snapshot()).runs[RunState.QUEUED] == 1


async def test_a_reader_may_look_and_another_namespace_may_not(opened: App) -> None:
    assert (await Services(opened, READER).overview.snapshot()).namespace == "default"
    with pytest.raises(ForbiddenError):
        await Services(opened, OTHER, "default").overview.snapshot()


def test_scheduler_lag_percentiles_by_nearest_rank() -> None:
    lag = overview_module.scheduler_lag([float(n) for n in range(100, 0, -1)])
    assert (lag.p50, lag.p99, lag.max, lag.samples) == (50.0, 99.0, 100.0, 100)
    assert overview_module.scheduler_lag([-0.2]).max == 0.0
    assert overview_module.scheduler_lag([]).p50 is None
