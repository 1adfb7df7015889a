"""Acceptance: ``cronbus workers``, run as subprocesses against real ``cronbus worker`` processes,
on an SQLite file and on a PostgreSQL schema.

What the command reports is checked against what the workers really are: alive while serving,
with the run they execute; draining after SIGTERM, still holding it; lost after SIGKILL once a
lease has passed without a heartbeat, while another worker requeues and re-executes its run.
Conditions are polled with deadlines, never waited for with sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apps import worker_app as tasks
from cluster.conftest import Workers, until, wait_exit
from contract.pg import pg_store_url
from cronbus import App, AttemptOutcome, RunState
from cronbus.store import open_store

DEADLINE_SECONDS = 60.0
SLOW_SECONDS = 120.0
"""How long the slow task runs: longer than any test, which ends it by signals."""
LEASE = "3"
"""The lease of the test that kills a worker: short, so it is found lost quickly."""


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: an SQLite file, or a new schema on the test PostgreSQL (never skipped in
    CI, where ``CI=true`` turns an unreachable server into a failure)."""
    url = (
        await pg_store_url(request)
        if request.param == "postgres"
        else f"sqlite:///{tmp_path / 'cronbus.db'}"
    )
    # `workers list` opens only a store that exists: create it before any worker starts.
    store = open_store(url)
    await store.migrate()
    return url


@pytest.fixture
def workers(url: str, tmp_path: Path) -> Iterator[Workers]:
    """``cronbus worker`` subprocesses on the test's store, all killed at the end."""
    pool = Workers(url, tmp_path)
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture
async def app(url: str) -> AsyncIterator[App]:
    """The workers' app, open in the test process to defer runs and read the store."""
    tasks.app.use_store(url)
    async with tasks.app:
        yield tasks.app


def environment(**settings: str) -> dict[str, str]:
    """The test's environment without CRONBUS_* (and COLUMNS), plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    return {**env, **settings}


async def cronbus(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``cronbus ARGS`` to the end without blocking the loop: status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        *args,
        env=env or environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(DEADLINE_SECONDS):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def listed(url: str, *args: str, lease: str = "30") -> list[dict[str, Any]]:
    """``cronbus workers list --json`` with ``args``, seen with a lease of ``lease`` seconds."""
    status, out, err = await cronbus(
        "workers",
        "list",
        "--store",
        url,
        "--json",
        *args,
        env=environment(CRONBUS_LEASE_SECONDS=lease),
    )
    assert status == 0, err
    assert "Traceback" not in err
    document: list[dict[str, Any]] = json.loads(out)
    return document


async def poll_listed(
    url: str, done: Callable[[list[dict[str, Any]]], bool], *args: str, lease: str = "30"
) -> list[dict[str, Any]]:
    """Run ``workers list --json`` until ``done`` accepts what it prints; fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_SECONDS
    while True:
        seen = await listed(url, *args, lease=lease)
        if done(seen):
            return seen
        assert loop.time() < deadline, f"still waiting after {DEADLINE_SECONDS}s: {seen}"


def started(path: Path) -> Callable[[], Awaitable[bool]]:
    """A check that the slow task wrote ``started`` to ``path``: its attempt is running."""

    async def check() -> bool:
        return path.exists() and "started" in path.read_text().split()

    return check


def by_pid(seen: list[dict[str, Any]], pid: int) -> dict[str, Any]:
    (worker,) = [w for w in seen if w["pid"] == pid]
    return worker


def holds(worker: dict[str, Any], run_id: int) -> bool:
    return run_id in [run["id"] for run in worker["running"]]


# -- alive, then draining, then stopped ----------------------------------------------------------
@pytest.mark.slow
async def test_a_worker_is_listed_alive_then_draining_then_stopped(
    app: App, workers: Workers, url: str, tmp_path: Path
) -> None:
    out = tmp_path / "slow"
    handle = await tasks.wait_for_cancel.defer_async(str(out), SLOW_SECONDS)
    proc = workers.start(concurrency=2, queues="default,other:2", CRONBUS_LEASE_SECONDS="10")
    await until(started(out), timeout=DEADLINE_SECONDS)

    (worker,) = await listed(url, lease="10")
    assert (worker["pid"], worker["state"]) == (proc.pid, "alive")
    assert (worker["queues"], worker["concurrency"]) == (["default", "other"], 2)
    assert all(worker[field] for field in ("host", "version", "started_at"))
    assert 0 <= worker["heartbeat_age"] < 10
    (running,) = worker["running"]
    assert running["id"] == handle.id
    assert running["task"] == "apps.worker_app.wait_for_cancel"
    assert (running["state"], running["attempt"]) == ("running", 1)
    assert await listed(url, "--state", "lost,draining", lease="10") == []

    # The table says the same, and `show` names the run too.
    status, table, _ = await cronbus("workers", "list", "--store", url)
    assert status == 0
    assert worker["id"] in table
    assert "alive" in table
    assert f"{handle.id} apps.worker_app.wait_for_cancel" in table
    status, shown, _ = await cronbus("workers", "show", worker["id"], "--store", url, "--json")
    assert status == 0

    # A heartbeat may renew the lease between the two reads: all but its expiry must agree.
    def steady(running: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if k != "lease_expires"} for r in running]

    assert steady(json.loads(shown)["running"]) == steady(worker["running"])

    proc.send_signal(signal.SIGTERM)  # drains: the slow attempt keeps running within the grace
    (worker,) = await poll_listed(url, lambda seen: seen[0]["state"] != "alive", lease="10")
    assert worker["state"] == "draining"
    assert holds(worker, handle.id)

    proc.send_signal(signal.SIGTERM)  # the second signal ends the grace: the run is requeued
    assert await wait_exit(proc, DEADLINE_SECONDS) == 0
    assert (await handle.fetch_async()).state is RunState.QUEUED
    assert await listed(url) == []  # stopped workers are hidden...
    (stopped,) = await listed(url, "--all")  # ...unless asked for
    assert (stopped["id"], stopped["state"], stopped["running"]) == (worker["id"], "stopped", [])
    assert [w["id"] for w in await listed(url, "--state", "stopped")] == [worker["id"]]
    status, text, _ = await cronbus("workers", "list", "--store", url)
    # The requeued run waits for a worker that knows its task, and the listing says so.
    assert (status, text) == (
        0,
        "no workers (1 stopped: --all shows them)\n"
        "no worker knows task apps.worker_app.wait_for_cancel (runs waiting)\n",
    )


# -- lost, and its run re-executed elsewhere -----------------------------------------------------
@pytest.mark.slow
async def test_a_killed_worker_is_listed_lost_and_its_run_runs_elsewhere(
    app: App, workers: Workers, url: str, tmp_path: Path
) -> None:
    out = tmp_path / "slow"
    handle = await tasks.wait_for_cancel.defer_async(str(out), SLOW_SECONDS)
    victim = workers.start(concurrency=1, CRONBUS_LEASE_SECONDS=LEASE)
    await until(started(out), timeout=DEADLINE_SECONDS)
    # Started only now, so the slow run is the victim's.
    survivor = workers.start(concurrency=1, CRONBUS_LEASE_SECONDS=LEASE)
    seen = await poll_listed(url, lambda seen: len(seen) == 2, lease=LEASE)
    victim_id = by_pid(seen, victim.pid)["id"]
    assert holds(by_pid(seen, victim.pid), handle.id)

    victim.send_signal(signal.SIGKILL)
    victim.wait(DEADLINE_SECONDS)

    def moved(seen: list[dict[str, Any]]) -> bool:
        return by_pid(seen, victim.pid)["state"] == "lost" and holds(
            by_pid(seen, survivor.pid), handle.id
        )

    seen = await poll_listed(url, moved, lease=LEASE)
    lost, alive = by_pid(seen, victim.pid), by_pid(seen, survivor.pid)
    assert lost["running"] == []
    assert lost["heartbeat_age"] >= float(LEASE)
    assert alive["state"] == "alive"
    assert alive["running"][0]["attempt"] == 2
    assert [w["id"] for w in await listed(url, "--state", "lost", lease=LEASE)] == [victim_id]

    first, second = await app.store.list_attempts(handle.id)
    assert (first.worker_id, first.outcome) == (victim_id, AttemptOutcome.LOST)
    assert (second.worker_id, second.outcome) == (alive["id"], None)
    await until(lambda: _count(out, 2), timeout=DEADLINE_SECONDS)  # executed again


async def _count(path: Path, wanted: int) -> bool:
    return path.read_text().split().count("started") >= wanted


# -- errors --------------------------------------------------------------------------------------
BAD_INPUT = {
    "unknown state": (
        ("workers", "list", "--state", "sleeping", "--store", "{sqlite}"),
        "unknown state 'sleeping'",
    ),
    "unknown worker": (("workers", "show", "w-1", "--store", "{sqlite}"), "no worker has id 'w-1'"),
    "unreachable postgres": (
        ("workers", "list", "--store", "postgresql://nobody@127.0.0.1:1/none"),
        "cannot connect to PostgreSQL store 127.0.0.1:1/none",
    ),
    "missing sqlite folder": (
        ("workers", "list", "--store", "sqlite:////nonexistent/folder/cronbus.db"),
        "no folder '/nonexistent/folder'",
    ),
    "bad store url": (("workers", "list", "--store", "mysql://db/x"), "unknown scheme 'mysql'"),
    "bad label": (
        ("worker", "--app", "cronbus.demo:app", "--store", "{sqlite}", "--labels", "gpu,a b"),
        "invalid worker label 'a b'",
    ),
}


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
async def test_bad_input_is_one_line_without_traceback(
    tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    sqlite = f"sqlite:///{tmp_path / 'empty.db'}"
    await open_store(sqlite).migrate()  # an empty store, not a missing one
    status, out, err = await cronbus(*(a.replace("{sqlite}", sqlite) for a in argv))
    assert status == 1
    assert out == ""
    assert err.startswith("error: ")
    assert err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


async def test_an_empty_store_has_no_workers(tmp_path: Path) -> None:
    sqlite = f"sqlite:///{tmp_path / 'empty.db'}"
    await open_store(sqlite).migrate()
    assert await listed(sqlite) == []
    status, out, _ = await cronbus("workers", "list", "--store", sqlite)
    assert (status, out) == (0, "no workers\n")


async def test_labels_are_listed_and_silent_workers_pruned(url: str, workers: Workers) -> None:
    from cronbus.model import WorkerInfo
    from cronbus.store import open_store

    proc = workers.start(args=["--labels", "gpu,eu-west"])
    seen = await poll_listed(url, lambda ws: any(w["pid"] == proc.pid for w in ws))
    assert by_pid(seen, proc.pid)["labels"] == ["gpu", "eu-west"]
    store = open_store(url)
    await store.open()
    try:
        old = WorkerInfo(
            id="old-worker",
            host="h",
            pid=1,
            queues=["default"],
            concurrency=1,
            version="0",
            started_at=1.0,
            heartbeat_at=1.0,
        )
        await store.register_worker(old)
    finally:
        await store.close()
    status, out, _ = await cronbus("workers", "prune", "--json", "--store", url)
    assert status == 0
    assert json.loads(out) == {"removed": ["old-worker"]}
    assert [w["pid"] for w in await listed(url, "--all")] == [proc.pid]
