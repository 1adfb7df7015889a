"""Named SQL that inserts runs into the PostgreSQL store.

Ids come from the sequence in input order (volatile functions are evaluated after the sort), so
the statement returns them in order and the payloads go in with the runs, in one statement.
Plain runs (no route, limit or fan-out: almost all of them) use statements without the columns
of distribution (0009), which keep their defaults; the others use the same statements with them.
"""

from __future__ import annotations

_PLAIN_ARRAYS = """
        %(task)b::text[], %(queue)b::text[], %(state)b::text[], %(priority)b::int[],
        %(eta)b::float8[], %(max_attempts)b::int[], %(timeout)b::float8[],
        %(idempotency_key)b::text[], %(target_worker)b::text[], %(route_key)b::text[],
        %(job_id)b::bigint[], %(fire_at)b::float8[], %(concurrency_key)b::text[],
        %(overlap)b::text[], %(namespace)b::text[], %(args)b::text[], %(kwargs)b::text[],
        %(trace)b::text[]"""
_PLAIN_NAMES = """task, queue, state, priority, eta, max_attempts, timeout,
        idempotency_key, target_worker, route_key, job_id, fire_at, concurrency_key, overlap,
        namespace, args, kwargs, trace"""
_PLAIN_COLUMNS = """task, queue, state, priority, eta, max_attempts, timeout,
        idempotency_key, target_worker, route_key, job_id, fire_at, concurrency_key, overlap,
        namespace"""
# Label lists travel as JSON text (an array of text[] cannot be unnested row by row).
_DIST_ARRAYS = """,
        %(route)b::text[], %(route_labels)b::text[], %(route_order)b::text[],
        %(limit_key)b::text[], %(limit_max)b::int[], %(rate_key)b::text[], %(rate_max)b::int[],
        %(rate_period)b::float8[], %(parent_id)b::bigint[], %(child_index)b::int[],
        %(shard_total)b::int[]"""
_DIST_NAMES = """, route, route_labels, route_order, limit_key, limit_max, rate_key,
        rate_max, rate_period, parent_id, child_index, shard_total"""
_DIST_COLUMNS = _DIST_NAMES


def _text_array(column: str) -> str:
    return f"ARRAY(SELECT json_array_elements_text({column}::json))"


_DIST_VALUES = f""", route,
        CASE WHEN route_labels IS NULL THEN NULL ELSE {_text_array("route_labels")} END,
        CASE WHEN route_order IS NULL THEN NULL ELSE {_text_array("route_order")} END,
        limit_key, limit_max, rate_key, rate_max, rate_period, parent_id, child_index,
        shard_total"""


def _new_runs(full: bool) -> str:
    arrays = _PLAIN_ARRAYS + (_DIST_ARRAYS if full else "")
    names = _PLAIN_NAMES + (_DIST_NAMES if full else "")
    return f"""
    SELECT nextval('runs_id_seq') AS id, n.*
    FROM unnest({arrays}
    ) WITH ORDINALITY AS n({names}, ord)
    ORDER BY n.ord
"""


def _insert_new_runs(full: bool) -> str:
    columns = _PLAIN_COLUMNS + (_DIST_COLUMNS if full else "")
    values = _PLAIN_COLUMNS + (_DIST_VALUES if full else "")
    return f"""
    INSERT INTO runs (id, {columns}, created_at, updated_at)
    SELECT id, {values}, %(now)s, %(now)s
    FROM new ORDER BY ord
"""


def insert_runs(full: bool) -> str:
    """New runs with their payloads; returns ``(true, id)`` per run in input order."""
    return f"""
WITH new AS ({_new_runs(full)}),
inserted AS ({_insert_new_runs(full)}),
payloads AS (
    INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at, trace)
    SELECT id, args, kwargs, namespace, %(now)s, trace FROM new
)
SELECT true, id FROM new ORDER BY ord
"""


def insert_keyed_runs(full: bool) -> str:
    """Runs with an idempotency key, a (job, fire) or a child's place: DO NOTHING without a
    target covers every unique key, and a row repeated within the batch loses to its first
    occurrence. The statement's snapshot cannot see rows it inserted itself, so those ids are
    looked up in ``inserted``; a run committed by another transaction after the snapshot comes
    back NULL (see ``RUN_BY_KEY_OR_FIRE``), as does a child whose place is taken. A key is
    unique per namespace (0017), so it is looked up in the new run's namespace only: another
    namespace's run is never returned."""
    return f"""
WITH new AS ({_new_runs(full)}),
inserted AS ({_insert_new_runs(full)} ON CONFLICT DO NOTHING RETURNING id),
payloads AS (
    INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at, trace)
    SELECT n.id, n.args, n.kwargs, n.namespace, %(now)s, n.trace
    FROM new n JOIN inserted i ON i.id = n.id
)
SELECT i.id IS NOT NULL, coalesce(
    i.id,
    (SELECT w.id FROM new w JOIN inserted x ON x.id = w.id
     WHERE w.namespace = n.namespace AND w.idempotency_key = n.idempotency_key),
    (SELECT r.id FROM runs r
     WHERE r.namespace = n.namespace AND r.idempotency_key = n.idempotency_key),
    (SELECT w.id FROM new w JOIN inserted x ON x.id = w.id
     WHERE w.job_id = n.job_id AND w.fire_at = n.fire_at),
    (SELECT r.id FROM runs r WHERE r.job_id = n.job_id AND r.fire_at = n.fire_at))
FROM new n LEFT JOIN inserted i ON i.id = n.id
ORDER BY n.ord
"""


INSERT_RUNS = insert_runs(full=False)
INSERT_KEYED_RUNS = insert_keyed_runs(full=False)
INSERT_ROUTED_RUNS = insert_runs(full=True)
INSERT_ROUTED_KEYED_RUNS = insert_keyed_runs(full=True)
