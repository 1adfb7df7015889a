"""Run listings, counts and purges of the SQLite store, by namespace.

A listing is newest first with a keyset (``id < before_id``), never an offset: each
(namespace, state) range is read through one index that ends in the run id (0006), named with
``INDEXED BY`` so the plan cannot drift to a scan and a sort; a page deep in the listing costs
what the first one does. Several ranges (every namespace, several states, or every state when
no filter is given: a namespace's runs have no index of their own, which every claim would have
to update) are read one by one and merged, each bounded by the page size. Payload matches
(:mod:`.matches`) filter within each range, one probe of ``run_payloads`` per run read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...model import RunFilter
from ...states import TERMINAL, sql_in
from ..logic import created_after_bound, listing_arms, listing_index
from ..rows import RUN_COLUMNS, RUN_FROM
from .matches import payload_condition
from .rows import Row
from .sql import RUN_NAMESPACES

COUNT_RUNS = "SELECT state, count(*) FROM runs GROUP BY state"
COUNT_NAMESPACE_RUNS = """
SELECT state, count(*) FROM runs INDEXED BY runs_by_state WHERE namespace = ? GROUP BY state
"""
# Through runs_finished (namespace, finished_at, state): the window's entries only, read from
# the index alone. CAST truncates, which is the floor for epoch times (positive).
PER_MINUTE = f"""
SELECT CAST(finished_at / 60 AS INTEGER) * 60 AS minute, state, count(*)
FROM runs INDEXED BY runs_finished
WHERE namespace IN (SELECT value FROM json_each(:spaces)) AND finished_at IS NOT NULL
  AND finished_at >= :since AND finished_at < :until AND state IN {sql_in(TERMINAL)}
GROUP BY minute, state ORDER BY minute, state
"""
_DOOMED = f"""
SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?)) AND state IN {sql_in(TERMINAL)}
"""
DELETE_RUNS = "DELETE FROM runs WHERE id IN (SELECT value FROM json_each(?))"
DELETE_PAYLOADS = "DELETE FROM run_payloads WHERE run_id IN (SELECT value FROM json_each(?))"
DELETE_ATTEMPTS = "DELETE FROM attempts WHERE run_id IN (SELECT value FROM json_each(?))"
# A purged parent's counters go with it (children still going are then counted nowhere).
DELETE_FANOUTS = "DELETE FROM fanouts WHERE run_id IN (SELECT value FROM json_each(?))"


_SINCE = "r.id >= " + created_after_bound("INDEXED BY run_payloads_by_created", "?", "?")
GET_RUNS = f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id IN (SELECT value FROM json_each(?))"


def run_namespaces(conn: sqlite3.Connection) -> list[str]:
    """The namespaces that have runs, by name."""
    return [row[0] for row in conn.execute(RUN_NAMESPACES)]


def list_runs(conn: sqlite3.Connection, filter: RunFilter) -> list[Row]:
    """The rows of a listing: one bounded range per (namespace, state), merged newest first.

    One range is read whole; several are read as ids (from the index alone where it covers the
    filter), and only the page's runs are read whole.
    """
    spaces = [filter.namespace] if filter.namespace is not None else run_namespaces(conn)
    arms = listing_arms(filter, spaces)
    where, common = _common(filter)
    index = listing_index(filter)
    ids: list[int] = []
    for namespace, state in arms:
        clauses = ["r.namespace = ?", *(["r.state = ?"] if state is not None else []), *where]
        params = [namespace, *([state] if state is not None else []), *common]
        if filter.created_after is not None:
            clauses.append(_SINCE)
            params.extend([namespace, filter.created_after])
        params.append(filter.limit)
        condition = " AND ".join(clauses)
        if len(arms) == 1:
            source = RUN_FROM.replace("FROM runs r", f"FROM runs r INDEXED BY {index}")
            sql = f"SELECT {RUN_COLUMNS} {source} WHERE {condition} ORDER BY r.id DESC LIMIT ?"
            return conn.execute(sql, params).fetchall()
        sql = (
            f"SELECT r.id FROM runs r INDEXED BY {index} WHERE {condition} "
            "ORDER BY r.id DESC LIMIT ?"
        )
        ids.extend(row[0] for row in conn.execute(sql, params))
    page = sorted(ids, reverse=True)[: filter.limit]
    rows = conn.execute(GET_RUNS, (json.dumps(page),)).fetchall()
    return sorted(rows, key=lambda row: row[0], reverse=True)


def _common(filter: RunFilter) -> tuple[list[str], list[Any]]:
    """The conditions every range of a listing shares, with their parameters."""
    where: list[str] = []
    params: list[Any] = []
    for clause, value in (
        ("r.task = ?", filter.task),
        ("r.queue = ?", filter.queue),
        ("r.job_id = ?", filter.job_id),
        ("r.id < ?", filter.before_id),
        ("r.created_at >= ?", filter.created_after),
        ("r.created_at < ?", filter.created_before),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    if filter.args:
        condition, values = payload_condition(filter.args)
        where.append(condition)
        params.extend(values)
    return where, params


def per_minute(
    conn: sqlite3.Connection, namespace: str | None, since: float, until: float
) -> list[tuple[float, str, int]]:
    """Ended runs per minute and terminal state, in ``[since, until)``."""
    spaces = [namespace] if namespace is not None else run_namespaces(conn)
    params = {"spaces": json.dumps(spaces), "since": since, "until": until}
    return [(float(m), state, n) for m, state, n in conn.execute(PER_MINUTE, params)]


def delete_runs(conn: sqlite3.Connection, run_ids: Sequence[int]) -> list[int]:
    """Delete the ended runs among ``run_ids`` with their payloads and attempts."""
    ids = sorted(row[0] for row in conn.execute(_DOOMED, (json.dumps(list(run_ids)),)))
    if ids:
        doomed = json.dumps(ids)
        for sql in (DELETE_ATTEMPTS, DELETE_PAYLOADS, DELETE_FANOUTS, DELETE_RUNS):
            conn.execute(sql, (doomed,))
    return ids
