"""Acceptance: a second Ctrl-C really stops ``cronbus worker``, even while a thread task is
blocked in C code (``time.sleep``), which Python cannot interrupt: the thread is abandoned,
its run queued again, and the process exits at once, saying so."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from apps import worker_app as tasks
from cluster.conftest import Workers, until, wait_exit
from cronbus import App, AttemptOutcome, RunState

DEADLINE_SECONDS = 60.0
PROMPT_SECONDS = 5.0
"""How soon after the second signal the process must be gone (the task sleeps 10 minutes)."""


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


def log_has(path: Path, text: str) -> bool:
    """True when the worker's log holds ``text``."""
    return path.exists() and text in path.read_text(errors="replace")


async def test_second_sigint_exits_at_once_despite_a_thread_blocked_in_c(
    app: App, workers: Workers, tmp_path: Path
) -> None:
    out = tmp_path / "slow"
    handle = await tasks.started_then_sleep.defer_async(str(out), 600.0)
    proc = workers.start(concurrency=2, CRONBUS_GRACE_SECONDS="300")
    log = tmp_path / "worker-0.log"

    async def started() -> bool:
        return out.exists() and "started" in out.read_text()

    async def draining() -> bool:
        return log_has(log, "draining")

    await until(started, timeout=DEADLINE_SECONDS)
    proc.send_signal(signal.SIGINT)  # drains: the grace (300 s) would let it sleep on
    await until(draining, timeout=DEADLINE_SECONDS)
    assert proc.poll() is None
    second = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert await wait_exit(proc, DEADLINE_SECONDS) == 0
    assert time.monotonic() - second < PROMPT_SECONDS

    text = log.read_text(errors="replace")
    assert "1 thread task(s) still running, blocked outside Python code; abandoned" in text
    assert "exiting now, without waiting for 1 abandoned thread task(s)" in text
    run = await handle.fetch_async()
    assert run.state is RunState.QUEUED  # requeued, not lost with the process
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.LOST
    assert attempt.error is not None
    assert attempt.error.type == "WorkerShutdown"
    (worker,) = await app.store.list_workers(app.clock.now())
    assert worker.state.value == "stopped"


async def test_a_clean_stop_exits_normally(app: App, workers: Workers, tmp_path: Path) -> None:
    out = tmp_path / "short"
    handle = await tasks.started_then_sleep.defer_async(str(out), 0.2)
    proc = workers.start(concurrency=2)
    log = tmp_path / "worker-0.log"

    async def succeeded() -> bool:
        return (await handle.fetch_async()).state is RunState.SUCCEEDED

    await until(succeeded, timeout=DEADLINE_SECONDS)
    proc.send_signal(signal.SIGINT)
    assert await wait_exit(proc, DEADLINE_SECONDS) == 0
    text = log.read_text(errors="replace")
    assert "stopped" in text
    assert "abandoned" not in text
