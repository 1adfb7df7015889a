"""Distribution end to end in one process: an app and its workers on a real SQLite file.

Shards and the run context, map-reduce, runs waiting for a worker that knows their task,
concurrency and rate limits enforced by the claim, and job fires shaped by their task.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cronbus import App, Call, RunState, Worker
from cronbus.config import Settings
from cronbus.handle import RunEndedError
from cronbus.model import FanOutKind, RunFilter, WorkerState
from cronbus.run_context import RunContext
from cronbus.scheduler import Scheduler

from .conftest import until

app = App()
seen: list[dict[str, Any]] = []
"""What the context-reading tasks saw (cleared by the ``shop`` fixture)."""


class Overlap:
    """Counts a task's bodies running at once, and the most there ever were."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget what was counted."""
        self.now = 0
        self.most = 0
        self.done = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1
            self.done += 1


overlap = Overlap()


@app.task
def shard(ctx: RunContext) -> int:
    """Note where it stands among its siblings."""
    seen.append(
        {
            "run": ctx.run_id,
            "index": ctx.shard_index,
            "total": ctx.shard_total,
            "parent": ctx.parent_id,
            "attempt": ctx.attempt,
        }
    )
    ctx.log.warning("shard %s of %s", ctx.shard_index, ctx.shard_total)
    return ctx.shard_index or 0


@app.task
def ident(n: int) -> int:
    """Give back its item."""
    return n


@app.task
def total(results: list[int]) -> int:
    """Sum the children's results."""
    return sum(results)


@app.task
def add(a: int, b: int = 0) -> int:
    """Add two numbers (an item given as a Call)."""
    return a + b


@app.task
def sum_up(n: int, ctx: RunContext) -> str:
    """Map ``range(n)`` over ``ident``, reduced by ``total``."""
    mapped = ctx.map(ident, range(n), reduce=total, batch=500)
    return f"mapped {mapped}"


@app.task
async def sum_up_async(ctx: RunContext, n: int) -> int:
    """The async form, with items given as calls."""
    return await ctx.map_async(add, [Call.of(i, b=1) for i in range(n)], reduce=total)


@app.task(retries=1)
def map_then_fail(n: int, ctx: RunContext) -> None:
    """Map ``n`` items, and fail the first attempt after it: the retry maps them again."""
    ctx.map(ident, range(n))
    seen.append({"attempt": ctx.attempt})
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails after mapping")


@app.task(concurrency=2)
def limited(pause: float) -> None:
    """Hold a slot for ``pause`` seconds, counting overlaps."""
    with overlap:
        threading.Event().wait(pause)


@app.task(concurrency=1, concurrency_key="customer")
def per_customer(customer: str, pause: float) -> None:
    """One at a time per customer."""
    with overlap:
        threading.Event().wait(pause)


@app.task(rate="3/s")
def rated() -> None:
    """At most three starts a second."""


@app.task(route="hash", route_key="customer")
def hashed(customer: str) -> str:
    """Runs on the worker its customer hashes to."""
    return customer


@app.task(route="labels", labels=["gpu"])
def needs_gpu() -> str:
    """Runs only on a worker labelled gpu."""
    return "rendered"


@pytest.fixture
async def shop(tmp_path: Path) -> AsyncIterator[App]:
    """The module's app, open on a fresh SQLite file with short leases."""
    app.use_store(f"sqlite:///{tmp_path / 'dist.db'}")
    app.settings = Settings(
        lease_seconds=3.0, poll_seconds=0.5, grace_seconds=5.0, broadcast_wait_seconds=1.0
    )
    seen.clear()
    overlap.reset()
    async with app:
        yield app


@asynccontextmanager
async def working(
    of: App, *, concurrency: int = 4, queues: str = "*", labels: tuple[str, ...] = ()
) -> AsyncIterator[Worker]:
    """A worker of ``of`` running until the block ends."""
    worker = Worker(of, concurrency=concurrency, queues=queues, labels=labels)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(task, 15)


async def test_shards_know_their_place_and_the_parent_waits_for_them(shop: App) -> None:
    handle = await shard.defer_async(shards=3)
    assert (await handle.fetch_async()).state is RunState.WAITING
    async with working(shop):
        run = await handle.wait_async(20)
    assert run.state is RunState.SUCCEEDED
    assert run.result is None  # a shards parent answers with its counts, not a value
    assert run.children is not None
    assert (run.children.kind, run.children.total, run.children.succeeded) == (
        FanOutKind.SHARDS,
        3,
        3,
    )
    assert sorted(s["index"] for s in seen) == [0, 1, 2]
    assert {(s["total"], s["parent"], s["attempt"]) for s in seen} == {(3, handle.id, 1)}
    children = await shop.store.list_children(handle.id)
    assert sorted(c.id for c in children) == sorted(s["run"] for s in seen)
    (attempt,) = await shop.store.list_attempts(children[1].id)
    assert "shard 1 of 3" in attempt.logs  # ctx.log lands in the attempt's own log


async def test_map_reduce_sums_two_thousand_items(shop: App) -> None:
    handle = await sum_up.defer_async(2000)
    async with working(shop, concurrency=8):
        run = await handle.wait_async(90)
    assert run.state is RunState.SUCCEEDED
    assert run.result == sum(range(2000))  # the reduce's result, not the body's
    assert run.children is not None
    assert (run.children.kind, run.children.total, run.children.succeeded) == (
        FanOutKind.MAP,
        2000,
        2000,
    )
    assert await handle.result_async() == 1_999_000
    reduce_id = run.children.reduce_run_id
    assert reduce_id is not None
    reduce = await shop.store.get_run(reduce_id)
    assert (reduce.task, reduce.parent_id, reduce.state) == (total.name, handle.id, run.state)
    first = await shop.store.list_children(handle.id, limit=3)
    assert [(c.child_index, c.args, c.result) for c in first] == [(i, [i], i) for i in range(3)]


async def test_map_async_takes_calls(shop: App) -> None:
    handle = await sum_up_async.defer_async(n=50)
    async with working(shop):
        run = await handle.wait_async(30)
    assert run.result == sum(range(50)) + 50


async def test_a_retried_body_maps_no_item_twice(shop: App) -> None:
    handle = await map_then_fail.defer_async(30)
    async with working(shop):
        run = await handle.wait_async(30)
    assert run.state is RunState.SUCCEEDED
    assert [s["attempt"] for s in seen] == [1, 2]
    assert run.children is not None
    assert (run.children.total, run.children.succeeded) == (30, 30)
    children = await shop.store.list_children(handle.id, limit=100)
    assert [c.child_index for c in children] == list(range(30))


async def test_a_run_of_a_task_no_worker_knows_waits_for_one_that_does(
    shop: App, tmp_path: Path
) -> None:
    newer = App(shop.store_url, settings=shop.settings)

    @newer.task(name="only.in.the.new.version")
    def fresh(n: int) -> int:
        """A task only the newer code has."""
        return n + 1

    async with newer:
        waiting = await fresh.defer_async(41)
        async with working(shop):
            # A run after it, of a task the old worker knows, is claimed and done past it.
            later = await ident.defer_async(7)
            assert (await later.wait_async(10)).result == 7
            run = await waiting.fetch_async()
            assert (run.state, run.attempts) == (RunState.QUEUED, 0)
            async with working(newer):
                assert (await waiting.wait_async(10)).result == 42


async def test_concurrency_two_is_never_exceeded_with_four_slots(shop: App) -> None:
    handles = [await limited.defer_async(0.15) for _ in range(8)]
    async with working(shop, concurrency=4):
        for handle in handles:
            assert (await handle.wait_async(30)).state is RunState.SUCCEEDED
    assert overlap.most == 2  # reached, never passed
    assert overlap.done == 8


async def test_a_concurrency_key_limits_each_key_alone(shop: App) -> None:
    calls = [("a", 0.15), ("a", 0.15), ("a", 0.15), ("b", 0.15), ("c", 0.15)]
    handles = [await per_customer.defer_async(c, p) for c, p in calls]
    async with working(shop, concurrency=4):
        for handle in handles:
            await handle.wait_async(30)
    starts = {}
    for handle in handles:
        (attempt,) = await shop.store.list_attempts(handle.id)
        assert attempt.finished_at is not None
        starts[handle.id] = (attempt.started_at, attempt.finished_at)
    spans = [starts[h.id] for h in handles[:3]]
    spans.sort()
    assert all(a[1] <= b[0] + 0.05 for a, b in itertools.pairwise(spans))
    assert overlap.most >= 2  # other customers ran beside customer a


async def test_a_rate_limit_caps_the_starts_of_each_window(shop: App) -> None:
    handles = [await rated.defer_async() for _ in range(7)]
    async with working(shop, concurrency=4):
        for handle in handles:
            assert (await handle.wait_async(30)).state is RunState.SUCCEEDED
    windows: dict[int, int] = {}
    for handle in handles:
        (attempt,) = await shop.store.list_attempts(handle.id)
        window = math.floor(attempt.started_at)
        windows[window] = windows.get(window, 0) + 1
    assert max(windows.values()) <= 3
    assert len(windows) >= 3  # seven starts at three a second take three windows


async def test_job_fires_carry_the_tasks_limits_and_fan_out(shop: App) -> None:
    soon = shop.clock.now() + 0.2  # within the scheduler's look-ahead
    await shop.jobs.add("limited-job", limited, at=soon, args=[0.0])
    fanned = await shop.jobs.add("sharded-job", shard, at=soon, shards=2)
    assert fanned.spec.shards == 2
    await Scheduler(shop, sync=False).tick()
    runs = await shop.store.list_runs(RunFilter(limit=100))
    by_task = {run.task: run for run in runs if run.parent_id is None}
    job_run = by_task[limited.name]
    assert job_run.limit_key == f"default:{limited.name}"
    parent = by_task[shard.name]
    assert parent.state is RunState.WAITING
    async with working(shop):
        await until(lambda: _state_is(shop, parent.id, RunState.SUCCEEDED), 20)
    done = await shop.store.get_run(parent.id)
    assert done.children is not None
    assert (done.children.total, done.children.succeeded) == (2, 2)


async def _state_is(of: App, run_id: int, state: RunState) -> bool:
    return (await of.store.get_run(run_id)).state is state


async def test_broadcast_runs_once_on_each_live_worker_that_fits(shop: App) -> None:
    async with working(shop, labels=("gpu",)) as gpu, working(shop) as plain:
        await until(lambda: _alive(shop, 2), 10)
        handle = await ident.defer_async(5, broadcast=True)
        run = await handle.wait_async(20)
        assert run.children is not None
        assert (run.children.kind, run.children.total, run.children.succeeded) == (
            FanOutKind.BROADCAST,
            2,
            2,
        )
        children = await shop.store.list_children(handle.id)
        assert sorted(c.target_worker or "" for c in children) == sorted([gpu.id, plain.id])
        for child in children:
            (attempt,) = await shop.store.list_attempts(child.id)
            assert (attempt.worker_id, child.result) == (child.target_worker, 5)
        labelled = await ident.defer_async(6, broadcast=["gpu"])
        await labelled.wait_async(20)
        (only,) = await shop.store.list_children(labelled.id)
        assert (only.target_worker, only.result) == (gpu.id, 6)
    nobody = await ident.defer_async(7, broadcast=True)  # both workers stopped
    # It waits broadcast_wait_seconds for a worker; the scheduler ends it, saying why.
    scheduler = Scheduler(shop)
    scheduling = asyncio.create_task(scheduler.run())
    try:
        with pytest.raises(RunEndedError, match=r"is dead: NoLiveWorker: no live worker serves"):
            await nobody.wait_async(20)
    finally:
        scheduler.request_stop()
        await asyncio.wait_for(scheduling, 15)


async def _alive(of: App, count: int) -> bool:
    workers = await of.store.list_workers(of.clock.now())
    return sum(w.state is WorkerState.ALIVE for w in workers) == count


async def test_hash_routing_keeps_a_key_on_one_worker(shop: App) -> None:
    async with working(shop), working(shop):
        await until(lambda: _alive(shop, 2), 10)
        handles = [await hashed.defer_async(c) for c in "abcdef" * 3]
        for handle in handles:
            await handle.wait_async(20)
        targets: dict[str, set[str]] = {}
        for handle in handles:
            run = await handle.fetch_async()
            (attempt,) = await shop.store.list_attempts(run.id)
            assert (run.route, attempt.worker_id) == ("hash", run.target_worker)
            targets.setdefault(run.args[0], set()).add(attempt.worker_id)
    assert all(len(workers) == 1 for workers in targets.values())


async def test_a_run_needing_labels_waits_for_a_worker_carrying_them(shop: App) -> None:
    handle = await needs_gpu.defer_async()
    async with working(shop):
        assert (await (await ident.defer_async(1)).wait_async(10)).result == 1
        assert (await handle.fetch_async()).state is RunState.QUEUED
        async with working(shop, labels=("gpu", "eu")):
            assert (await handle.wait_async(10)).result == "rendered"
