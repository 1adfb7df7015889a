"""Cluster tests on PostgreSQL: real ``cronbus`` processes on one fresh schema.

Every process gets its own ``application_name`` (``cronbus-<name>``), so a test can see its
sessions in ``pg_stat_activity``; tasks of ``apps.cluster_app`` write each execution to the
schema's ``executions`` table, which the test reads through :class:`Db`.

Test modules import the fixtures they use (``pg_url``, ``db``, ``cluster``, ``pg_app``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from psycopg import sql

from apps import cluster_app
from contract.pg import pg_store_url, server_url, with_options
from cronbus import App

from .conftest import TESTS

POOL_MAX = "4"  # a few connections per process: the server allows 100 to everyone
_CONNECT_TIMEOUT = 5


def schema_of(url: str) -> str:
    """The ``schema`` option of a store URL."""
    return dict(parse_qsl(urlsplit(url).query))["schema"]


@dataclass
class Proc:
    """One ``cronbus`` process of a test."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    @property
    def alive(self) -> bool:
        """Whether it is still running."""
        return self.popen.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum``."""
        self.popen.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def output(self, tail: int = 4000) -> str:
        """The end of its log, for failure messages."""
        return f"--- {self.name} ---\n" + self.log.read_text(errors="replace")[-tail:]


class Cluster:
    """Starts ``cronbus worker`` and ``cronbus scheduler`` processes of ``apps.cluster_app``
    on one store, and makes sure none outlives the test."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: list[Proc] = []

    def worker(self, name: str, *, concurrency: int = 8, **env: str) -> Proc:
        """Start a worker serving the default queue."""
        args = ["worker", "--concurrency", str(concurrency), "--queues", "default"]
        return self._start(name, args, env)

    def scheduler(self, name: str, **env: str) -> Proc:
        """Start a scheduler."""
        return self._start(name, ["scheduler"], env)

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        url = with_options(self.url, application_name=f"cronbus-{name}", pool_max=POOL_MAX)
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            cluster_app.DSN_ENV: server_url(),
            cluster_app.TABLE_ENV: f"{schema_of(self.url)}.executions",
            **env,
        }
        log = self.logs / f"{name}.log"
        command = [sys.executable, "-m", "cronbus", *args[:1], "--app", "apps.cluster_app:app"]
        command += ["--store", url, "--log-level", "info", *args[1:]]
        with open(log, "wb") as out:
            popen = subprocess.Popen(command, env=environ, stdout=out, stderr=subprocess.STDOUT)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def outputs(self) -> str:
        """Every process's log tail, for failure messages."""
        return "\n".join(proc.output() for proc in self.procs)

    def stop_all(self) -> None:
        """SIGCONT (a stopped process cannot die) and SIGKILL whatever still runs."""
        for proc in self.procs:
            if proc.alive:
                proc.signal(signal.SIGCONT)
                proc.kill()


class Db:
    """The test's own connection to the schema, for what the store API does not show: the side
    table, sessions, counts over every run. It reconnects once if the server went away."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.schema = schema_of(url)
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None

    async def rows(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows."""
        try:
            return await self._rows(query, params)
        except psycopg.OperationalError:
            await self.close()
            return await self._rows(query, params)

    async def value(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """The first column of the first row."""
        return (await self.rows(query, params))[0][0]

    async def _rows(self, query: str, params: Sequence[Any] | None) -> list[tuple[Any, ...]]:
        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(
                server_url(),
                autocommit=True,
                connect_timeout=_CONNECT_TIMEOUT,
                options=f"-c search_path={self.schema}",
            )
        cursor = await self._conn.execute(query.encode(), params)
        return await cursor.fetchall() if cursor.description else []

    async def close(self) -> None:
        """Close the connection (the next statement opens another)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def working_sessions(self, name: str) -> list[tuple[Any, ...]]:
        """The sessions of process ``name`` that run a statement without waiting for their
        client (a pipeline waiting for its next statement is active, but waits for it)."""
        query = (
            "SELECT wait_event_type, wait_event, query FROM pg_stat_activity"
            " WHERE application_name = %s AND state = 'active'"
            " AND wait_event_type IS DISTINCT FROM 'Client'"
        )
        return await self.rows(query, (f"cronbus-{name}",))

    async def executions(self) -> dict[str, int]:
        """How many times each key was executed (the side table)."""
        rows = await self.rows("SELECT key, count(*) FROM executions GROUP BY key")
        return {key: int(count) for key, count in rows}


async def poll(
    check: Callable[[], Awaitable[bool]],
    timeout: float,
    *,
    every: float = 0.1,
    what: str = "condition",
) -> None:
    """Poll ``check`` until it holds, failing after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        await asyncio.sleep(every)


async def drained(
    remaining: Callable[[], Awaitable[int]],
    stall: float,
    *,
    every: float = 0.5,
    what: str = "work",
) -> None:
    """Poll ``remaining`` until it is 0, failing only when it has not fallen for ``stall``
    seconds: a slow machine drains a backlog slowly, a stuck one not at all."""
    loop = asyncio.get_running_loop()
    best = await remaining()
    deadline = loop.time() + stall
    while best > 0:
        await asyncio.sleep(every)
        left = await remaining()
        if left < best:
            best, deadline = left, loop.time() + stall
        elif loop.time() > deadline:
            raise AssertionError(f"{what}: {left} left, none done in the last {stall} s")


async def sleep_until(deadline: float) -> None:
    """Let wall-clock time pass until ``deadline`` (epoch seconds): for fire windows only."""
    await asyncio.sleep(max(0.0, deadline - time.time()))


async def worker_id(app: App, proc: Proc) -> str:
    """The registered id of a worker process."""
    found: list[str] = []

    async def registered() -> bool:
        found[:] = [w.id for w in await app.store.list_workers(time.time()) if w.pid == proc.pid]
        return bool(found)

    await poll(registered, 30, what=f"{proc.name} registered")
    return found[0]


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture
async def pg_url(request: pytest.FixtureRequest) -> str:
    """A store URL on a fresh schema, with the side table in it; the schema is dropped after.

    Skipped locally when PostgreSQL is unreachable, failed when ``CI=true``.
    """
    url = await pg_store_url(request)
    async with await psycopg.AsyncConnection.connect(
        server_url(), autocommit=True, connect_timeout=_CONNECT_TIMEOUT
    ) as conn:
        table = sql.Identifier(schema_of(url), "executions")
        await conn.execute(sql.SQL(cluster_app.CREATE).format(table))
    return url


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[Db]:
    """The test's own connection to the schema."""
    conn = Db(pg_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """Processes on the test's schema, all killed at the end."""
    procs = Cluster(pg_url, tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest.fixture
async def pg_app(pg_url: str) -> AsyncIterator[App]:
    """``apps.cluster_app``'s app, open on the test's schema (for defers, jobs and reads)."""
    app = cluster_app.app
    app.use_store(with_options(pg_url, application_name="cronbus-test", pool_max=POOL_MAX))
    async with app:
        yield app
