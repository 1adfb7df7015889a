"""The store's own view of faults, on real files and a real PostgreSQL schema: ``check()`` finds
an SQLite file deleted, replaced or overwritten; ``open(create=False)`` opens only a store that
exists and is up to date, and creates nothing; the roles stop on a fault, in-process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest

from contract.pg import pg_store_url, with_options
from cronbus import App
from cronbus.errors import SchemaError
from cronbus.runner import Roles
from cronbus.store import StoreFaultError, StoreNotFoundError, open_store
from cronbus.worker.engine import Worker


async def test_check_passes_on_the_file_it_opened(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    await store.open()
    try:
        for _ in range(3):
            await store.check()
    finally:
        await store.close()


async def test_a_relative_path_stays_the_file_opened_after_a_change_of_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///./x.db")
    await store.open()
    try:
        monkeypatch.chdir(tmp_path / "elsewhere")  # as a task might
        await store.check()
        (tmp_path / "x.db").unlink()
        with pytest.raises(StoreFaultError, match=r"^the store file \./x\.db was deleted"):
            await store.check()
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("deleted", "was deleted or replaced (no file is there now)"),
        ("replaced", "was deleted or replaced (another file is there now)"),
        ("overwritten", "is not a database any more (its header was overwritten)"),
    ],
)
async def test_check_finds_the_file_gone_or_changed(
    tmp_path: Path, fault: str, message: str
) -> None:
    path = tmp_path / "x.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        if fault == "deleted":
            path.unlink()
        elif fault == "replaced":
            copy = tmp_path / "copy.db"
            copy.write_bytes(path.read_bytes())
            os.replace(copy, path)
        else:
            # The check reads the header through SQLite, which takes page 1 from the WAL while
            # the WAL holds it: overwrite the file once its pages are checkpointed into it.
            with contextlib.closing(sqlite3.connect(path)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            with open(path, "r+b") as file:
                file.write(b"not a database at all, just bytes")
        with pytest.raises(StoreFaultError) as raised:
            await store.check()
        assert str(raised.value) == f"the store file {path} {message}"
    finally:
        await store.close()


async def test_a_read_only_open_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    store = open_store(url)
    with pytest.raises(StoreNotFoundError) as raised:
        await store.open(create=False)
    assert str(raised.value) == (
        f"no such store: {url} (create it with `cronbus migrate` or any writing command)"
    )
    assert list(tmp_path.iterdir()) == []


async def test_a_read_only_open_of_a_file_without_cronbus_tables(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    store = open_store(f"sqlite:///{path}")
    with pytest.raises(StoreNotFoundError, match="the file holds no cronbus tables"):
        await store.open(create=False)
    with sqlite3.connect(path) as conn:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master")]
    assert tables == ["notes"]


async def test_a_read_only_open_reads_an_existing_store_and_migrates_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    writer = open_store(url)
    await writer.open()
    latest = await writer.schema_version()
    await writer.close()
    reader = open_store(url)
    await reader.open(create=False)
    try:
        assert await reader.list_jobs() == []
        await reader.check()
    finally:
        await reader.close()
    with sqlite3.connect(tmp_path / "x.db") as conn:
        conn.execute("DELETE FROM cronbus_migrations WHERE version = ?", (latest,))
    behind = open_store(url)
    with pytest.raises(SchemaError, match="run `cronbus migrate`"):
        await behind.open(create=False)
    with sqlite3.connect(tmp_path / "x.db") as conn:
        (version,) = conn.execute("SELECT max(version) FROM cronbus_migrations").fetchone()
    assert version == latest - 1


async def test_postgres_read_only_open_of_a_missing_or_empty_schema(
    request: pytest.FixtureRequest,
) -> None:
    url = await pg_store_url(request)  # the schema exists, without tables
    schema = dict(parse_qsl(urlsplit(url).query))["schema"]
    typo = with_options(url, schema=f"{schema}_typo")
    for target in (url, typo):
        store = open_store(target)
        with pytest.raises(StoreNotFoundError, match="holds no cronbus tables"):
            await store.open(create=False)
    server = urlsplit(url)._replace(query="").geturl()
    async with await psycopg.AsyncConnection.connect(server, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (f"{schema}_typo",)
        )
        assert await cursor.fetchone() == (0,)
    writer = open_store(url)
    await writer.open()
    await writer.close()
    reader = open_store(url)
    await reader.open(create=False)
    try:
        assert await reader.list_jobs() == []
        await reader.check()  # nothing to find on PostgreSQL: it must not fail
    finally:
        await reader.close()


async def test_the_passwords_of_postgres_urls_are_not_shown() -> None:
    store = open_store("postgresql://cronbus:s3cret@127.0.0.1:1/x?schema=nosuch&connect_timeout=1")
    with pytest.raises(Exception) as raised:  # noqa: PT011 - unreachable: any cronbus error
        await store.open(create=False)
    assert "s3cret" not in str(raised.value)


async def test_roles_stop_and_raise_when_the_file_is_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "x.db"
    app = App(store=f"sqlite:///{path}")
    async with app:
        worker = Worker(app, queues="default")
        roles = Roles(worker=worker, scheduler=None, store=app.store, check_seconds=0.05)
        running = asyncio.create_task(roles.run())
        await asyncio.sleep(0)  # let the worker start before the file goes
        path.unlink()
        with (
            caplog.at_level(logging.INFO),
            pytest.raises(StoreFaultError, match="was deleted or replaced"),
        ):
            await asyncio.wait_for(running, 20)
    logged = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("cronbus.runner", logging.ERROR) in {(name, level) for name, level, _ in logged}
    assert any(name == "cronbus.worker" and "draining" in text for name, _, text in logged)
