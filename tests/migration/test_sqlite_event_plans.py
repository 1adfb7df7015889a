"""The hot queries of the SQLite event store use their indexes, not scans or sorts of a backlog:
asserted on the query plan, so a change of schema or SQL that loses an index fails here."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus.store import open_store
from cronbus.store.sqlite import events_sql as q

TAKE = {"sub": 1, "now": 0.0, "ordered": 1, "limit": 10}


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[sqlite3.Connection]:
    """A connection to a file with every migration applied."""
    path = tmp_path / "plans.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    yield conn
    conn.close()


def plan(conn: sqlite3.Connection, sql: str, params: object) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()  # type: ignore[arg-type]
    return "\n".join(str(row[-1]) for row in rows)


def test_reading_a_topic_walks_its_offsets(db: sqlite3.Connection) -> None:
    got = plan(db, q.READ_EVENTS, ("orders", 0, 100))
    assert "SEARCH e USING INDEX sqlite_autoindex_events_1 (topic=? AND offset>?)" in got
    assert "TEMP B-TREE" not in got


def test_appending_finds_known_ids_by_the_unique_index(db: sqlite3.Connection) -> None:
    got = plan(db, q.KNOWN_IDS, ("orders", '["a", "b"]'))
    assert "sqlite_autoindex_events_2 (topic=? AND event_id=?)" in got


def test_offset_at_is_one_probe_of_the_time_index(db: sqlite3.Connection) -> None:
    got = plan(db, q.OFFSET_AT, ("orders", 0.0))
    assert "COVERING INDEX events_by_time" in got
    assert "TEMP B-TREE" not in got


def test_trim_checks_live_deliveries_through_their_index(db: sqlite3.Connection) -> None:
    got = plan(db, q.TRIM_CANDIDATES, {"topic": "orders", "after": 0, "cut": 9, "limit": 10})
    assert "sqlite_autoindex_events_1 (topic=? AND offset>? AND offset<?)" in got
    assert "deliveries_live_events (topic=? AND offset=?)" in got


def test_the_fresh_lane_reads_pending_deliveries_in_offset_order(db: sqlite3.Connection) -> None:
    got = plan(db, q.TAKE_FRESH, TAKE)
    assert "deliveries_by_subscription (subscription_id=? AND state=?)" in got
    # No sort: a backlog of pending deliveries is never read whole to take a few.
    assert "TEMP B-TREE" not in got


def test_the_retry_lane_reads_only_due_retries(db: sqlite3.Connection) -> None:
    got = plan(db, q.TAKE_RETRY, TAKE)
    assert "deliveries_waiting (subscription_id=? AND state=? AND due_at<?)" in got


def test_ordered_takes_look_up_earlier_deliveries_of_the_key(db: sqlite3.Connection) -> None:
    for sql in (q.TAKE_FRESH, q.TAKE_RETRY):
        got = plan(db, sql, TAKE)
        assert "deliveries_live_keys (subscription_id=? AND key=? AND offset<?)" in got


def test_the_next_due_time_is_two_index_probes(db: sqlite3.Connection) -> None:
    got = plan(db, q.NEXT_DUE, {"sub": 1})
    assert got.count("COVERING INDEX deliveries_waiting (subscription_id=? AND state=?)") == 2


def test_a_takeover_finds_in_flight_deliveries_by_index(db: sqlite3.Connection) -> None:
    got = plan(db, q.LOSE_IN_FLIGHT, {"ids": "[1]", "now": 0.0})
    assert "deliveries_by_subscription (subscription_id=? AND state=?)" in got


def test_finishing_reads_only_the_subscriptions_in_flight(db: sqlite3.Connection) -> None:
    got = plan(db, q.IN_FLIGHT, ("[1, 2]", 1))
    assert "SCAN deliveries" not in got
    assert "deliveries_by_subscription (subscription_id=? AND state=?)" in got


def test_taken_deliveries_join_their_events_by_key(db: sqlite3.Connection) -> None:
    got = plan(db, q.DELIVERIES_WITH_EVENTS, ("[1, 2]",))
    assert "SEARCH d USING INTEGER PRIMARY KEY" in got
    assert "SEARCH e USING INDEX sqlite_autoindex_events_1 (topic=? AND offset=?)" in got
