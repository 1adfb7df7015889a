"""Routing across real worker processes, on SQLite and PostgreSQL: each strategy lands runs
where it says, the store's ``target_worker`` and the process that ran the body agree, and a run
routed to a worker that dies is routed again, not lost."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from apps import distribution_app as dist
from cronbus import App

from .distribution_harness import (
    Fleet,
    all_succeeded,
    app,
    by_pid,
    dist_url,
    fleet,
    registered,
)
from .pg_conftest import poll

__all__ = ["app", "dist_url", "fleet"]  # fixtures
pytestmark = pytest.mark.slow

JOIN_KEYS = 10_000
FAR = 3600.0  # an eta this far away: runs routed at defer, never executed in the test
JOIN_LEASE = "15"
STRANDED_DELAY = 2.0  # long enough to kill their worker before they are due


async def targets(app: App, run_ids: list[int]) -> dict[int, str | None]:
    """Each run's target worker, as the store holds it now."""
    return {run.id: run.target_worker for run in await app.store.get_runs(run_ids)}


def ran_on(fleet: Fleet, task: str, pids: dict[int, str]) -> dict[str, str]:
    """The worker that executed each key of ``task`` (the last execution of a key wins)."""
    return {record["key"]: pids[record["pid"]] for record in fleet.records(task)}


async def test_round_robin_spreads_evenly(app: App, fleet: Fleet) -> None:
    procs = [fleet.start(f"w{n}") for n in range(3)]
    ids = await registered(app, fleet, *procs)
    batch = await dist.round_robin.defer_many_async([[f"b{n}"] for n in range(30)])
    # One defer at a time: the turn is kept in the store, not in the defer's memory.
    singles = [await dist.round_robin.defer_async(f"s{n}") for n in range(3)]
    handles = batch + singles
    chosen = await targets(app, [h.id for h in handles])

    assert Counter(chosen[h.id] for h in batch) == dict.fromkeys(ids, 10)
    assert sorted(str(chosen[h.id]) for h in singles) == sorted(ids)
    await all_succeeded(app, fleet, [h.id for h in handles])
    executed = ran_on(fleet, "rr", by_pid(ids, procs))
    runs = await app.store.get_runs([h.id for h in handles])
    assert {run.args[0]: run.target_worker for run in runs} == executed


async def test_hash_sends_a_key_to_one_worker(app: App, fleet: Fleet) -> None:
    procs = [fleet.start(f"w{n}") for n in range(3)]
    ids = await registered(app, fleet, *procs)
    keys = [f"customer-{n}" for n in range(20)]
    handles = []
    for _ in range(3):  # each key three times, in separate transactions
        handles += await dist.hashed.defer_many_async([[key] for key in keys])
    runs = await app.store.get_runs([h.id for h in handles])

    per_key: dict[str, set[str | None]] = {}
    for run in runs:
        per_key.setdefault(run.args[0], set()).add(run.target_worker)
    assert all(len(chosen) == 1 for chosen in per_key.values()), per_key
    used = {next(iter(chosen)) for chosen in per_key.values()}
    assert used <= set(ids)
    assert len(used) >= 2, used  # 20 keys on 1 of 3 workers: ~3e-9
    await all_succeeded(app, fleet, [h.id for h in handles])
    pids = by_pid(ids, procs)
    for record in fleet.records("hash"):
        assert per_key[record["key"]] == {pids[record["pid"]]}, record


async def test_hash_join_moves_few_keys_all_to_the_new_worker(app: App, fleet: Fleet) -> None:
    # A defer of 10,000 runs holds SQLite's write lock for seconds, heartbeats included: with
    # a 2 s lease the workers would look dead and their runs be routed again meanwhile.
    procs = [fleet.start(f"w{n}", lease=JOIN_LEASE) for n in range(3)]
    ids = await registered(app, fleet, *procs)
    calls = [[f"key-{n}"] for n in range(JOIN_KEYS)]
    before = await dist.hashed.defer_many_async(calls, delay=FAR)
    newcomer = fleet.start("w3", lease=JOIN_LEASE)
    (new_id,) = await registered(app, fleet, newcomer)
    after = await dist.hashed.defer_many_async(calls, delay=FAR)

    old = await targets(app, [h.id for h in before])
    new = await targets(app, [h.id for h in after])
    moved = [n for n in range(JOIN_KEYS) if old[before[n].id] != new[after[n].id]]
    assert set(old.values()) == set(ids)
    assert {new[after[n].id] for n in moved} == {new_id}, "a key moved between old workers"
    share = len(moved) / JOIN_KEYS
    print(f"\nhash routing: {len(moved)} of {JOIN_KEYS} keys moved when a 4th worker joined")
    assert 0.15 <= share <= 0.3, share  # about 1/4 move, and all of them to the newcomer


async def test_least_busy_avoids_the_busy_worker(app: App, fleet: Fleet, tmp_path: Path) -> None:
    procs = [fleet.start(f"w{n}") for n in range(3)]
    busy, *idle = ids = await registered(app, fleet, *procs)
    release = tmp_path / "release"
    pinned = dist.hold.using(route="failover", failover=[busy])
    blockers = [await pinned.defer_async(f"hold-{n}", str(release)) for n in range(2)]

    async def holding() -> bool:
        return len(fleet.records("hold")) == 2

    await poll(holding, 30, what="the busy worker runs two held runs")
    light = await dist.least_busy.defer_many_async([[f"l{n}"] for n in range(4)])
    chosen = await targets(app, [h.id for h in light])
    # Loads 2, 0, 0: the batch fills the idle two (each pick counts) up to the busy one's load.
    assert Counter(chosen.values()) == dict.fromkeys(idle, 2)
    await all_succeeded(app, fleet, [h.id for h in light])
    assert set(ran_on(fleet, "least", by_pid(ids, procs)).values()) == set(idle)
    release.touch()
    await all_succeeded(app, fleet, [h.id for h in blockers])
    assert {r["pid"] for r in fleet.records("hold")} == {procs[0].pid}


async def test_failover_takes_the_first_alive_entry_and_moves_on(app: App, fleet: Fleet) -> None:
    primary = fleet.start("w0")
    backups = [fleet.start(f"w{n}", labels=["backup"]) for n in (1, 2)]
    procs = [primary, *backups]
    ids = await registered(app, fleet, *procs)
    pids = by_pid(ids, procs)
    first, backup = ids[0], min(ids[1:])  # a label entry picks its smallest worker id
    order = dist.where.using(route="failover", failover=[first, "label:backup"])

    served = [await order.defer_async(f"a{n}") for n in range(5)]
    assert set((await targets(app, [h.id for h in served])).values()) == {first}
    await all_succeeded(app, fleet, [h.id for h in served])
    assert set(ran_on(fleet, "where", pids).values()) == {first}

    # Runs routed to the primary, due only after it dies: they move on, they are not lost.
    due_later = dist.where.using(
        route="failover", failover=[first, "label:backup"], delay=STRANDED_DELAY
    )
    stranded = [await due_later.defer_async(f"b{n}") for n in range(3)]
    assert set((await targets(app, [h.id for h in stranded])).values()) == {first}
    primary.kill()
    died = time.time()
    await all_succeeded(app, fleet, [h.id for h in stranded], timeout=30)
    print(f"\nfailover: stranded runs succeeded {time.time() - died:.1f} s after the kill")
    assert set((await targets(app, [h.id for h in stranded])).values()) == {backup}

    later = [await order.defer_async(f"c{n}") for n in range(3)]
    assert set((await targets(app, [h.id for h in later])).values()) == {backup}
    await all_succeeded(app, fleet, [h.id for h in later])
    executed = ran_on(fleet, "where", pids)
    assert {executed[key] for key in ("b0", "b1", "b2", "c0", "c1", "c2")} == {backup}


async def test_labels_and_random_stay_with_eligible_workers(app: App, fleet: Fleet) -> None:
    procs = [
        fleet.start("w0", labels=["gpu"]),
        fleet.start("w1", labels=["gpu", "eu"]),
        fleet.start("w2", labels=["eu"]),
    ]
    ids = await registered(app, fleet, *procs)
    pids = by_pid(ids, procs)
    gpu = await dist.gpu.defer_many_async([[f"g{n}"] for n in range(30)])
    both = await dist.gpu_eu.defer_many_async([[f"e{n}"] for n in range(10)])
    randomly = await dist.randomly.defer_many_async([[f"r{n}"] for n in range(60)])
    chosen = await targets(app, [h.id for h in randomly])
    assert set(chosen.values()) == set(ids[:2])  # both gpu workers drawn; 60 draws: ~2e-18

    await all_succeeded(app, fleet, [h.id for h in gpu + both + randomly])
    assert set(ran_on(fleet, "gpu", pids).values()) <= set(ids[:2])
    assert set(ran_on(fleet, "gpu_eu", pids).values()) == {ids[1]}
    executed = ran_on(fleet, "random", pids)
    runs = await app.store.get_runs([h.id for h in randomly])
    assert {run.args[0]: run.target_worker for run in runs} == executed
