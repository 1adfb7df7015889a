"""The worker engine on a real SQLite file: timeouts, cancels, logs, retries, drains."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from apps import worker_app as tasks
from cronbus import App, AttemptOutcome, RunState, Worker
from cronbus.worker import execution

from .conftest import until


async def test_sync_and_async_tasks_succeed(app: App, worker: Worker, tmp_path: Path) -> None:
    path = str(tmp_path / "out")
    handles = [await tasks.record.defer_async(n, path) for n in range(20)]
    handles.append(await tasks.async_sleep.defer_async(0.01))
    runs = [await h.wait_async(10) for h in handles]
    assert [r.state for r in runs] == [RunState.SUCCEEDED] * 21
    assert [r.result for r in runs] == [*range(20), "woke"]
    assert sorted(Path(path).read_text().split()) == sorted(str(n) for n in range(20))


async def test_thread_timeout_interrupts_python_code(app: App, worker: Worker) -> None:
    handle = await tasks.busy_loop.defer_async(60.0)
    run = await handle.wait_async(10, raise_error=False)
    assert run.state is RunState.DEAD
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.TIMED_OUT
    assert attempt.finished_at is not None
    assert attempt.finished_at - attempt.started_at < 5
    # The interrupted thread is not left running: the leak count drops back to zero.
    await until(lambda: _true(worker.executor.leaked == 0))


async def test_thread_timeout_sets_the_cancel_token(
    app: App, worker: Worker, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    handle = await tasks.polite_wait.defer_async(str(path), 60.0)
    assert (await handle.wait_async(10, raise_error=False)).state is RunState.DEAD
    await until(lambda: _true(path.exists()))
    assert path.read_text().strip() == "token:timeout"


async def test_async_timeout_cancels_the_coroutine(app: App, worker: Worker) -> None:
    handle = await tasks.async_sleep.defer_async(60.0)
    run = await handle.wait_async(10, raise_error=False)
    assert run.state is RunState.DEAD
    assert run.error is not None
    assert run.error.type == "TimeoutError"
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.TIMED_OUT


async def test_process_timeout_kills_the_child(app: App, worker: Worker, tmp_path: Path) -> None:
    path = tmp_path / "pid"
    handle = await tasks.process_sleep.defer_async(str(path), 60.0)
    run = await handle.wait_async(15, raise_error=False)
    assert run.state is RunState.DEAD
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.TIMED_OUT
    pid = int(path.read_text().split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_cancel_a_running_run(
    app: App, worker: Worker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The task answers the cancel token itself; on a machine whose cores are held by other
    # work its thread may wake later than the half second after which Interrupted is raised.
    monkeypatch.setattr(execution, "THREAD_POLITE_SECONDS", 20.0)
    path = tmp_path / "cancel"
    handle = await tasks.wait_for_cancel.defer_async(str(path), 60.0)
    await until(lambda: _true(path.exists()))
    assert await handle.cancel_async() is RunState.CANCELLING
    run = await handle.wait_async(30, raise_error=False)
    assert run.state is RunState.CANCELLED
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.CANCELLED
    assert path.read_text().split() == ["started", "cancelled"]


async def test_cancel_a_queued_run_is_immediate(app: App) -> None:
    handle = await tasks.noop.defer_async(delay=60)
    assert await app.store.cancel(handle.id, app.clock.now()) is RunState.CANCELLED
    assert (await handle.fetch_async()).state is RunState.CANCELLED


async def test_logs_and_stdout_are_kept_with_the_attempt(app: App, worker: Worker) -> None:
    handle = await tasks.chatty.defer_async(3)
    assert (await handle.wait_async(10, raise_error=False)).state is RunState.SUCCEEDED
    (attempt,) = await app.store.list_attempts(handle.id)
    assert "line 2" in attempt.logs
    assert "WARNING apps.chatty: record 2" in attempt.logs


async def test_long_logs_are_truncated_and_marked(app: App, worker: Worker) -> None:
    handle = await tasks.chatty.defer_async(20_000)
    assert (await handle.wait_async(20, raise_error=False)).state is RunState.SUCCEEDED
    (attempt,) = await app.store.list_attempts(handle.id)
    assert len(attempt.logs.encode()) < app.settings.log_limit + 200
    assert "truncated" in attempt.logs.splitlines()[-1]


async def test_retries_then_dead_letter_with_traceback(app: App, worker: Worker) -> None:
    handle = await tasks.always_fails.defer_async("nope")
    await until(lambda: _state_is(handle.fetch_async, RunState.SCHEDULED))
    run = await handle.fetch_async()
    assert run.eta > app.clock.now() + 5  # backoff of 10 s, no jitter
    assert run.error is not None
    assert run.error.type == "ValueError"
    assert "raise ValueError(message)" in run.error.traceback


async def test_drain_finishes_running_attempts(app: App, tmp_path: Path) -> None:
    path = tmp_path / "drain"
    w = Worker(app, concurrency=2)
    running = asyncio.create_task(w.run())
    handle = await tasks.started_then_sleep.defer_async(str(path), 0.3)
    await until(lambda: _true(path.exists()))
    w.request_stop()
    await asyncio.wait_for(running, 10)
    assert (await handle.fetch_async()).state is RunState.SUCCEEDED


async def test_drain_past_grace_requeues(app: App, tmp_path: Path) -> None:
    path = tmp_path / "requeue"
    app.settings = app.settings.with_overrides(grace_seconds=0.1)
    w = Worker(app, concurrency=2)
    running = asyncio.create_task(w.run())
    handle = await tasks.wait_for_cancel.defer_async(str(path), 60.0)
    await until(lambda: _true(path.exists()))
    w.request_stop()
    await asyncio.wait_for(running, 10)
    run = await handle.fetch_async()
    assert run.state is RunState.QUEUED
    (attempt,) = await app.store.list_attempts(handle.id)
    assert attempt.outcome is AttemptOutcome.LOST
    assert attempt.error is not None
    assert attempt.error.type == "WorkerShutdown"


async def test_idle_worker_is_woken_not_polled(app: App, worker: Worker, tmp_path: Path) -> None:
    app.settings = app.settings.with_overrides(poll_seconds=30.0)
    await asyncio.sleep(0)  # let the worker go idle on its listener
    path = str(tmp_path / "wake")
    started = app.clock.now()
    run = await (await tasks.record.defer_async(1, path)).wait_async(5)
    assert run.state is RunState.SUCCEEDED
    assert app.clock.now() - started < 1.0  # far below the 1 s poll of the fixture


async def _state_is(fetch: object, state: RunState) -> bool:
    run = await fetch()  # type: ignore[operator]
    return bool(run.state is state)


async def _true(value: bool) -> bool:
    return value
