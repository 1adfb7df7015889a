"""Acceptance: an operator's drain of the worker of a ``cronbus server`` (``cronbus workers drain
ID``) stops the whole server gracefully, as SIGTERM does: the running attempt finishes, every
role stops (the API too), and the process exits with status 0.

A real ``cronbus server --api-port 0`` process on an SQLite file; conditions are polled with
deadlines.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from apps import worker_app as tasks
from cluster.conftest import TESTS, until, wait_exit
from cronbus import App, RunState
from cronbus.store import open_store

DEADLINE_SECONDS = 60.0
ATTEMPT_SECONDS = 1.5
"""How long the run held while the drain is asked takes: it must finish, not be requeued."""


@pytest.fixture
async def url(tmp_path: Path) -> str:
    """A migrated SQLite file (the server and the test share it)."""
    url = f"sqlite:///{tmp_path / 'cronbus.db'}"
    store = open_store(url)
    await store.migrate()
    return url


def environment() -> dict[str, str]:
    """The test's environment without CRONBUS_* settings, with the test apps importable."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    return {**kept, "PYTHONPATH": os.pathsep.join([str(TESTS), kept.get("PYTHONPATH", "")])}


@pytest.fixture
def server(url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A ``cronbus server`` process on the store (killed at the end if still alive), and the
    file its output goes to."""
    log = tmp_path / "server.log"
    more = ["--store", url, "--api-port", "0"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cronbus", "server", "--app", "apps.worker_app:app", *more],
            env=environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
async def app(url: str) -> AsyncIterator[App]:
    """The server's app, open in the test process."""
    tasks.app.use_store(url)
    async with tasks.app:
        yield tasks.app


async def cronbus(*args: str) -> tuple[int, str]:
    """Run ``cronbus ARGS`` to the end without blocking the loop: status and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        *args,
        env=environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), DEADLINE_SECONDS)
    return int(proc.returncode or 0), out.decode()


async def test_draining_the_servers_worker_stops_the_server_gracefully(
    app: App, server: tuple[subprocess.Popen[bytes], Path], url: str, tmp_path: Path
) -> None:
    proc, log = server
    found: list[str] = []

    async def listening() -> bool:
        found[:] = re.findall(r"listening on (http://\S+)", log.read_text(errors="replace"))
        return bool(found) or proc.poll() is not None

    await until(listening, DEADLINE_SECONDS)
    assert found, log.read_text()
    async with httpx.AsyncClient(base_url=found[0]) as client:
        assert (await client.get("/v1/health")).status_code == 200

    out = tmp_path / "out"
    handle = await tasks.started_then_sleep.defer_async(str(out), ATTEMPT_SECONDS)

    async def started() -> bool:
        return out.exists() and "started" in out.read_text()

    await until(started, DEADLINE_SECONDS)
    live = await app.store.list_workers(app.clock.now())
    (worker,) = [w for w in live if w.pid == proc.pid]

    status, said = await cronbus("workers", "drain", worker.id, "--store", url)
    assert status == 0, said
    assert await wait_exit(proc, DEADLINE_SECONDS) == 0, log.read_text()

    # Graceful: the attempt held when the drain was asked ran to its end.
    run = await handle.fetch_async()
    assert run.state is RunState.SUCCEEDED, run
    assert run.attempts == 1
    text = log.read_text()
    assert "drain requested by an operator" in text
    assert "stopping the other roles" in text
    # Every role stopped: the API no longer answers.
    async with httpx.AsyncClient(base_url=found[0]) as client:
        with pytest.raises(httpx.TransportError):
            await client.get("/v1/health")
