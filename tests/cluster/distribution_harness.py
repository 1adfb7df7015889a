"""What the distribution cluster tests share: a store per backend, ``cronbus worker`` processes
of ``apps.distribution_app``, and the records their task bodies append to a file.

Test modules import the fixtures they use (``dist_url``, ``app``, ``fleet``); every test runs
once on SQLite and once on PostgreSQL (skipped locally without a server, failed when
``CI=true``, as ``contract.pg`` does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from apps import distribution_app as dist
from contract.pg import pg_store_url, with_options
from cronbus import App, RunState
from cronbus.model import WorkerState

from .conftest import TESTS
from .pg_conftest import POOL_MAX, Proc, poll

LEASE = "2"
"""Workers' lease (seconds): a killed worker's runs are reaped, and its pinned runs rerouted,
within a few seconds."""
POLL = "0.5"
"""An idle worker looks again this often even without a wake-up (runs held back by a limit)."""
APP = "apps.distribution_app:app"
Record = dict[str, Any]


class Fleet:
    """``cronbus worker`` processes on one store, all writing their records to one file; none
    outlives the test."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.out = logs / "records.jsonl"
        self.procs: list[Proc] = []

    def start(
        self,
        name: str,
        *,
        labels: Sequence[str] = (),
        concurrency: int = 4,
        lease: str = LEASE,
        env: Mapping[str, str] | None = None,
    ) -> Proc:
        """Start a worker serving the default queue, with ``env`` added to its environment."""
        url = self.url
        if url.startswith("postgresql"):
            url = with_options(url, application_name=f"cronbus-{name}", pool_max=POOL_MAX)
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            dist.OUT_ENV: str(self.out),
            "CRONBUS_LEASE_SECONDS": lease,
            "CRONBUS_POLL_SECONDS": POLL,
            **(env or {}),
        }
        command = [sys.executable, "-m", "cronbus", "worker", "--app", APP, "--store", url]
        command += ["--concurrency", str(concurrency), "--queues", "default"]
        if labels:
            command += ["--labels", ",".join(labels)]
        log = self.logs / f"{name}.log"
        with open(log, "wb") as output:
            popen = subprocess.Popen(command, env=environ, stdout=output, stderr=subprocess.STDOUT)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def outputs(self) -> str:
        """Every worker's log tail, for failure messages."""
        return "\n".join(proc.output() for proc in self.procs)

    def stop_all(self) -> None:
        """SIGCONT (a stopped process is woken to die) and SIGKILL whatever still runs."""
        for proc in self.procs:
            if proc.alive:
                proc.signal(signal.SIGCONT)
                proc.kill()

    def records(self, task: str | None = None) -> list[Record]:
        """The records written so far, in the order they were appended (of ``task`` only)."""
        if not self.out.exists():
            return []
        # A line is complete once its newline is there: the last piece may still be written.
        lines = self.out.read_text().split("\n")[:-1]
        found = [json.loads(line) for line in lines]
        return [r for r in found if task is None or r["task"] == task]


async def registered(app: App, fleet: Fleet, *procs: Proc, timeout: float = 30.0) -> list[str]:
    """The worker ids of ``procs``, once each is registered alive (routing picks only those)."""
    found: dict[int, str] = {}

    async def all_alive() -> bool:
        for proc in procs:
            assert proc.alive, fleet.outputs()
        for info in await app.store.list_workers(time.time()):
            if info.state is WorkerState.ALIVE:
                found[info.pid] = info.id
        return all(proc.pid in found for proc in procs)

    await poll(all_alive, timeout, every=0.05, what="workers registered")
    return [found[proc.pid] for proc in procs]


async def states(app: App, run_ids: Iterable[int]) -> Counter[RunState]:
    """How many of these runs are in each state."""
    return Counter(run.state for run in await app.store.get_runs(list(run_ids)))


async def all_succeeded(
    app: App, fleet: Fleet, run_ids: Sequence[int], timeout: float = 60.0
) -> None:
    """Wait until every one of these runs succeeded; fail at once if one ends otherwise."""

    async def done() -> bool:
        counts = await states(app, run_ids)
        ended = {s for s in counts if s.terminal and s is not RunState.SUCCEEDED}
        assert not ended, f"{counts}\n{fleet.outputs()}"
        return counts[RunState.SUCCEEDED] == len(run_ids)

    await poll(done, timeout, every=0.1, what=f"{len(run_ids)} runs succeeded")


async def stopped(fleet: Fleet, proc: Proc, timeout: float = 20.0) -> None:
    """Wait until ``proc`` exited with status 0 (after SIGTERM), saying why not otherwise."""

    async def exited() -> bool:
        return not proc.alive

    try:
        await poll(exited, timeout, every=0.05, what=f"{proc.name} exited")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.outputs()}") from None
    assert proc.popen.returncode == 0, fleet.outputs()


def by_pid(ids: Sequence[str], procs: Sequence[Proc]) -> dict[int, str]:
    """Worker id by process id."""
    return {proc.pid: worker for worker, proc in zip(ids, procs, strict=True)}


def max_overlap(records: Iterable[Record]) -> int:
    """The most bodies between their start and end records at once, in file order (the order
    the writes happened): a body counts from its start record to its end record."""
    running = most = 0
    for record in records:
        running += 1 if record["phase"] == "start" else -1
        most = max(most, running)
    return most


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
async def dist_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each backend: a SQLite file, or a PostgreSQL schema dropped after."""
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'cronbus.db'}"


@pytest.fixture
async def app(dist_url: str) -> AsyncIterator[App]:
    """``apps.distribution_app``'s app, open on the test's store (for defers and reads)."""
    url = dist_url
    if url.startswith("postgresql"):
        url = with_options(url, application_name="cronbus-test", pool_max=POOL_MAX)
    dist.app.use_store(url)
    async with dist.app:
        yield dist.app


@pytest.fixture
def fleet(dist_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes on the test's store, all killed at the end."""
    procs = Fleet(dist_url, tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
