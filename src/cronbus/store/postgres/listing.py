"""Run listings, counts and purges of the PostgreSQL store, by namespace.

A listing is newest first with a keyset (``id < before_id``), never an offset: each
(namespace, state) range is an index range of 0006 that ends in the run id, read backwards and
stopped at the page size, so a page deep in the listing costs what the first one does. Several
ranges (every namespace, several states, or every state when no filter is given: a namespace's
runs have no index of their own, which every claim would have to update) are one statement: a
``UNION ALL`` of bounded ranges (PostgreSQL cannot read ``state = ANY(...)`` in id order through
one index), merged, then the page's runs read whole. Payload matches (:mod:`.matches`) filter
within each range, one probe of ``run_payloads`` per run read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...model import RunFilter
from ...states import TERMINAL, sql_in
from ..logic import created_after_bound, listing_arms
from .matches import payload_condition
from .sql import RUN_COLUMNS, RUN_FROM, RUN_NAMESPACES

COUNT_RUNS = "SELECT state, count(*) FROM runs GROUP BY state"
COUNT_NAMESPACE_RUNS = "SELECT state, count(*) FROM runs WHERE namespace = %s GROUP BY state"
# Through runs_finished (namespace, finished_at, state), one range per namespace, from the index
# alone; every namespace is found by the loose scan of RUN_NAMESPACES.
PER_MINUTE = f"""
SELECT floor(finished_at / 60) * 60 AS minute, state, count(*)
FROM runs
WHERE namespace = ANY(coalesce(%(spaces)b::text[], ARRAY({RUN_NAMESPACES})))
  AND finished_at >= %(since)s AND finished_at < %(until)s AND state IN {sql_in(TERMINAL)}
GROUP BY 1, 2 ORDER BY 1, 2
"""
DELETE_RUNS = f"""
WITH doomed AS (
    DELETE FROM runs WHERE id = ANY(%(ids)b::bigint[]) AND state IN {sql_in(TERMINAL)}
    RETURNING id
),
payloads AS (DELETE FROM run_payloads WHERE run_id IN (SELECT id FROM doomed)),
attempts AS (DELETE FROM attempts WHERE run_id IN (SELECT id FROM doomed)),
counters AS (DELETE FROM fanouts WHERE run_id IN (SELECT id FROM doomed))
SELECT id FROM doomed ORDER BY id
"""
# Each namespace's bound is read first, so that the listing is planned knowing it (an InitPlan's
# value is unknown to the planner, which then may choose to read a whole range).
SINCE_BOUNDS = f"""
SELECT s.name, {created_after_bound("", "s.name", "%(since)s")}
FROM unnest(%(spaces)b::text[]) AS s(name)
"""
_FILTERS = (
    ("task", "r.task = %s"),
    ("queue", "r.queue = %s"),
    ("job_id", "r.job_id = %s"),
    ("before_id", "r.id < %s"),
    ("created_after", "r.created_at >= %s"),
    ("created_before", "r.created_at < %s"),
)


def listing_query(
    filter: RunFilter, namespaces: Sequence[str], bounds: Mapping[str, int] | None = None
) -> tuple[str, list[Any]]:
    """The statement of a listing and its parameters: one range per (namespace, state).

    One range is read whole; several are read as ids (index-only where the index covers the
    filter), merged, and only the page's runs are read whole. ``bounds`` are the lowest ids
    the namespaces' ranges start from (:data:`SINCE_BOUNDS`; 0: none).
    """
    shared = [(clause, getattr(filter, name)) for name, clause in _FILTERS]
    given = [(clause, [value]) for clause, value in shared if value is not None]
    if filter.args:
        condition, values = payload_condition(filter.args)
        given.append((condition, values))
    arms = listing_arms(filter, namespaces)
    ranges: list[str] = []
    params: list[Any] = []
    for namespace, state in arms:
        clauses = ["r.namespace = %s", *(["r.state = %s"] if state is not None else [])]
        clauses.extend(clause for clause, _ in given)
        params.extend([namespace, *([state] if state is not None else [])])
        params.extend(value for _, values in given for value in values)
        if bounds and bounds.get(namespace):
            clauses.append("r.id >= %s")
            params.append(bounds[namespace])
        params.append(filter.limit)
        condition = " AND ".join(clauses)
        if len(arms) == 1:
            sql = f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE {condition} ORDER BY r.id DESC LIMIT %s"
            return sql, params
        ranges.append(f"SELECT r.id FROM runs r WHERE {condition} ORDER BY r.id DESC LIMIT %s")
    union = " UNION ALL ".join(f"({sql})" for sql in ranges)
    params.append(filter.limit)
    page = f"SELECT id FROM ({union}) AS ranges ORDER BY id DESC LIMIT %s"
    return (
        f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = ANY(ARRAY({page})) ORDER BY r.id DESC",
        params,
    )
