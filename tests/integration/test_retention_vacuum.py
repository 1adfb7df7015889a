"""SQLite files and incremental vacuum: a new file is created incremental, an older one is
converted by ``cronbus migrate`` (the store's ``migrate()``), and a purge gives the freed pages
back so the file shrinks."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cronbus.observability.retention import PurgeReport, purge_finished
from cronbus.store import open_store
from cronbus.store.sqlite import SQLiteStore
from cronbus.store.sqlite.retention import KEPT_FREE

T0 = 1_700_000_000.0


def auto_vacuum(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])


async def test_a_new_file_is_incremental(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'new.db'}")
    await store.open()
    await store.close()
    assert auto_vacuum(tmp_path / "new.db") == 2


async def test_migrate_converts_an_older_file_once(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")  # as a file made before 0013 is
    conn.close()
    assert auto_vacuum(path) == 0
    again = open_store(f"sqlite:///{path}")
    assert isinstance(again, SQLiteStore)
    await again.migrate()
    assert auto_vacuum(path) == 2


async def test_a_purge_shrinks_the_file(tmp_path: Path) -> None:
    path = tmp_path / "shrink.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(
            "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20000) "
            "INSERT INTO runs (task, queue, state, eta, created_at, updated_at, finished_at) "
            "SELECT 't', 'q', 'succeeded', ?, ?, ?, ? + i FROM g",
            (T0, T0, T0, T0),
        )
        (before,) = conn.execute("PRAGMA page_count").fetchone()
        report = PurgeReport()
        await purge_finished(
            store, report, namespace="default", before=T0 + 1e6, due=lambda r: True, batch=500
        )
        assert report.runs == 20_000
        assert report.pages > 0
        (after,) = conn.execute("PRAGMA page_count").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        conn.close()
        assert after < before / 2
        assert free < KEPT_FREE  # the few left for the next inserts
    finally:
        await store.close()
