"""The admin queries of the SQLite store use their indexes: a token looked up on every request,
the audit and operations listings page by page, the check that a namespace is empty (a probe per
table, even over a million runs)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cronbus.store import open_store
from cronbus.store.sqlite import admin_sql as aq


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


def scans(plan: str) -> set[str]:
    """The tables a plan reads whole (``SCAN t``, not ``SCAN t USING INDEX`` nor a constant)."""
    return {
        line.split()[1]
        for line in plan.splitlines()
        if line.startswith("SCAN ") and "USING" not in line and "CONSTANT ROW" not in line
    }


async def test_a_token_is_found_by_its_hash_through_the_unique_index(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", aq.TOKEN_BY_HASH, ("h",))
    assert "USING INDEX sqlite_autoindex_tokens" in plan


async def test_audit_pages_of_a_namespace_are_ranges_of_its_index(tmp_path: Path) -> None:
    params = {"namespace": "a", "before": 10, "limit": 50}
    plan = await plan_of(tmp_path / "p.db", aq.LIST_AUDIT_OF, params)
    assert "audit_by_namespace (namespace=? AND id<?)" in plan
    assert "TEMP B-TREE" not in plan
    assert scans(plan) == set()


async def test_operations_pages_of_a_namespace_are_ranges_of_its_index(tmp_path: Path) -> None:
    params = {"namespace": "a", "before": 10, "limit": 50}
    plan = await plan_of(tmp_path / "p.db", aq.LIST_OPERATIONS_OF, params)
    assert "operations_by_namespace (namespace=? AND id<?)" in plan
    assert "TEMP B-TREE" not in plan
    assert scans(plan) == set()


async def test_every_page_of_the_whole_audit_walks_the_primary_key(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", aq.LIST_AUDIT, {"before": 10, "limit": 50})
    assert "INTEGER PRIMARY KEY" in plan
    assert "TEMP B-TREE" not in plan


async def test_a_namespace_in_use_is_found_by_one_probe_per_table(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", aq.NAMESPACE_USERS, {"name": "a", "now": 1.0})
    for index in (
        "jobs_by_namespace",
        "topics_by_namespace",
        "subscriptions_by_namespace",
    ):
        assert index in plan
    # Runs have no index on the namespace alone (each would slow the claim): any of their
    # indexes that starts with it answers the probe.
    assert "SEARCH runs USING COVERING INDEX runs_by_" in plan
    assert "(namespace=?)" in plan
    # Tokens are few (a scan of them, with each one's list of names, is fine); nothing else may
    # be read whole.
    assert scans(plan) == {"tokens", "n"}


async def test_trimming_idempotency_records_reads_only_old_ones(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path / "p.db", aq.TRIM_IDEMPOTENCY, (1.0,))
    assert "idempotency_by_age" in plan
