"""The hot queries of the SQLite store use their indexes, not scans: asserted on the query plan,
so a change of schema or SQL that loses an index fails here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cronbus.store import open_store
from cronbus.store.sqlite import jobs_sql
from cronbus.store.sqlite import sql as q


async def plan_of(path: Path, sql: str, params: object) -> str:
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()  # type: ignore[arg-type]
    finally:
        conn.close()
    return "\n".join(str(row[-1]) for row in rows)


async def test_due_jobs_use_the_next_fire_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", jobs_sql.DUE_JOBS, (0.0, 10))
    assert "USING INDEX jobs_due" in plan
    assert "SCAN jobs" not in plan.replace("USING INDEX", "")


@pytest.mark.parametrize(("tasks", "labels"), list(q.SELECT_READY), ids=str)
async def test_the_claim_uses_the_ready_index(tmp_path: Path, tasks: bool, labels: bool) -> None:
    # Every form of the pick (naming the worker's tasks or not, with labels or not) walks the
    # ready index in claim order, whatever the task and label tests add.
    params = {
        "namespace": "default",
        "queue": "q",
        "worker": "w",
        "limit": 10,
        "offset": 0,
        "now": 0.0,
        "tasks": '["t"]',
        "labels": '["gpu"]',
    }
    plan = await plan_of(tmp_path / "p.db", q.SELECT_READY[tasks, labels], params)
    assert "USING INDEX runs_ready" in plan
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan


async def test_promotion_uses_the_due_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", q.PROMOTE_DUE, {"now": 0.0})
    assert "runs_due" in plan


async def test_the_next_due_run_uses_the_due_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", q.NEXT_ETA, ("default", '["q"]'))
    assert "runs_due" in plan


async def test_reaping_uses_the_lease_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", q.EXPIRED, {"now": 0.0, "limit": 10})
    assert "runs_leases" in plan


async def test_aging_uses_the_retry_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", q.AGE_RETRIES, {"cutoff": 0.0})
    assert "runs_retry_aging" in plan


async def test_overlap_checks_use_the_active_key_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", q.ACTIVE_KEYS, ('["job:1"]',))
    assert "runs_active_key" in plan


async def test_heartbeats_use_the_owner_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", q.RENEW_LEASES, {"expires": 0.0, "worker": "w"})
    assert "runs_owner" in plan
