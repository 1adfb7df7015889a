"""A real worker's completion carries its claim's fence: when its attempt id was handed out again
(as a PostgreSQL sequence can after a crash undid the claim), its late outcome is refused.

The worker claims a run and executes it; meanwhile the test undoes the claim behind its back,
sets the attempt sequence back and claims the run as another worker, which gets the same
attempt id under another fence. The worker's heartbeat is slow (lease 60 s), so it learns
nothing before its attempt ends and its outcome reaches the store.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from cronbus import App, RunState, Worker
from cronbus.config import Settings
from cronbus.model import ClaimRequest, Outcome, QueueShare
from cronbus.states import AttemptOutcome
from integration.conftest import until

SECONDS = 5.0  # the attempt's length: ample for the test to change a few rows meanwhile


def crash_undoes_the_claim(db: Path, run_id: int, attempt_id: int) -> None:
    """What a crash can do to an asynchronous commit: the claim and its attempt are gone, and
    the next attempt gets the same id."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "UPDATE runs SET state = 'queued', attempts = 0, lease_owner = NULL, "
                "lease_expires = NULL, attempt_id = NULL, fence = NULL WHERE id = ?",
                (run_id,),
            )
            conn.execute("DELETE FROM attempts WHERE id = ?", (attempt_id,))
            conn.execute(
                "UPDATE sqlite_sequence SET seq = ? WHERE name = 'attempts'", (attempt_id - 1,)
            )
    finally:
        conn.close()


async def test_a_workers_late_outcome_under_a_repeated_attempt_id_is_refused(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cronbus.worker")
    app.settings = Settings(lease_seconds=60.0, poll_seconds=1.0, grace_seconds=5.0)
    marks = tmp_path / "marks"
    handle = await app.get_task("apps.worker_app.started_then_sleep").defer_async(
        str(marks), SECONDS
    )
    worker = Worker(app, concurrency=1, queues="default", name="A")
    running = asyncio.create_task(worker.run())
    try:

        async def started() -> bool:
            return marks.exists()

        await until(started, timeout=20)
        (old,) = await app.store.list_attempts(handle.id)
        crash_undoes_the_claim(tmp_path / "worker.db", handle.id, old.id)
        b = ClaimRequest(
            worker_id="B", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=60
        )
        (claimed,) = await app.store.claim(b, app.clock.now())
        assert claimed.attempt_id == old.id

        async def reported() -> bool:
            return any(r.name == "cronbus.worker" and "run " in r.getMessage()
                       and str(handle.id) in r.getMessage() for r in caplog.records)  # fmt: skip

        await until(reported, timeout=SECONDS * 4)
        run = await app.store.get_run(handle.id)
        assert (run.state, run.lease_owner) == (RunState.RUNNING, "B")
        assert "lease no longer held; outcome succeeded dropped" in caplog.text
        mine = Outcome(
            run_id=claimed.run_id,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.SUCCEEDED,
            result_json='"B"',
            fence=claimed.fence,
        )
        assert await app.store.complete([mine], app.clock.now()) == [True]
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 20)
