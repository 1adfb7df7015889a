"""Run listings of the SQLite store read one index range per namespace, newest first, without a
sort or a scan, whatever the filter and however deep the page: asserted on the query plan of
every statement a listing runs (with the namespaces a listing of all of them finds)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cronbus.model import RunFilter
from cronbus.states import RunState
from cronbus.store import open_store
from cronbus.store.sqlite import listing
from cronbus.store.sqlite import sql as q

FILTERS = {
    "namespace": (RunFilter(namespace="a", before_id=10**6), "runs_by_state"),
    "namespace since": (RunFilter(namespace="a", created_after=5.0), "runs_by_state"),
    "state": (RunFilter(namespace="a", states=[RunState.DEAD]), "runs_by_state"),
    "states": (
        RunFilter(namespace="a", states=[RunState.DEAD, RunState.QUEUED], before_id=9),
        "runs_by_state",
    ),
    "task": (RunFilter(namespace="a", task="t", created_after=1.0), "runs_by_task"),
    "queue": (RunFilter(namespace="a", queue="q", created_before=2.0), "runs_by_queue"),
    "job": (RunFilter(namespace="a", job_id=3), "runs_by_job"),
    "every namespace": (RunFilter(states=[RunState.DEAD]), "runs_by_state"),
}


class Recorder:
    """A connection that runs each statement after recording its query plan."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.plans: list[str] = []

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        rows = self.conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        self.plans.append("\n".join(str(row[-1]) for row in rows))
        return self.conn.execute(sql, params)


@pytest.mark.parametrize("name", sorted(FILTERS))
async def test_listings_read_index_ranges_newest_first(tmp_path: Path, name: str) -> None:
    filter, index = FILTERS[name]
    path = tmp_path / "p.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    # Two namespaces with a run each, so a listing of every namespace reads two ranges.
    for namespace in ("a", "b"):
        conn.execute(
            "INSERT INTO runs (task, queue, state, eta, created_at, updated_at, namespace) "
            "VALUES ('t', 'q', 'dead', 0, 0, 0, ?)",
            (namespace,),
        )
    recorder = Recorder(conn)
    try:
        listing.list_runs(recorder, filter)  # type: ignore[arg-type]
    finally:
        conn.close()
    *_, last = recorder.plans
    ranges = [plan for plan in recorder.plans if plan.startswith("SEARCH r USING")]
    ranges = [plan for plan in ranges if f"INDEX {index} " in plan.splitlines()[0]]
    assert ranges, recorder.plans
    for plan in ranges:
        assert "TEMP B-TREE" not in plan
        assert "SCAN r" not in plan
        if filter.created_after is not None:
            # The range starts at the first run created since then, found by a seek.
            assert "id>?" in plan
            assert "INDEX run_payloads_by_created (namespace=? AND created_at>?)" in plan
    if filter.namespace is None:
        assert len(ranges) == 2
    if name.startswith("namespace"):
        assert len(ranges) == len(RunState)  # a range per state: no index of its own
    if filter.namespace is None or len(filter.states) > 1 or name.startswith("namespace"):
        # Several ranges: read as ids from the index alone, then the page's runs by id.
        assert all("COVERING INDEX" in plan for plan in ranges)
        assert "INTEGER PRIMARY KEY (rowid=?)" in last
    else:
        assert f"INDEX {index}" in last


async def test_the_namespaces_of_runs_are_found_by_seeks(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("EXPLAIN QUERY PLAN " + q.RUN_NAMESPACES).fetchall()
    finally:
        conn.close()
    plan = "\n".join(str(row[-1]) for row in rows)
    assert "SEARCH runs USING COVERING INDEX runs_by_state (namespace>?)" in plan
    assert "SCAN runs" not in plan


async def test_stats_read_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    try:
        minute = conn.execute(
            "EXPLAIN QUERY PLAN " + listing.PER_MINUTE,
            {"spaces": '["a"]', "since": 0.0, "until": 60.0},
        ).fetchall()
        count = conn.execute(
            "EXPLAIN QUERY PLAN " + listing.COUNT_NAMESPACE_RUNS, ("a",)
        ).fetchall()
    finally:
        conn.close()
    assert "COVERING INDEX runs_finished (namespace=? AND finished_at>? AND finished_at<?)" in (
        "\n".join(str(row[-1]) for row in minute)
    )
    assert "COVERING INDEX runs_by_state (namespace=?)" in str(count)
