"""A SIGKILLed worker is ``lost`` by its own registered lease, at every door, as the reaper
judges it: ``cronbus workers list``, GET /v1/workers and the console's workers page, on each
store, while the command, the API and the console run with the default 30 s lease."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from apps import worker_app as tasks
from console.conftest import Console
from cronbus import App, AttemptOutcome
from integration.test_api_support import Api, served

from .conftest import TESTS, Workers, until

LEASE = 3.0
"""The lease the worker registers: well under the 30 s the other processes default to."""


@pytest.fixture
async def api(each_store_url: str) -> AsyncIterator[Api]:
    """The worker app's API and console, served on the test's store (default settings)."""
    tasks.app.use_store(each_store_url)
    async with served(tasks.app) as found:
        yield found


@pytest.fixture
def pool(each_store_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker subprocesses on the test's store, all killed at the end."""
    workers = Workers(each_store_url, tmp_path)
    try:
        yield workers
    finally:
        workers.stop_all()


async def cli_states(url: str) -> dict[int, str]:
    """``cronbus workers list --json``, run as a user would (no lease in its environment):
    each worker's state by pid."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        "workers",
        "list",
        "--json",
        "--store",
        url,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return {w["pid"]: w["state"] for w in json.loads(out)}


async def api_states(api: Api) -> dict[int, str]:
    """GET /v1/workers: each worker's state by pid."""
    response = await api.call("GET", "/v1/workers")
    assert response.status_code == 200, response.text
    return {v["worker"]["pid"]: v["worker"]["state"] for v in response.json()["items"]}


async def console_text(api: Api) -> str:
    """The console's workers page, as a logged-in reader sees it."""
    browser = await Console(api).login("read")
    try:
        response = await browser.get("/workers")
        assert response.status_code == 200
        return response.text
    finally:
        await browser.close()


async def test_a_killed_worker_is_lost_within_its_own_lease_at_every_door(
    api: Api, pool: Workers, each_store_url: str, tmp_path: Path
) -> None:
    app: App = api.app
    out = tmp_path / "started"
    held = await tasks.started_then_sleep.defer_async(str(out), 120.0)
    victim = pool.start(concurrency=1, CRONBUS_LEASE_SECONDS=str(LEASE))

    async def started() -> bool:
        return out.exists()

    await until(started, timeout=60)
    assert (await cli_states(each_store_url))[victim.pid] == "alive"
    assert (await api_states(api))[victim.pid] == "alive"

    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed = time.monotonic()
    # Another worker (same lease) reaps the run: the reaper's view of the victim.
    survivor = pool.start(concurrency=1, CRONBUS_LEASE_SECONDS=str(LEASE))

    async def cli_says_lost() -> bool:
        return (await cli_states(each_store_url))[victim.pid] == "lost"

    await until(cli_says_lost, timeout=25)
    # Its lease and a heartbeat interval, with room for a busy machine: far from 30 s.
    assert time.monotonic() - killed < 20
    assert (await api_states(api))[victim.pid] == "lost"

    async def survivor_alive() -> bool:
        return (await api_states(api)).get(survivor.pid) == "alive"

    await until(survivor_alive, timeout=30)

    async def reaped() -> bool:
        attempts = await app.store.list_attempts(held.id)
        return any(a.outcome is AttemptOutcome.LOST for a in attempts)

    await until(reaped, timeout=30)
    # Once the reaper took its run back, no door calls the victim alive.
    assert (await cli_states(each_store_url))[victim.pid] == "lost"
    assert (await api_states(api))[victim.pid] == "lost"
    assert _console_state(await console_text(api), victim.pid) == "lost"


def _console_state(page: str, pid: int) -> str:
    """The state the console's workers page shows in the row of the worker ``pid``."""
    for chunk in page.split("<tr data-worker=")[1:]:
        row = chunk[: chunk.index("</tr>")]
        if f"/ {pid}</span>" in row:
            cell = row.split('class="worker-state">', 1)[1].split("</td>", 1)[0]
            return next(s for s in ("alive", "draining", "lost", "stopped") if s in cell)
    raise AssertionError(f"no row for pid {pid}")
