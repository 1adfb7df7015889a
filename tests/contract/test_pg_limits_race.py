"""PostgreSQL claims from many connections at once never exceed a limit or a rate, and children
of several parents ended at once in different orders never deadlock (DESIGN11).

Each worker is a store of its own (a pool of its own, as on another machine), on one schema,
all driven from one event loop so their transactions interleave on the server. Times are a
logical clock shared by the workers (see :class:`Stamps`), so attempt times can be checked.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Sequence

import pytest

from contract.pg import pg_store_url
from cronbus.model import (
    ClaimedRun,
    ClaimRequest,
    FanOut,
    FanOutKind,
    NewRun,
    Outcome,
    QueueShare,
    RunFilter,
)
from cronbus.states import ACTIVE, AttemptOutcome, RunState
from cronbus.store.postgres import PostgresStore

WORKERS = 6
LIMIT_KEY = "default:limited"
LIMIT = 2
RATE_KEY = "default:rated"
RATE = 3
PERIOD = 10.0
T0 = 1_000_000.0


class Stamps:
    """The workers' clock: each claim takes the next tick; a completion takes the earliest
    tick of the claims still under way. So a claim that saw a completion's commit (it was
    under way, or began after) is stamped no earlier than that completion, and attempts whose
    times overlap did overlap in the store."""

    def __init__(self) -> None:
        self.tick = T0
        self.claiming: set[float] = set()

    def claim(self) -> float:
        self.tick += 1
        self.claiming.add(self.tick)
        return self.tick

    def claimed(self, stamp: float) -> None:
        self.claiming.discard(stamp)

    def complete(self) -> float:
        self.tick += 1
        return min(self.claiming, default=self.tick)


@pytest.fixture
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[list[PostgresStore]]:
    """Several stores (workers) on one fresh schema."""
    url = await pg_store_url(request)
    opened: list[PostgresStore] = []
    try:
        for _ in range(WORKERS):
            store = PostgresStore(url)
            await store.open()
            opened.append(store)
        yield opened
    finally:
        for store in opened:
            await store.close()


def run(queue: str = "q", eta: float = T0, **fields: object) -> NewRun:
    return NewRun(task="t", queue=queue, eta=eta, **fields)  # type: ignore[arg-type]


def request(worker: str, limit: int = 3, queue: str = "q") -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker,
        queues=[QueueShare(name=queue, limit=limit)],
        limit=limit,
        lease_seconds=300.0,
    )


def succeeded(claim: ClaimedRun, result: str = "1") -> Outcome:
    return Outcome(
        run_id=claim.run_id,
        attempt_id=claim.attempt_id,
        outcome=AttemptOutcome.SUCCEEDED,
        result_json=result,
        fence=claim.fence,
    )


async def active_with_key(store: PostgresStore, key: str) -> int:
    """How many runs with ``key`` the store has active now."""
    found = await store.list_runs(RunFilter(namespace="default", states=sorted(ACTIVE), limit=1000))
    return sum(1 for r in found if r.limit_key == key)


def most_at_once(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals [start, finish) open at one time (a finish at t before a start at t)."""
    events = sorted(
        [(s, 1) for s, f in intervals if f > s] + [(f, -1) for s, f in intervals if f > s]
    )
    most = open_now = 0
    for _, step in events:
        open_now += step
        most = max(most, open_now)
    return most


async def work(
    store: PostgresStore, worker: str, stamps: Stamps, total: int, done: Counter[str]
) -> None:
    """Claim, hold each batch for one more turn, complete; check the limit after each claim."""
    held: list[ClaimedRun] = []
    rng = random.Random(worker)
    while done["runs"] < total or held:
        if held:
            outcomes = [succeeded(c) for c in held]
            rng.shuffle(outcomes)
            assert all(await store.complete(outcomes, stamps.complete()))
            done["runs"] += len(held)
            held = []
        if done["runs"] >= total:
            break
        stamp = stamps.claim()
        try:
            held = await store.claim(request(worker), stamp)
        finally:
            stamps.claimed(stamp)
        assert await active_with_key(store, LIMIT_KEY) <= LIMIT
        await asyncio.sleep(0)


async def watch(store: PostgresStore, stop: asyncio.Event) -> int:
    """Read the key's active runs over and over while the workers run; the most seen."""
    most = 0
    while not stop.is_set():
        seen = await active_with_key(store, LIMIT_KEY)
        assert seen <= LIMIT
        most = max(most, seen)
        await asyncio.sleep(0)
    return most


async def test_concurrent_claims_never_exceed_a_limit_or_a_rate(
    stores: list[PostgresStore],
) -> None:
    first = stores[0]
    limited = [run(limit_key=LIMIT_KEY, limit_max=LIMIT) for _ in range(30)]
    rated = [run(rate_key=RATE_KEY, rate_max=RATE, rate_period=PERIOD) for _ in range(30)]
    plain = [run() for _ in range(30)]
    mixed = [r for trio in zip(limited, rated, plain, strict=True) for r in trio]
    ids = [d.id for d in await first.defer(mixed, T0)]
    stamps = Stamps()
    done: Counter[str] = Counter()
    stop = asyncio.Event()
    # A task group: the first failure cancels the others, so the test ends at once.
    async with asyncio.timeout(120), asyncio.TaskGroup() as group:
        watching = group.create_task(watch(first, stop))
        workers = [
            group.create_task(work(s, f"w{i}", stamps, len(ids), done))
            for i, s in enumerate(stores)
        ]
        await asyncio.wait(workers)
        stop.set()
    assert watching.result() >= 1  # the watcher did see the key's runs running
    runs = {r.id: r for r in await first.get_runs(ids)}
    assert {r.state for r in runs.values()} == {RunState.SUCCEEDED}
    limit_times: list[tuple[float, float]] = []
    rate_starts: Counter[float] = Counter()
    for run_id, found in runs.items():
        (attempt,) = await first.list_attempts(run_id)
        assert attempt.finished_at is not None
        if found.limit_key == LIMIT_KEY:
            limit_times.append((attempt.started_at, attempt.finished_at))
        if found.rate_key == RATE_KEY:
            rate_starts[attempt.started_at // PERIOD] += 1
    assert 1 < most_at_once(limit_times) <= LIMIT
    assert max(rate_starts.values()) <= RATE
    assert len(rate_starts) >= len(rated) // RATE  # 30 starts need 10 windows at least


async def test_children_of_several_parents_end_at_once_without_deadlock(
    stores: list[PostgresStore],
) -> None:
    for round_ in range(5):
        await end_children_at_once(stores, T0 + 10 * round_, random.Random(round_))


async def end_children_at_once(stores: list[PostgresStore], now: float, rng: random.Random) -> None:
    """Shards and map parents whose children every worker ends at once, each batch in its own
    order, the map parents' own attempts among them: every parent ends succeeded, counted."""
    first = stores[0]
    shards = FanOut(kind=FanOutKind.SHARDS, shards=12)
    parents = [d.id for d in await first.defer([run(fanout=shards) for _ in range(4)], now)]
    map_parents = [d.id for d in await first.defer([run("maps") for _ in range(2)], now)]
    mapping = await first.claim(request("mapper", limit=10, queue="maps"), now)
    assert [c.run_id for c in mapping] == map_parents
    for parent in mapping:
        kids = [run(parent_id=parent.run_id, child_index=i, args_json=f"[{i}]") for i in range(12)]
        assert await first.spawn(parent, kids, None, now) == 12
    claims = [await s.claim(request(f"w{i}", limit=12), now + 1) for i, s in enumerate(stores)]
    held = sorted((c for batch in claims for c in batch), key=lambda c: c.run_id)
    assert len(held) == 4 * 12 + 2 * 12
    # Any store may end an attempt it was handed (the fence decides): every batch holds
    # children of every parent.
    batches = [[succeeded(c) for c in held[i :: len(stores)]] for i in range(len(stores))]
    assert all(
        {c.parent_id for c in held[i :: len(stores)]} == {*parents, *map_parents}
        for i in range(len(stores))
    )
    for parent in mapping:
        rng.choice(batches).append(succeeded(parent))
    for batch in batches:
        rng.shuffle(batch)
    async with asyncio.timeout(60), asyncio.TaskGroup() as group:
        ending = [
            group.create_task(s.complete(batch, now + 2))
            for s, batch in zip(stores, batches, strict=True)
        ]
    assert all(all(task.result()) for task in ending)
    for ended in await first.get_runs([*parents, *map_parents]):
        assert ended.state is RunState.SUCCEEDED, ended
        assert ended.children is not None
        assert (ended.children.ended, ended.children.succeeded) == (12, 12)
