"""Acceptance: ``cronbus worker`` without ``--queues`` serves every queue (issue 9, item 11),
``workers list`` shows it as ``*``, and ``runs show`` says when no live worker serves the queue
of a waiting run; real subprocesses on an SQLite file and on a PostgreSQL schema.

The README's own example defers to ``bulk-emails``, a queue no task names: before, a worker
started without ``--queues`` served only its tasks' queues, and that run waited for ever.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from apps import worker_app as tasks
from contract.pg import pg_store_url
from cronbus import App, RunState
from cronbus.model import WorkerInfo, WorkerState

TESTS = Path(__file__).resolve().parent.parent
DEADLINE = 60.0
NOBODY = "no live worker serves queue 'bulk-emails'"


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'cronbus.db'}"


@pytest.fixture
async def app(url: str) -> AsyncIterator[App]:
    """The workers' app, open in the test process to defer runs and read the store."""
    tasks.app.use_store(url)
    async with tasks.app:
        yield tasks.app


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])}


class Processes:
    """``cronbus worker`` subprocesses, each stopped (then killed) at the end of the test."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url, self.logs = url, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        command = ["worker", "--app", "apps.worker_app:app", "--store", self.url, *args]
        with open(self.logs / f"worker-{len(self.procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cronbus", *command],
                env=environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def processes(url: str, tmp_path: Path) -> Iterator[Processes]:
    pool = Processes(url, tmp_path)
    try:
        yield pool
    finally:
        pool.stop_all()


async def cronbus(*args: str) -> tuple[int, str, str]:
    """Run ``cronbus ARGS`` to the end without blocking the loop: status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        *args,
        env=environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(DEADLINE):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def ok(*args: str) -> str:
    status, out, err = await cronbus(*args)
    assert status == 0, err
    assert "Traceback" not in err
    return out


async def workers_json(url: str) -> list[dict[str, Any]]:
    document: list[dict[str, Any]] = json.loads(
        await ok("workers", "list", "--store", url, "--json")
    )
    return document


async def alive(url: str, pid: int) -> dict[str, Any]:
    """The worker with ``pid`` once ``workers list`` shows it alive; fail at the deadline."""
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while True:
        found = [w for w in await workers_json(url) if w["pid"] == pid and w["state"] == "alive"]
        if found:
            return found[0]
        assert asyncio.get_running_loop().time() < deadline, "the worker never came up"


async def shown(url: str, run_id: int) -> tuple[str, dict[str, Any]]:
    """``runs show ID`` as text and as JSON."""
    text = await ok("runs", "show", str(run_id), "--store", url)
    document: dict[str, Any] = json.loads(
        await ok("runs", "show", str(run_id), "--store", url, "--json")
    )
    return text, document


async def register(app: App, queues: list[str], state: WorkerState, silent: float = 0.0) -> None:
    """Put a worker in the registry as ``cronbus worker`` does, silent for ``silent`` seconds."""
    seen = app.clock.now() - silent
    await app.store.register_worker(
        WorkerInfo(
            id=f"w-{state.value}-{silent:g}-{','.join(queues)}",
            host="elsewhere",
            pid=1,
            queues=queues,
            concurrency=4,
            version="0.1.0",
            started_at=seen,
            heartbeat_at=seen,
            state=state,
        )
    )


# -- the worker ----------------------------------------------------------------------------------
@pytest.mark.slow
async def test_a_worker_without_queues_serves_the_readme_queue(
    app: App, processes: Processes, url: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    proc = processes.worker("--concurrency", "4")
    seen = await alive(url, proc.pid)
    assert seen["queues"] == ["*"]
    table = await ok("workers", "list", "--store", url)
    header, row = table.splitlines()[:2]
    assert "QUEUES" in header
    assert " * " in f" {row} ", table
    assert "* (every queue)" in await ok("workers", "show", seen["id"], "--store", url)

    # Three queues, none used before the worker started; bulk-emails is the README's.
    handles = [
        await tasks.record.defer_async(n, out, queue=queue)
        for n, queue in enumerate(["default", "emails", "bulk-emails"])
    ]
    for handle in handles:
        assert (await handle.wait_async(DEADLINE)).state is RunState.SUCCEEDED

    # A waiting run whose queue a live worker serves: nothing to warn about.
    later = await tasks.record.defer_async(9, out, queue="bulk-emails", delay=3600)
    text, document = await shown(url, later.id)
    assert "warning" not in text
    assert document["warnings"] == []

    # The worker stops (SIGTERM: it drains and deregisters): now nobody serves the queue.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(DEADLINE) == 0
    text, document = await shown(url, later.id)
    assert f"warning: {NOBODY}" in text
    assert document["warnings"][0].startswith(NOBODY)


@pytest.mark.slow
async def test_a_worker_with_named_queues_leaves_the_warning_on(
    app: App, processes: Processes, url: str, tmp_path: Path
) -> None:
    proc = processes.worker("--queues", "default,emails:3")
    seen = await alive(url, proc.pid)
    assert seen["queues"] == ["default", "emails"]
    bulk = await tasks.record.defer_async(1, str(tmp_path / "b"), queue="bulk-emails")
    mine = await tasks.record.defer_async(2, str(tmp_path / "d"), queue="emails", delay=3600)
    text, document = await shown(url, bulk.id)
    assert document["state"] == "queued"
    assert f"warning: {NOBODY}" in text
    assert "without --queues serves every queue" in text
    text, document = await shown(url, mine.id)
    assert (document["state"], document["warnings"]) == ("scheduled", [])
    assert "warning" not in text


# -- the warning, against registered workers -----------------------------------------------------
async def test_no_worker_at_all_is_warned_about(app: App, url: str, tmp_path: Path) -> None:
    handle = await tasks.record.defer_async(1, str(tmp_path / "x"), queue="bulk-emails")
    text, document = await shown(url, handle.id)
    assert f"warning: {NOBODY}" in text
    assert len(document["warnings"]) == 1


async def test_only_alive_workers_within_a_lease_count(app: App, url: str, tmp_path: Path) -> None:
    handle = await tasks.record.defer_async(1, str(tmp_path / "x"), queue="bulk-emails")
    await register(app, ["*"], WorkerState.ALIVE, silent=300.0)  # lost: silent past a lease
    await register(app, ["*"], WorkerState.DRAINING)  # claims nothing more
    await register(app, ["*"], WorkerState.STOPPED)
    await register(app, ["default"], WorkerState.ALIVE)  # another queue
    _, document = await shown(url, handle.id)
    assert document["warnings"]
    assert document["warnings"][0].startswith(NOBODY)
    await register(app, ["default", "bulk-emails"], WorkerState.ALIVE)
    _, document = await shown(url, handle.id)
    assert document["warnings"] == []


async def test_a_finished_run_has_no_warning(app: App, url: str, tmp_path: Path) -> None:
    handle = await tasks.record.defer_async(1, str(tmp_path / "x"), queue="bulk-emails")
    await app.store.cancel(handle.id, app.clock.now())
    text, document = await shown(url, handle.id)
    assert document["state"] == "cancelled"
    assert (document["warnings"], "warning" in text) == ([], False)


async def test_a_star_with_other_queues_is_one_error_line(url: str) -> None:
    status, out, err = await cronbus(
        "worker", "--app", "apps.worker_app:app", "--store", url, "--queues", "*,emails:3"
    )
    assert (status, out) == (1, "")
    assert err.strip().splitlines() == [
        "error: --queues: '*' (every queue) cannot be weighted or listed with other queues in "
        "'*,emails:3'; give '*' alone, or list the queues"
    ]
