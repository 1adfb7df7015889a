"""SQLite migrations: applied once, in order, and a newer schema is refused, not damaged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cronbus.errors import StoreError
from cronbus.store import migrations, open_store


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in migrations.load("sqlite")]
    assert versions == list(range(1, len(versions) + 1))


async def test_a_fresh_file_gets_every_migration(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    await store.open()
    try:
        assert await store.schema_version() == migrations.load("sqlite")[-1].version
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert {"runs", "run_payloads", "attempts", "workers", "wakeups"} <= tables


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO cronbus_migrations VALUES (999, 'from_the_future', 0)")
    conn.commit()
    conn.close()
    again = open_store(f"sqlite:///{path}")
    with pytest.raises(StoreError, match="newer than this cronbus"):
        await again.open()
