"""Acceptance: after a lost attempt, the worker's log, ``runs show`` and ``runs list`` agree.

Attempts are numbered 1, 2, ... in the order they started, lost ones included (``runs show``,
the ATTEMPTS column of ``runs list``); tries count the retry budget, which a lost attempt does
not use (``runs show`` says "2 attempts: try 1 of 1, 1 lost", the worker's log "attempt 2 (try 1 of
1)").

The lost attempt is real: a claim whose holder never renews its lease, reaped by a real
``cronbus worker`` process, which then runs the run again.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from apps import worker_app as tasks
from cluster.conftest import Workers, until
from cronbus import App, AttemptOutcome, RunState
from cronbus.events.records import EventRecord, SubscriptionSpec
from cronbus.model import ClaimRequest, QueueShare
from cronbus.worker.outcomes import RUNS_TOPIC

DEADLINE_SECONDS = 60.0
LEASE = "2"


@pytest.fixture
def workers(sqlite_url: str, tmp_path: Path) -> Iterator[Workers]:
    """``cronbus worker`` subprocesses on the test's SQLite file, killed at the end."""
    pool = Workers(sqlite_url, tmp_path)
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture
async def app(sqlite_url: str) -> AsyncIterator[App]:
    """The workers' app, open in the test process."""
    tasks.app.use_store(sqlite_url)
    async with tasks.app:
        yield tasks.app


async def cronbus(*args: str) -> str:
    """Run ``cronbus ARGS`` to the end at 200 columns; its stdout (status 0 checked)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        *args,
        env={**env, "COLUMNS": "200"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(DEADLINE_SECONDS):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def lost_then_succeeded(app: App, workers: Workers) -> int:
    """A run whose first attempt is lost (its holder vanished) and whose second succeeds."""
    handle = await tasks.noop.defer_async()
    ghost = ClaimRequest(
        worker_id="ghost", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=0.2
    )
    (claimed,) = await app.store.claim(ghost, app.clock.now())
    assert claimed.run_id == handle.id
    workers.start(concurrency=1, CRONBUS_LEASE_SECONDS=LEASE)

    async def succeeded() -> bool:
        return (await handle.fetch_async()).state is RunState.SUCCEEDED

    await until(succeeded, timeout=DEADLINE_SECONDS)
    return handle.id


async def test_runs_show_and_runs_list_agree_after_a_lost_attempt(
    app: App, workers: Workers, sqlite_url: str
) -> None:
    run_id = await lost_then_succeeded(app, workers)
    first, second = await app.store.list_attempts(run_id)
    assert (first.number, first.worker_id, first.outcome) == (1, "ghost", AttemptOutcome.LOST)
    assert (second.number, second.outcome) == (2, AttemptOutcome.SUCCEEDED)

    shown: dict[str, Any] = json.loads(await cronbus("runs", "show", str(run_id), "--json",
                                                     "--store", sqlite_url))  # fmt: skip
    assert [a["number"] for a in shown["attempts"]] == [1, 2]
    assert shown["attempt_count"] == 2
    text = await cronbus("runs", "show", str(run_id), "--store", sqlite_url)
    assert "2 attempts: try 1 of 1, 1 lost" in text
    table = await cronbus("runs", "list", "--store", sqlite_url)
    assert table.split()[5] == "ATTEMPTS"
    (row,) = [line.split() for line in table.splitlines() if line.split()[:1] == [str(run_id)]]
    assert row[5] == "2"  # the number of the latest attempt, as in `runs show`


async def test_the_worker_log_counts_tries_as_runs_show_does(
    app: App, workers: Workers, tmp_path: Path
) -> None:
    run_id = await lost_then_succeeded(app, workers)
    log = tmp_path / "worker-0.log"
    line = f"run {run_id} apps.worker_app.noop attempt 2 (try 1 of 1) succeeded"

    async def logged() -> bool:
        return line in log.read_text()

    await until(logged, timeout=DEADLINE_SECONDS)
    assert "attempt 1 " not in log.read_text()  # no number that `runs show` contradicts


async def test_the_worker_log_numbers_the_attempt_as_runs_show_does(
    app: App, workers: Workers, tmp_path: Path
) -> None:
    run_id = await lost_then_succeeded(app, workers)
    log = tmp_path / "worker-0.log"

    async def logged() -> bool:
        return f"run {run_id} apps.worker_app.noop" in log.read_text()

    await until(logged, timeout=DEADLINE_SECONDS)
    assert f"run {run_id} apps.worker_app.noop attempt 2 (try 1 of 1) succeeded" in log.read_text()


async def test_the_run_outcome_event_numbers_the_attempt_as_runs_show_does(
    app: App, workers: Workers
) -> None:
    # A subscriber of cronbus.runs, so that the worker publishes outcomes (nobody pushes them:
    # the test reads the topic).
    watch = SubscriptionSpec(name="watch", topic=RUNS_TOPIC, target={"kind": "handler",
                             "handler": "watch"})  # fmt: skip
    await app.store.put_subscription(watch, app.clock.now())
    run_id = await lost_then_succeeded(app, workers)

    async def published() -> list[EventRecord]:
        events = await app.store.read_events(RUNS_TOPIC, 0, 100)
        return [e for e in events if e.subject == f"run/{run_id}"]

    async def arrived() -> bool:
        return bool(await published())

    await until(arrived, timeout=DEADLINE_SECONDS)
    (event,) = await published()
    assert event.type == "run.succeeded"
    assert json.loads(event.data_json)["attempt"] == 2
