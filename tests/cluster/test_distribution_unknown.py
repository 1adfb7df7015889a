"""A rolling deploy on SQLite and PostgreSQL: a run of a task only a new worker knows waits
(queued, not dead) while workers that do not know it run other work, then succeeds on the new
worker when it starts."""

from __future__ import annotations

import time

import pytest

from apps import distribution_app as dist
from cronbus import App, RunState

from .distribution_harness import (
    Fleet,
    all_succeeded,
    app,
    by_pid,
    dist_url,
    fleet,
    registered,
)

__all__ = ["app", "dist_url", "fleet"]  # fixtures
pytestmark = pytest.mark.slow


async def test_a_task_only_a_new_worker_knows_waits_for_it(app: App, fleet: Fleet) -> None:
    old = [fleet.start(f"w{n}") for n in range(3)]
    await registered(app, fleet, *old)
    late = await dist.late_task().defer_async("new")
    # Deferred after it, in the same queue: once these ran, the old workers passed it over.
    others = await dist.where.defer_many_async([[f"o{n}"] for n in range(30)])
    await all_succeeded(app, fleet, [h.id for h in others])

    run = await late.fetch_async()
    assert run.state is RunState.QUEUED, run
    assert run.attempts == 0
    assert await app.store.unknown_tasks(time.time()) == ["dist.late"]
    assert not fleet.records("late")

    new = fleet.start("w3", env={dist.LATE_ENV: "1"})
    (new_id,) = await registered(app, fleet, new)
    run = await late.wait_async(timeout=30)
    assert run.state is RunState.SUCCEEDED
    assert [by_pid([new_id], [new])[r["pid"]] for r in fleet.records("late")] == [new_id]
    assert await app.store.unknown_tasks(time.time()) == []
