"""Limits across real worker processes, on SQLite and PostgreSQL: the concurrency limit is never
exceeded (the bodies record their starts and ends), per key as well, the rate limit holds per
window, and runs held back by a limit wait instead of failing."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict

import pytest

from apps import distribution_app as dist
from cronbus import App

from .distribution_harness import (
    Fleet,
    Record,
    all_succeeded,
    app,
    dist_url,
    fleet,
    max_overlap,
    registered,
)

__all__ = ["app", "dist_url", "fleet"]  # fixtures
pytestmark = pytest.mark.slow

LIMITED_RUNS = 1000
LIMITED_PAUSE = 0.005  # long enough for bodies to overlap, short enough for 1,000 of them
CUSTOMERS = 3
PER_CUSTOMER = 20
RATED_RUNS = 100


async def test_concurrency_limit_holds_over_1000_runs(app: App, fleet: Fleet) -> None:
    # 3 workers x 2 slots: twice the limit, so the limit, not the slots, is what holds, and
    # no worker alone has slots enough to reach it: the limit is kept across them.
    procs = [fleet.start(f"w{n}", concurrency=2) for n in range(3)]
    await registered(app, fleet, *procs)
    started = time.perf_counter()
    handles = await dist.limited.defer_many_async([[n, LIMITED_PAUSE] for n in range(LIMITED_RUNS)])
    await all_succeeded(app, fleet, [h.id for h in handles], timeout=90)
    seconds = time.perf_counter() - started
    records = fleet.records("limited")
    most = max_overlap(records)
    spread = sorted(Counter(r["pid"] for r in records).values())
    print(f"\nconcurrency {dist.LIMIT}: {LIMITED_RUNS} runs in {seconds:.1f} s, {most} at most")
    print(f"records per worker: {spread}")

    assert Counter(r["phase"] for r in records) == {"start": LIMITED_RUNS, "end": LIMITED_RUNS}
    assert most <= dist.LIMIT, f"{most} bodies ran at once"
    assert most >= 2, "the runs never overlapped: the test proves nothing"
    assert len({r["pid"] for r in records}) >= 2
    await no_retries(app, [h.id for h in handles])


async def test_concurrency_limit_per_key(app: App, fleet: Fleet) -> None:
    procs = [fleet.start(f"w{n}", concurrency=4) for n in range(3)]
    await registered(app, fleet, *procs)
    calls = [[f"c{c}", n, 0.02] for n in range(PER_CUSTOMER) for c in range(CUSTOMERS)]
    handles = await dist.per_customer.defer_many_async(calls)
    await all_succeeded(app, fleet, [h.id for h in handles], timeout=60)

    records = fleet.records("per_customer")
    per_key: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        per_key[record["customer"]].append(record)
    assert {key: max_overlap(found) for key, found in per_key.items()} == {
        f"c{c}": 1 for c in range(CUSTOMERS)
    }
    assert max_overlap(records) >= 2, "keys are limited apart, so customers overlap"
    await no_retries(app, [h.id for h in handles])


async def test_rate_limit_holds_per_window(app: App, fleet: Fleet) -> None:
    procs = [fleet.start(f"w{n}", concurrency=4) for n in range(3)]
    await registered(app, fleet, *procs)
    handles = await dist.rated.defer_many_async([[n] for n in range(RATED_RUNS)])
    await all_succeeded(app, fleet, [h.id for h in handles], timeout=60)

    # The claim counts starts in windows [k, k + 1) of the claiming worker's clock, the time
    # its attempt records; the bodies start a moment later, on the same machine's clock.
    claimed: Counter[int] = Counter()
    for handle in handles:
        (attempt,) = await app.store.list_attempts(handle.id)
        claimed[math.floor(attempt.started_at)] += 1
    assert max(claimed.values()) <= dist.RATE, claimed
    assert len(claimed) >= math.ceil(RATED_RUNS / dist.RATE), claimed

    starts = sorted(r["at"] for r in fleet.records("rated"))
    assert len(starts) == RATED_RUNS
    span = starts[-1] - starts[0]
    print(f"\nrate {dist.RATE}/s: {RATED_RUNS} starts over {span:.2f} s, per window {claimed}")
    # Five windows are needed, the first entered at any point of it: the last start comes at
    # least three seconds after the first (less a moment for the first body's start).
    assert span >= math.ceil(RATED_RUNS / dist.RATE) - 2 - 0.1, span
    # No bound on the bodies' starts in a sliding second: they lag their claims by the hand-off
    # to a slot, which a busy machine stretches (a fresh clone's run saw 42 body starts in one
    # second while every claim window held 20). The limit counts claims, checked per window
    # above; any second spans at most two windows, so at most twice the rate.


async def no_retries(app: App, run_ids: list[int]) -> None:
    """Every run succeeded at its first attempt: none failed for waiting on a limit."""
    runs = await app.store.get_runs(run_ids)
    assert Counter(run.attempts for run in runs) == {1: len(run_ids)}
