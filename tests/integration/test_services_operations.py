"""Bulk operations and stats through the services on a real SQLite file: an operation runs in
the background in batches, saves its progress, counts what it could not do, honours an abort,
and refuses a bad request at once; stats come from a cached aggregate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.admin_records import Operation, OperationState
from cronbus.errors import ForbiddenError, InvalidArgumentError, NotFoundError
from cronbus.services import LOCAL, Services, SubscriptionInput, stats
from cronbus.services import operations as ops
from cronbus.states import AttemptOutcome, RunState
from integration.test_services_fixtures import OTHER, READER, STORES, end_run, open_on


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema; operations end before it
    closes."""
    async with open_on(request, tmp_path) as app:
        yield app
        await ops.wait_all()


@pytest.fixture
def services(opened: App) -> Services:
    """Local services in ``default``."""
    return Services(opened, LOCAL)


async def ended(services: Services, op: Operation, timeout: float = 10.0) -> Operation:
    """Poll an operation until it ends."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        op = await services.operations.get(op.id)
        if op.state.terminal:
            return op
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"operation {op.id} still {op.state} after {timeout} s")
        await asyncio.sleep(0.01)


async def test_retry_by_filter(services: Services, opened: App) -> None:
    dead = []
    for i in range(3):
        run = (await services.runs.defer("add", [i, 0])).run
        await end_run(opened, run.id, AttemptOutcome.FAILED)
        dead.append(run.id)
    waiting = (await services.runs.defer("add", [9, 9])).run.id
    op = await services.operations.start("runs.retry", filter={"task": "add"})
    assert op.state is OperationState.PENDING
    done = await ended(services, op)
    assert done.state is OperationState.SUCCEEDED
    assert (done.total, done.done, done.failed) == (3, 3, 0)
    for run_id in dead:
        assert (await services.runs.get(run_id)).state is RunState.QUEUED
    assert (await services.runs.get(waiting)).state is RunState.QUEUED
    page = await services.operations.list()
    assert [o.id for o in page.items] == [op.id]


async def test_cancel_by_ids_counts_failures(services: Services) -> None:
    ids = [(await services.runs.defer("add", [i, 0])).run.id for i in range(3)]
    await services.runs.cancel(ids[0])
    op = await services.operations.start("runs.cancel", ids=[*ids, 999])
    done = await ended(services, op)
    assert done.state is OperationState.SUCCEEDED
    assert (done.total, done.done, done.failed) == (4, 2, 2)
    assert done.error is not None
    assert "no run has id 999" in done.error
    for run_id in ids:
        assert (await services.runs.get(run_id)).state is RunState.CANCELLED


async def test_abort_stops_between_batches(services: Services, opened: App) -> None:
    ids = [(await services.runs.defer("add", [i, 0])).run.id for i in range(ops.BATCH * 3)]
    op = await services.operations.start("runs.cancel", ids=ids)
    aborted = await services.operations.abort(op.id)
    assert aborted.state is OperationState.ABORTED
    await ops.wait_all()
    final = await services.operations.get(op.id)
    assert final.state is OperationState.ABORTED
    # Whatever ran before the abort stays done; the rest is left alone.
    cancelled = [
        run_id for run_id in ids if (await services.runs.get(run_id)).state is RunState.CANCELLED
    ]
    assert len(cancelled) < len(ids)
    assert (await services.operations.abort(op.id)).state is OperationState.ABORTED


async def test_replay_and_requeue_kinds(services: Services, opened: App) -> None:
    await services.subscriptions.create(SubscriptionInput(name="s", topic="t", task="add"))
    op = await services.operations.start("subscriptions.replay", filter={"topic": "t"}, offset=1)
    assert (await ended(services, op)).done == 1
    run = (await services.runs.defer("add", [1, 1])).run
    await end_run(opened, run.id, AttemptOutcome.FAILED)
    requeue = await services.operations.start("dead_letters.requeue", filter={"kind": "runs"})
    final = await ended(services, requeue)
    assert (final.total, final.done) == (1, 1)
    assert (await services.runs.get(run.id)).state is RunState.QUEUED


async def test_bad_requests_are_refused_at_once(services: Services, opened: App) -> None:
    cases = [
        ({"kind": "runs.delete", "ids": [1]}, "kind"),
        ({"kind": "runs.retry"}, "ids"),
        ({"kind": "runs.retry", "ids": [1], "filter": {}}, "ids"),
        ({"kind": "runs.retry", "ids": [0]}, "ids"),
        ({"kind": "runs.retry", "filter": {"color": "red"}}, "filter.color"),
        ({"kind": "runs.retry", "filter": {"states": ["nope"]}}, "filter.states"),
        ({"kind": "runs.retry", "filter": {"queue": "a b"}}, "filter.queue"),
        ({"kind": "subscriptions.replay", "ids": ["s"]}, "offset"),
        ({"kind": "runs.cancel", "ids": [1], "offset": 1}, "offset"),
        ({"kind": "subscriptions.replay", "ids": ["s"], "offset": 0}, "offset"),
        ({"kind": "subscriptions.replay", "ids": ["s"], "since": "soon"}, "since"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.operations.start(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field, kwargs
    assert (await services.operations.list()).items == []
    with pytest.raises(ForbiddenError):
        await Services(opened, READER).operations.start("runs.retry", ids=[1])
    op = await services.operations.start("runs.retry", ids=[1])
    with pytest.raises(NotFoundError):
        await Services(opened, OTHER, namespace="other").operations.get(op.id)


async def test_stats_are_cached_for_a_few_seconds(services: Services, opened: App) -> None:
    stats.CACHE.clear()
    run = (await services.runs.defer("add", [1, 2])).run
    counts = await services.stats.counts()
    assert counts[RunState.QUEUED] == 1
    assert counts[RunState.DEAD] == 0
    await end_run(opened, run.id, AttemptOutcome.FAILED)
    # Within the TTL every caller gets the same figure, not a count per request.
    assert (await services.stats.counts())[RunState.QUEUED] == 1
    stats.CACHE.clear()
    fresh = await services.stats.counts()
    assert fresh[RunState.DEAD] == 1
    assert fresh[RunState.QUEUED] == 0
    buckets = await services.stats.per_minute(600)
    assert len(buckets) == 10
    assert sum(b.counts["dead"] for b in buckets) == 1
    assert buckets[-1].start > buckets[0].start
    with pytest.raises(InvalidArgumentError) as caught:
        await services.stats.per_minute(10)
    assert caught.value.field == "window_seconds"
    other = Services(opened, OTHER, namespace="other")
    assert (await other.stats.counts())[RunState.DEAD] == 0


async def test_an_operation_without_progress_is_abandoned(services: Services, opened: App) -> None:
    store = opened.store
    op = await store.put_operation(
        namespace="default",
        kind="runs.retry",
        request={"ids": [1]},
        created_by="gone",
        now=opened.clock.now() - ops.STALE_AFTER - 1,
    )
    await store.update_operation(
        op.id, opened.clock.now() - ops.STALE_AFTER - 1, state=OperationState.RUNNING, total=1
    )
    seen = await services.operations.get(op.id)
    assert seen.state is OperationState.FAILED
    assert seen.error is not None
    assert seen.error.startswith("abandoned")
    fresh = await ended(services, await services.operations.start("runs.retry", ids=[1]))
    # Run 1 does not exist: its only item failed, so the operation failed (issue 30).
    assert (fresh.state, fresh.done, fresh.failed) == (OperationState.FAILED, 0, 1)
    assert fresh.error is not None
    assert "abandoned" not in fresh.error
