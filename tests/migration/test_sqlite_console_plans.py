"""The console's reads of the SQLite store walk their indexes (0010's ``runs_fired`` among them),
and a listing with payload matches still reads one index range, probing each run's payload by
its key: asserted on the query plans."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus.model import RunFilter
from cronbus.states import RunState
from cronbus.store import open_store
from cronbus.store.sqlite import listing, matches
from cronbus.store.sqlite import overview as o


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[sqlite3.Connection]:
    path = tmp_path / "p.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    connection = sqlite3.connect(path)
    matches.register(connection)  # as the store's connections have it (lists and objects)
    yield connection
    connection.close()


def plan(conn: sqlite3.Connection, sql: str, params: object) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()  # type: ignore[arg-type]
    return "\n".join(str(row[-1]) for row in rows)


def test_queue_depths_read_the_ready_and_state_indexes(conn: sqlite3.Connection) -> None:
    got = plan(conn, o.QUEUE_DEPTHS, {"namespace": "a"})
    assert "SEARCH runs USING INDEX runs_ready (namespace=?)" in got
    assert "SEARCH runs USING INDEX runs_by_state (namespace=? AND state=?)" in got
    assert "SCAN runs" not in got


def test_fire_lags_read_the_fired_index_newest_first(conn: sqlite3.Connection) -> None:
    got = plan(conn, o.FIRE_LAGS, ("a", 0.0, 1000))
    assert "SEARCH runs USING INDEX runs_fired (namespace=? AND created_at>?)" in got
    assert "TEMP B-TREE" not in got


def test_a_jobs_recent_runs_read_its_range_backwards(conn: sqlite3.Connection) -> None:
    got = plan(conn, o.JOB_RUNS, (1, "a", 10))
    assert "SEARCH runs USING INDEX runs_by_job (job_id=?)" in got
    assert "TEMP B-TREE" not in got


class Recorder:
    """A connection that records the query plan of each statement it runs."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.plans: list[str] = []

    def execute(self, sql: str, params: object = ()) -> sqlite3.Cursor:
        self.plans.append(plan(self.conn, sql, params))
        return self.conn.execute(sql, params)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "filter",
    [
        RunFilter(namespace="a", states=[RunState.DEAD], args=[("user", {"id": [7]})]),
        RunFilter(namespace="a", args=[("0", "x"), ("user", 7)], before_id=100),
        RunFilter(args=[("user", 7)]),
    ],
    ids=["one range", "every state", "every namespace"],
)
def test_a_payload_match_probes_each_run_of_the_range(
    conn: sqlite3.Connection, filter: RunFilter
) -> None:
    conn.execute(
        "INSERT INTO runs (task, queue, state, eta, created_at, updated_at, namespace) "
        "VALUES ('t', 'q', 'dead', 0, 0, 0, 'a')"
    )
    recorder = Recorder(conn)
    listing.list_runs(recorder, filter)  # type: ignore[arg-type]
    ranges = [got for got in recorder.plans if "INDEX runs_by_state (namespace=? AND" in got]
    assert ranges, recorder.plans
    for got in ranges:
        assert "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)" in got
        assert "SCAN r" not in got
        assert "SCAN m" not in got
        assert "TEMP B-TREE" not in got
