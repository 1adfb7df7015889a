"""SQLite migrations with ``migrate=false``: nothing applied (nor created) on open, a schema
behind refused clearly, ``migrate()`` applying each migration once however many run at once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from cronbus.errors import SchemaError, StoreURLError
from cronbus.store import SQLiteStore, migrations, open_store

KNOWN = migrations.load("sqlite")
LATEST = KNOWN[-1].version
ALL = tuple(f"{m.version:04d}_{m.name}" for m in KNOWN)


def sqlite(url: str) -> SQLiteStore:
    store = open_store(url)
    assert isinstance(store, SQLiteStore)
    return store


def versions(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("SELECT version FROM cronbus_migrations")]
    finally:
        conn.close()


def test_migrate_must_be_true_or_false(tmp_path: Path) -> None:
    assert isinstance(open_store(f"sqlite:///{tmp_path / 'a.db'}?migrate=no"), SQLiteStore)
    with pytest.raises(StoreURLError, match="migrate='sometimes' must be true or false"):
        open_store(f"sqlite:///{tmp_path / 'a.db'}?migrate=sometimes")


async def test_migrate_false_refuses_a_missing_file_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    store = sqlite(f"sqlite:///{path}?migrate=false")
    with pytest.raises(SchemaError) as caught:
        await store.open()
    assert f"version 0, this cronbus needs version {LATEST}" in str(caught.value)
    assert "run `cronbus migrate`" in str(caught.value)
    assert not path.exists()
    await store.close()


async def test_migrate_false_opens_a_migrated_file(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = sqlite(f"sqlite:///{path}?migrate=false")
    assert (await store.schema_versions()).pending == LATEST
    migrated = await store.migrate()
    assert (migrated.before, migrated.after, migrated.applied) == (0, LATEST, ALL)
    assert (await store.migrate()).applied == ()
    await store.open()
    try:
        assert await store.schema_version() == LATEST
    finally:
        await store.close()


async def test_a_schema_behind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "behind.db"
    await sqlite(f"sqlite:///{path}").migrate()
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM cronbus_migrations WHERE version = ?", (LATEST,))
    conn.commit()
    conn.close()
    store = sqlite(f"sqlite:///{path}?migrate=false")
    with pytest.raises(
        SchemaError, match=f"version {LATEST - 1}, this cronbus needs version {LATEST}"
    ):
        await store.open()


async def test_concurrent_migrations_apply_each_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    results = await asyncio.gather(*(sqlite(f"sqlite:///{path}").migrate() for _ in range(4)))
    assert sorted(r.applied for r in results) == [(), (), (), ALL]
    assert sorted(versions(path)) == [m.version for m in KNOWN]
