"""Acceptance: ``cronbus migrate``, the real command line run as subprocesses, on a SQLite file
and on a PostgreSQL schema (skipped locally when PostgreSQL is unreachable, failed when
``CI=true``).

Exit statuses are the contract scripts rely on: 0 up to date, 1 an error (one line, no
traceback), 2 migrations pending (``--check``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_store_url, server_url, with_options
from cronbus.store import migrations
from cronbus.store.postgres import parse_url

DEADLINE_SECONDS = 30.0
PENDING = 2


def cronbus(
    cwd: Path, *args: str, store: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``cronbus ARGS`` (with ``--store`` when given) in ``cwd`` to the end."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    argv = [sys.executable, "-m", "cronbus", *args, *(["--store", store] if store else [])]
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        check=False,
    )


def document(done: subprocess.CompletedProcess[str], status: int = 0) -> Any:
    """The one JSON document of a run that exited with ``status`` and said nothing on stderr."""
    assert done.returncode == status, done.stderr
    assert done.stderr == ""
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The error of a failed run: exit status 1, one ``error: ...`` line, no traceback."""
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def check_then_migrate(cwd: Path, store: str, dialect: str) -> None:
    """``--check`` says pending (2), ``migrate`` applies everything, then ``--check`` says 0."""
    known = migrations.load(dialect)
    latest, names = known[-1].version, [f"{m.version:04d}_{m.name}" for m in known]
    pending = document(cronbus(cwd, "migrate", "--check", "--json", store=store), PENDING)
    assert (pending["current"], pending["latest"], pending["pending"]) == (0, latest, latest)
    text = cronbus(cwd, "migrate", "--check", store=store)
    assert text.returncode == PENDING
    assert f"schema version 0, this cronbus needs {latest}" in text.stdout
    migrated = document(cronbus(cwd, "migrate", "--json", store=store))
    assert (migrated["before"], migrated["after"], migrated["applied"]) == (0, latest, names)
    again = cronbus(cwd, "migrate", store=store)
    assert again.returncode == 0, again.stderr
    assert f"schema version {latest} -> {latest} (up to date" in again.stdout
    assert document(cronbus(cwd, "migrate", "--check", "--json", store=store))["pending"] == 0


def test_sqlite_check_then_migrate(tmp_path: Path) -> None:
    path = tmp_path / "cronbus.db"
    store = f"sqlite:///{path}?migrate=false"  # the option does not stop the command
    first = cronbus(tmp_path, "migrate", "--check", store=store)
    assert first.returncode == PENDING, first.stderr
    assert not path.exists(), "--check must not create the store"
    check_then_migrate(tmp_path, store, "sqlite")


def test_a_store_behind_with_migrate_false_is_refused_in_one_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cronbus.db'}?migrate=false"
    # A command that only reads finds no store at all; one that writes finds it behind.
    assert "no such store" in one_line_error(cronbus(tmp_path, "runs", "list", store=store))
    publish = ("events", "publish", "orders", "--type", "order.created")
    error = one_line_error(cronbus(tmp_path, *publish, store=store))
    latest = migrations.load("sqlite")[-1].version
    assert f"schema is version 0, this cronbus needs version {latest}" in error
    assert "run `cronbus migrate`" in error
    assert document(cronbus(tmp_path, "migrate", "--json", store=store))["after"] == latest
    assert document(cronbus(tmp_path, "runs", "list", "--json", store=store)) == []


def test_concurrent_migrate_processes_apply_each_migration_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cronbus.db'}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    argv = [sys.executable, "-m", "cronbus", "migrate", "--json", "--store", store]
    processes = [
        subprocess.Popen(argv, cwd=tmp_path, env=clean, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [process.communicate(timeout=DEADLINE_SECONDS)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0]
    applied = sorted(len(json.loads(out)["applied"]) for out in outputs)
    assert applied == [0, 0, len(migrations.load("sqlite"))]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://localhost/db", "unknown scheme 'mysql'"),
        ("sqlite:///cronbus.db?migrate=maybe", "migrate='maybe' must be true or false"),
        ("postgresql://postgres@127.0.0.1:1/none", "cannot connect to PostgreSQL store"),
    ],
)
def test_a_bad_store_url_is_one_line(tmp_path: Path, url: str, expected: str) -> None:
    assert expected in one_line_error(cronbus(tmp_path, "migrate", "--check", store=url))


async def test_postgres_check_then_migrate(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = with_options(await pg_store_url(request), migrate="false")
    check_then_migrate(tmp_path, url, "postgres")
    # The store named by CRONBUS_STORE, as a deployment sets it.
    done = cronbus(tmp_path, "migrate", "--check", env={"CRONBUS_STORE": url})
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout


async def test_postgres_newer_schema_is_one_line(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = await pg_store_url(request)
    assert cronbus(tmp_path, "migrate", store=url).returncode == 0
    schema = parse_url(url).schema
    async with await psycopg.AsyncConnection.connect(server_url(), autocommit=True) as conn:
        insert = sql.SQL("INSERT INTO {}.cronbus_migrations VALUES (999, 'future', 0)")
        await conn.execute(insert.format(sql.Identifier(schema)))
    for args in (("migrate",), ("migrate", "--check")):
        error = one_line_error(cronbus(tmp_path, *args, store=url))
        assert "schema is version 999, newer than this cronbus" in error
        assert "upgrade cronbus" in error
