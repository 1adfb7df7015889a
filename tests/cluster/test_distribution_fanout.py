"""Fan-out across real worker processes, on SQLite and PostgreSQL: broadcast reaches every live
worker once, a shard whose worker is killed runs again and its parent still completes, and a
map-reduce of 10,000 items adds up."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from apps import distribution_app as dist
from cronbus import App, AttemptOutcome, RunState

from .distribution_harness import Fleet, app, by_pid, dist_url, fleet, registered, stopped
from .pg_conftest import poll

__all__ = ["app", "dist_url", "fleet"]  # fixtures
pytestmark = pytest.mark.slow

ITEMS = 10_000
SHARDS = 4


async def test_broadcast_reaches_every_live_worker_once(app: App, fleet: Fleet) -> None:
    procs = [
        fleet.start("w0", labels=["gpu"]),
        fleet.start("w1", labels=["gpu"]),
        fleet.start("w2"),
    ]
    gone = fleet.start("w3", labels=["gpu"])
    ids = await registered(app, fleet, *procs, gone)
    # It ran a run (so it is past its start-up), then stopped: not live, so not reached.
    await dist.where.using(route="failover", failover=[ids[3]]).defer_async("gone")
    await poll(lambda: _ran(fleet, "gone"), 30, what="w3 ran a run")
    gone.signal(signal.SIGTERM)
    await stopped(fleet, gone)
    pids = by_pid(ids[:3], procs)

    everyone = await dist.hello.defer_async(broadcast=True)
    labelled = await dist.hello.defer_async(broadcast=["gpu"])
    for handle, reached in ((everyone, ids[:3]), (labelled, ids[:2])):
        parent = await handle.wait_async(timeout=30)
        assert parent.state is RunState.SUCCEEDED, fleet.outputs()
        assert parent.children is not None
        assert (parent.children.total, parent.children.succeeded) == (len(reached), len(reached))
        executed = Counter(
            pids[r["pid"]] for r in fleet.records("hello") if r["parent"] == handle.id
        )
        assert executed == dict.fromkeys(reached, 1)


async def test_killed_shard_is_retried_and_the_parent_completes(
    app: App, fleet: Fleet, tmp_path: Path
) -> None:
    procs = [fleet.start(f"w{n}") for n in range(3)]
    ids = await registered(app, fleet, *procs)
    pids = by_pid(ids, procs)
    release = tmp_path / "release"
    held = 1
    parent = await dist.shard.defer_async(held, str(release), shards=SHARDS)

    async def held_and_others_done() -> bool:
        started = any(r["index"] == held for r in fleet.records("shard"))
        done = (await app.store.count_runs()).get(RunState.SUCCEEDED, 0)
        return started and done == SHARDS - 1

    await poll(held_and_others_done, 30, what="the other shards succeeded, the held one runs")
    (first,) = [r for r in fleet.records("shard") if r["index"] == held]
    victim = next(proc for proc in procs if proc.pid == first["pid"])
    victim.kill()
    killed = time.time()
    release.touch()

    run = await parent.wait_async(timeout=60)
    print(f"\nshards: the parent succeeded {time.time() - killed:.1f} s after the kill")
    assert run.state is RunState.SUCCEEDED, fleet.outputs()
    assert run.children is not None
    assert (run.children.total, run.children.succeeded) == (SHARDS, SHARDS)
    starts = Counter(r["index"] for r in fleet.records("shard") if r["phase"] == "start")
    assert starts == {i: 2 if i == held else 1 for i in range(SHARDS)}  # retried alone
    assert {r["total"] for r in fleet.records("shard")} == {SHARDS}
    ends = [r for r in fleet.records("shard") if r["phase"] == "end" and r["index"] == held]
    assert len(ends) == 1
    assert ends[0]["pid"] in pids
    assert ends[0]["pid"] != victim.pid

    children = await app.store.list_children(parent.id)
    assert [c.child_index for c in children] == list(range(SHARDS))  # in index order
    assert {c.state for c in children} == {RunState.SUCCEEDED}
    (child,) = [c for c in children if c.child_index == held]
    attempts = await app.store.list_attempts(child.id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.LOST, AttemptOutcome.SUCCEEDED]
    assert attempts[0].worker_id == pids[victim.pid] != attempts[1].worker_id


@pytest.mark.timeout(180)
async def test_map_reduce_of_10000_items(app: App, fleet: Fleet) -> None:
    # A longer lease: no one is killed here, and 10,000 runs keep two cores busy.
    procs = [fleet.start(f"w{n}", concurrency=8, lease="10") for n in range(3)]
    await registered(app, fleet, *procs)
    started = time.perf_counter()
    handle = await dist.squares.defer_async(ITEMS)
    run = await handle.wait_async(timeout=120, raise_error=False)
    seconds = time.perf_counter() - started
    print(f"\nmap-reduce of {ITEMS} items: {seconds:.1f} s end to end")

    expected = sum(n * n for n in range(ITEMS))
    assert run.state is RunState.SUCCEEDED, f"{run}\n{fleet.outputs()}"
    (reduced,) = fleet.records("total")
    assert (reduced["count"], reduced["ordered"], reduced["sum"]) == (ITEMS, True, expected)
    assert run.children is not None
    assert run.children.reduce_run_id is not None
    # The reduce run is a child too: the parent ended when it did.
    assert run.children.total in (ITEMS, ITEMS + 1), run.children
    assert run.children.succeeded == run.children.ended == run.children.total
    assert (await app.store.get_run(run.children.reduce_run_id)).result == expected
    assert run.result == expected


async def _ran(fleet: Fleet, key: str) -> bool:
    return any(r["key"] == key for r in fleet.records("where"))
