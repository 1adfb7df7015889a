"""Acceptance: faults of the store are noticed, and a mistyped store is never created.

Real ``cronbus`` processes: a role whose SQLite file is deleted, replaced or overwritten logs
an error naming the file and exits non-zero within a few heartbeats; commands that only read
say "no such store" (status 1) for a missing SQLite file or PostgreSQL schema, and leave
nothing behind; commands that add something, and ``migrate``, create the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest

from cluster.conftest import TESTS, until, wait_exit
from contract.pg import pg_store_url, with_options

DEADLINE_SECONDS = 60.0
LEASE = "3"
"""Short leases, so heartbeats (a third of a lease), and so store checks, come every second."""
EXIT_SECONDS = 30.0
"""How long a role may take to notice the fault and exit: a few one-second checks, on a busy
machine."""
READ_ONLY = [
    ["runs", "list"],
    ["runs", "list", "--json"],
    ["runs", "show", "1"],
    ["jobs", "list"],
    ["jobs", "show", "nightly"],
    ["jobs", "next", "nightly"],
    ["workers", "list"],
    ["workers", "show", "w1"],
    ["dlq", "list"],
    ["events", "tail", "orders"],
    ["events", "topics"],
    ["subs", "list"],
    ["subs", "show", "s1"],
    ["subs", "deliveries", "s1"],
    ["runs", "cancel", "1"],
    ["jobs", "pause", "nightly"],
    ["workers", "prune"],
]
"""Commands that read, or change something that must exist already: none creates a store."""


def environment(**settings: str) -> dict[str, str]:
    """The test's environment without CRONBUS_*, with the test apps importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**env, **settings}


async def cronbus(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run ``cronbus ARGS`` to the end: status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        *args,
        cwd=cwd,
        env=environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(DEADLINE_SECONDS):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class Role:
    """One ``cronbus ROLE`` process on an SQLite file, its output in a log file."""

    def __init__(self, role: str, path: Path, log: Path) -> None:
        self.path = path
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "cronbus", role, "--app", "apps.worker_app:app"),
                    *("--store", f"sqlite:///{path}"),
                    # Any free port: tests run side by side, and 8787 may be taken.
                    *(("--api-port", "0") if role == "server" else ()),
                ],
                env=environment(CRONBUS_LEASE_SECONDS=LEASE),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    async def started(self) -> None:
        """Wait until the role has opened its store and started."""

        async def up() -> bool:
            text = self.text()
            assert self.proc.poll() is None, text
            return " started" in text or " serving " in text

        await until(up, timeout=DEADLINE_SECONDS)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def roles() -> Iterator[list[Role]]:
    """Role processes started by a test, all killed at its end."""
    started: list[Role] = []
    yield started
    for role in started:
        role.kill()


async def assert_exits_on_fault(role: Role, message: str) -> None:
    status = await wait_exit(role.proc, EXIT_SECONDS)
    text = role.text()
    assert status == 1, text
    assert f"ERROR cronbus.runner: the store file {role.path} {message}" in text
    assert f"error: the store file {role.path} {message}" in text
    assert "Traceback" not in text.split("ERROR cronbus.runner")[1]


@pytest.mark.parametrize("name", ["worker", "scheduler", "dispatcher", "server"])
async def test_every_role_exits_when_its_sqlite_file_is_deleted(
    name: str, tmp_path: Path, roles: list[Role]
) -> None:
    role = Role(name, tmp_path / "x.db", tmp_path / f"{name}.log")
    roles.append(role)
    await role.started()
    role.path.unlink()
    await assert_exits_on_fault(role, "was deleted or replaced (no file is there now)")


async def test_a_worker_exits_when_its_sqlite_file_is_replaced(
    tmp_path: Path, roles: list[Role]
) -> None:
    role = Role("worker", tmp_path / "x.db", tmp_path / "worker.log")
    roles.append(role)
    await role.started()
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    other.write_bytes(role.path.read_bytes())  # a valid copy, but not the file opened
    os.replace(other, role.path)
    await assert_exits_on_fault(role, "was deleted or replaced (another file is there now)")


async def test_a_worker_exits_when_its_sqlite_header_is_overwritten(
    tmp_path: Path, roles: list[Role]
) -> None:
    role = Role("worker", tmp_path / "x.db", tmp_path / "worker.log")
    roles.append(role)
    await role.started()
    # The worker reads the header through SQLite, which takes page 1 from the WAL while the
    # WAL holds it: overwrite the file once its pages are checkpointed into it.
    with contextlib.closing(sqlite3.connect(role.path, timeout=30)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(role.path, "r+b") as file:
        file.write(b"\0" * 100)
    await assert_exits_on_fault(role, "is not a database any more (its header was overwritten)")


async def test_read_only_commands_in_an_empty_folder_leave_no_file(tmp_path: Path) -> None:
    for args in READ_ONLY:
        status, out, err = await cronbus(*args, cwd=tmp_path)
        assert status == 1, (args, out, err)
        assert err == (
            "error: no such store: sqlite:///./cronbus.db (create it with `cronbus migrate` "
            "or any writing command)\n"
        ), args
        assert list(tmp_path.iterdir()) == [], args


async def test_a_mistyped_sqlite_path_is_not_created(tmp_path: Path) -> None:
    status, out, err = await cronbus(
        "runs", "list", "--store", "sqlite:///./mistyped.db", cwd=tmp_path
    )
    assert (status, out) == (1, "")
    assert err.startswith("error: no such store: sqlite:///./mistyped.db (create it with")
    assert list(tmp_path.iterdir()) == []


async def test_writing_commands_and_migrate_create_the_store(tmp_path: Path) -> None:
    status, out, err = await cronbus(
        "defer", "apps.worker_app.noop", "--app", "apps.worker_app", cwd=tmp_path
    )
    assert status == 0, err
    assert (tmp_path / "cronbus.db").exists()
    status, out, err = await cronbus("runs", "list", cwd=tmp_path)
    assert status == 0, err
    assert "apps.worker_app.noop" in out
    status, _, err = await cronbus("migrate", "--store", "sqlite:///./other.db", cwd=tmp_path)
    assert status == 0, err
    status, out, err = await cronbus(
        "runs", "list", "--store", "sqlite:///./other.db", cwd=tmp_path
    )
    assert (status, out.strip()) == (0, "no runs"), err


async def test_an_sqlite_store_whose_schema_is_behind_says_to_migrate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    status, _, err = await cronbus("migrate", "--store", url)
    assert status == 0, err
    with sqlite3.connect(tmp_path / "old.db") as conn:
        # As an older cronbus left it: its newest migrations not applied yet.
        conn.execute("DELETE FROM cronbus_migrations WHERE version > 1")
    status, _, err = await cronbus("runs", "list", "--store", url)
    assert status == 1
    assert "run `cronbus migrate` with the same store URL" in err
    with sqlite3.connect(tmp_path / "old.db") as conn:
        (version,) = conn.execute("SELECT max(version) FROM cronbus_migrations").fetchone()
    assert version == 1  # a read migrates nothing


async def test_a_missing_or_empty_postgres_schema_is_no_such_store(
    request: pytest.FixtureRequest,
) -> None:
    url = await pg_store_url(request)  # a schema that exists, without cronbus's tables
    schema = dict(parse_qsl(urlsplit(url).query))["schema"]
    mistyped = with_options(url, schema=f"{schema}_typo")
    for store, named in ((url, schema), (mistyped, f"{schema}_typo")):
        for args in (["runs", "list"], ["jobs", "list"], ["subs", "list"]):
            status, out, err = await cronbus(*args, "--store", store)
            assert (status, out) == (1, ""), err
            assert err.startswith("error: no such store: postgresql://")
            assert f"schema '{named}' holds no cronbus tables" in err
    server = urlsplit(url)._replace(query="").geturl()
    async with await psycopg.AsyncConnection.connect(server, autocommit=True) as conn:
        found = await conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = %s", (f"{schema}_typo",)
        )
        assert await found.fetchall() == []
        tables = await conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
        )
        assert await tables.fetchone() == (0,)
    status, _, err = await cronbus("migrate", "--store", url)
    assert status == 0, err
    status, out, err = await cronbus("runs", "list", "--store", url)
    assert (status, out.strip()) == (0, "no runs"), err


ROUNDS = int(os.environ.get("CRONBUS_SQLITE_SOAK_ROUNDS", "5"))
"""Rounds of the two-process WAL test: a few in the suite, 1,000 in ``make sqlite-soak``."""


def wal_is_shared(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """The WAL and the shared memory file are on disk, and ``proc`` holds those very files (a
    process that unlinked them while another used them leaves it writing to deleted files)."""
    for suffix in ("-wal", "-shm"):
        name = Path(f"{path}{suffix}")
        assert name.exists(), f"{name.name} is gone while a role has the store open"
        held = [
            os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")
        ]
        opened = [h for h in held if h.startswith(str(name))]
        # One descriptor per connection that has read the WAL: there may be several, and each
        # must be the file on disk (an unlinked one reads "x.db-wal (deleted)").
        assert opened, f"the role does not hold {name.name}"
        assert set(opened) == {str(name)}, f"the role holds {opened}, not the file on disk"


@pytest.mark.parametrize("second", ["command", "role"])
async def test_a_second_process_on_the_file_keeps_the_wal_and_sees_every_write(
    tmp_path: Path, roles: list[Role], second: str
) -> None:
    # Issue 30: a heartbeat's file check open()ed and closed the store file, dropping the
    # role's POSIX locks, so the next process to close the store unlinked the live WAL.
    role = Role("server", tmp_path / "x.db", tmp_path / "server.log")
    roles.append(role)
    await role.started()
    if second == "role":
        other = Role("worker", role.path, tmp_path / "worker.log")
        roles.append(other)
        await other.started()
    store = ("--store", f"sqlite:///{role.path}")
    for round_ in range(ROUNDS):
        status, out, err = await cronbus(
            "defer", "apps.worker_app.noop", "--app", "apps.worker_app", *store, cwd=tmp_path
        )
        assert status == 0, err
        assert out.startswith("run "), out  # "run 7 created"
        wal_is_shared(role.path, role.proc)

        async def done(wanted: int = round_ + 1) -> bool:
            # Every run so far, not the default page of 50: the soak runs 1,000 rounds.
            status, out, err = await cronbus(
                "runs", "list", "--json", "--limit", str(wanted), *store, cwd=tmp_path
            )
            assert status == 0, err
            return out.count('"succeeded"') >= wanted

        await until(done, timeout=DEADLINE_SECONDS)
        wal_is_shared(role.path, role.proc)
        if second == "role":
            wal_is_shared(role.path, other.proc)


SIDE_PROCESSES = [
    ("migrate",),
    ("runs", "purge", "--older-than", "0"),  # retention's batches and incremental vacuum
    ("role", "worker"),  # a role that opens the store, takes its own writer lock file, stops
    ("role", "scheduler"),
]
"""Issue 30 item 2: the other processes that open the store's files beside a running role."""


@pytest.mark.parametrize("side", SIDE_PROCESSES, ids=lambda side: "-".join(side))
async def test_migrate_retention_and_a_role_that_stops_leave_the_running_role_its_wal(
    tmp_path: Path, roles: list[Role], side: tuple[str, ...]
) -> None:
    role = Role("server", tmp_path / "x.db", tmp_path / "server.log")
    roles.append(role)
    await role.started()
    store = ("--store", f"sqlite:///{role.path}")

    async def ran_one() -> None:
        status, out, err = await cronbus(
            "defer", "apps.worker_app.noop", "--app", "apps.worker_app", *store, cwd=tmp_path
        )
        assert status == 0, err
        run_id = out.split()[1]  # "run 7 created"

        async def done() -> bool:
            status, out, err = await cronbus("runs", "show", run_id, "--json", *store)
            assert status == 0, err
            return '"succeeded"' in out

        await until(done, timeout=DEADLINE_SECONDS)

    for _ in range(2):
        await ran_one()  # something finished for the purge; a run seen done before and after
        if side[0] == "role":
            other = Role(side[1], role.path, tmp_path / f"{side[1]}.log")
            roles.append(other)
            await other.started()
            other.proc.terminate()
            assert await wait_exit(other.proc, EXIT_SECONDS) == 0, other.text()
        else:
            status, _, err = await cronbus(*side, *store, cwd=tmp_path)
            assert status == 0, err
        wal_is_shared(role.path, role.proc)
        await ran_one()
        wal_is_shared(role.path, role.proc)
