"""Tasks for cluster tests on PostgreSQL.

Each execution writes a row (key, pid, phase, time) into a side table of the test's schema, with
its own connection: the tests count executions from there, apart from the store's bookkeeping.
The worker processes learn where the table is from ``CRONBUS_TEST_SIDE_DSN`` and
``CRONBUS_TEST_SIDE_TABLE``.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg
from psycopg import sql

from cronbus import App

app = App()

DSN_ENV = "CRONBUS_TEST_SIDE_DSN"
TABLE_ENV = "CRONBUS_TEST_SIDE_TABLE"
CREATE = "CREATE TABLE {} (key text NOT NULL, pid integer NOT NULL, phase text NOT NULL, at float8)"
_RETRY_SECONDS = 60.0  # long enough to write through a server restart
_CONNECT_TIMEOUT = 5


class SideTable:
    """One connection per process, shared by the task threads under a lock.

    A write that meets a broken connection (a server restart) reconnects and writes again.
    Commits do not wait for the disk: only processes die in these tests, and a clean server
    shutdown flushes what was committed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._insert: sql.Composed | None = None

    def write(self, key: str, phase: str = "run") -> None:
        """Record one execution of ``key``."""
        deadline = time.monotonic() + _RETRY_SECONDS
        with self._lock:
            while True:
                try:
                    self._write(key, phase)
                    return
                except psycopg.OperationalError:
                    self._drop()
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def _write(self, key: str, phase: str) -> None:
        if self._conn is None or self._insert is None:
            self._conn = psycopg.connect(
                os.environ[DSN_ENV],
                autocommit=True,
                connect_timeout=_CONNECT_TIMEOUT,
                options="-c synchronous_commit=off",
            )
            schema, table = os.environ[TABLE_ENV].split(".")
            self._insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(
                sql.Identifier(schema, table)
            )
        self._conn.execute(self._insert, (key, os.getpid(), phase, time.time()))

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


SIDE = SideTable()


@app.task(name="cluster.record")
def record(key: str, pause: float = 0.0) -> str:
    """Record an execution of ``key``, then hold the slot for ``pause`` seconds."""
    SIDE.write(key)
    if pause:
        time.sleep(pause)
    return key


@app.task(name="cluster.tick")
def tick(job: str) -> None:
    """What every-second jobs run: record an execution of the job."""
    SIDE.write(job)


@app.task(name="cluster.slow")
def slow(key: str, seconds: float) -> int:
    """Record the start, sleep, record the end; the result is the executing process's pid."""
    SIDE.write(key, "start")
    time.sleep(seconds)
    SIDE.write(key, "end")
    return os.getpid()
