"""Named SQL of the SQLite store's distribution: routing, limits and fan-out (0009).

State lists come from the state machine (``sql_in``), sorted as the partial indexes of 0009
write them, so SQLite matches ``runs_targeted`` and ``runs_limited``.
"""

from __future__ import annotations

from ...liveness import live_sql
from ...states import ACTIVE, RunEvent, RunState, sources, sql_in
from ..rows import RUN_COLUMNS, RUN_FROM, WAITING_BROADCAST_COLUMNS

_WAITING_RUNS = sql_in(sources(RunEvent.CLAIM) | sources(RunEvent.DUE))
"""Runs that wait for a worker (queued, scheduled): the states runs_targeted covers."""

# -- routing -----------------------------------------------------------------------------------
# A live worker: alive (not draining, stopped or lost) and beat within its own lease.
LIVE_WORKERS = f"""
SELECT id, namespace, queues, labels, tasks FROM workers
WHERE {live_sql(":now")}
  AND namespace IN (SELECT value FROM json_each(:spaces))
"""
ALL_LIVE_WORKERS = f"""
SELECT id, namespace, queues, labels, tasks FROM workers
WHERE {live_sql(":now")}
"""
# least_busy: each worker's running runs and the waiting runs targeted at it.
LOADS = f"""
SELECT worker, count(*) FROM (
    SELECT lease_owner AS worker FROM runs INDEXED BY runs_owner
    WHERE lease_owner IN (SELECT value FROM json_each(:ids)) AND state IN {sql_in(ACTIVE)}
    UNION ALL
    SELECT target_worker FROM runs INDEXED BY runs_targeted
    WHERE target_worker IN (SELECT value FROM json_each(:ids)) AND state IN {_WAITING_RUNS}
) GROUP BY worker
"""
TURNS = """
SELECT namespace, task, turn FROM route_cursors
WHERE namespace IN (SELECT value FROM json_each(?)) AND task IN (SELECT value FROM json_each(?))
"""
PUT_TURN = """
INSERT INTO route_cursors (namespace, task, turn) VALUES (?, ?, ?)
ON CONFLICT (namespace, task) DO UPDATE SET turn = excluded.turn
"""
# A loose index scan of the workers that waiting runs are targeted at: one seek per worker.
TARGETS = f"""
WITH RECURSIVE targets(worker) AS (
    SELECT (SELECT min(target_worker) FROM runs INDEXED BY runs_targeted
            WHERE target_worker IS NOT NULL AND state IN {_WAITING_RUNS})
    UNION ALL
    SELECT (SELECT min(target_worker) FROM runs INDEXED BY runs_targeted
            WHERE target_worker > targets.worker AND state IN {_WAITING_RUNS})
    FROM targets WHERE targets.worker IS NOT NULL
)
SELECT worker FROM targets WHERE worker IS NOT NULL
"""
STRANDED = f"""
SELECT id, task, queue, namespace, route, route_key, route_labels, route_order, target_worker,
    parent_id, child_index, attempts, state
FROM runs INDEXED BY runs_targeted
WHERE target_worker IN (SELECT value FROM json_each(:gone)) AND state IN {_WAITING_RUNS}
ORDER BY id LIMIT :limit
"""
RETARGET = f"""
UPDATE runs SET target_worker = ?, updated_at = ? WHERE id = ? AND state IN {_WAITING_RUNS}
"""
# A broadcast child whose worker is gone ends dead, with an attempt that says so.
END_STRANDED = f"""
UPDATE runs SET state = :state, attempts = attempts + 1, attempt_id = :attempt_id,
    updated_at = :now, finished_at = :now
WHERE id = :id AND state IN {_WAITING_RUNS}
"""
INSERT_GONE_ATTEMPT = """
INSERT INTO attempts (run_id, number, worker_id, started_at, finished_at, outcome, error_type,
                      error_message)
VALUES (:id, :number, :worker, :now, :now, :outcome, :error_type, :error_message)
"""
# Tasks that have runs in a namespace: a loose scan of runs_by_task (one seek per task).
RUN_TASKS = """
WITH RECURSIVE names(task) AS (
    SELECT (SELECT min(task) FROM runs INDEXED BY runs_by_task WHERE namespace = :namespace)
    UNION ALL
    SELECT (SELECT min(task) FROM runs INDEXED BY runs_by_task
            WHERE namespace = :namespace AND task > names.task)
    FROM names WHERE names.task IS NOT NULL
)
SELECT task FROM names WHERE task IS NOT NULL
"""
QUEUED_TASKS = f"""
SELECT DISTINCT task FROM runs INDEXED BY runs_ready
WHERE namespace = :namespace AND state = '{RunState.QUEUED.value}'
  AND task IN (SELECT value FROM json_each(:tasks))
"""

# -- limits ------------------------------------------------------------------------------------
ACTIVE_LIMITS = f"""
SELECT limit_key, count(*) FROM runs INDEXED BY runs_limited
WHERE limit_key IN (SELECT value FROM json_each(?)) AND state IN {sql_in(ACTIVE)}
GROUP BY limit_key
"""
WINDOWS = """
SELECT key, window_start, used, max_starts, period FROM rate_windows
WHERE key IN (SELECT value FROM json_each(?))
"""
PUT_WINDOW = """
INSERT INTO rate_windows (key, period, max_starts, window_start, used) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET period = excluded.period, max_starts = excluded.max_starts,
    window_start = excluded.window_start, used = excluded.used
"""
# Keys start with "<namespace>:", so a namespace's windows are one range of the primary key.
FULL_WINDOW_ENDS = """
SELECT min(window_start + period) FROM rate_windows
WHERE key > :low AND key < :high AND used >= max_starts AND window_start + period > :now
"""

# -- fan-out -----------------------------------------------------------------------------------
INSERT_FANOUT = "INSERT INTO fanouts (run_id, kind, total, note) VALUES (?, ?, ?, ?)"
END_PARENT = f"""
UPDATE runs SET state = :state, updated_at = :now, finished_at = :now
WHERE id = :id AND state = '{RunState.WAITING.value}'
"""
# Adds ended children to a parent's counters; returns them with the parent's state.
ADD_ENDS = """
UPDATE fanouts SET ended = ended + ?, succeeded = succeeded + ? WHERE run_id = ?
RETURNING total, ended, succeeded, reduce_spec, reduce_run,
    (SELECT state FROM runs WHERE id = fanouts.run_id),
    (SELECT parent_id FROM runs WHERE id = fanouts.run_id),
    (SELECT child_index FROM runs WHERE id = fanouts.run_id)
"""
TALLY = """
SELECT f.total, f.ended, f.succeeded, f.reduce_spec, f.reduce_run, r.state, r.parent_id,
    r.child_index
FROM fanouts f JOIN runs r ON r.id = f.run_id WHERE f.run_id = ?
"""
SET_REDUCE_RUN = "UPDATE fanouts SET reduce_run = ? WHERE run_id = ?"
CHILD_RESULTS = """
SELECT a.result FROM runs r INDEXED BY runs_children LEFT JOIN attempts a ON a.id = r.attempt_id
WHERE r.parent_id = ? AND r.child_index IS NOT NULL ORDER BY r.child_index
"""
# Cancelling a waiting parent: its children still going, a state at a time.
CANCEL_CHILDREN = """
UPDATE runs SET state = :to, updated_at = :now,
    finished_at = CASE WHEN :terminal THEN :now ELSE finished_at END
WHERE parent_id = :parent AND child_index IS NOT NULL AND state = :from
RETURNING id, child_index
"""
CANCEL_RUN = """
UPDATE runs SET state = :to, updated_at = :now,
    finished_at = CASE WHEN :terminal THEN :now ELSE finished_at END
WHERE id = :id AND state = :from
RETURNING id, child_index
"""
SPAWN_FANOUT = """
INSERT INTO fanouts (run_id, kind, reduce_spec) VALUES (:id, 'map', :spec)
ON CONFLICT (run_id) DO UPDATE SET reduce_spec = coalesce(:spec, fanouts.reduce_spec)
"""
PARENT_LEASE = "SELECT state, attempt_id, fence FROM runs WHERE id = ?"
EXISTING_CHILDREN = """
SELECT child_index FROM runs INDEXED BY runs_children
WHERE parent_id = ? AND child_index IN (SELECT value FROM json_each(?))
"""
ADD_TOTAL = "UPDATE fanouts SET total = total + ? WHERE run_id = ?"
LIST_CHILDREN = f"""
SELECT {RUN_COLUMNS} {RUN_FROM.replace("FROM runs r", "FROM runs r INDEXED BY runs_children")}
WHERE r.parent_id = ? AND r.child_index IS NOT NULL AND r.child_index > ?
ORDER BY r.child_index LIMIT ?
"""
REDUCE_OF = f"""
SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = (SELECT reduce_run FROM fanouts WHERE run_id = ?)
"""

# -- requeue -----------------------------------------------------------------------------------
_REQUEUABLE = sql_in(sources(RunEvent.REQUEUE))
# Fan-out parents among runs to requeue, with the outcome of their last attempt (a map body).
PARENTS_OF_IDS = """
SELECT r.id, r.state, f.kind, a.outcome, r.parent_id, r.child_index
FROM fanouts f JOIN runs r ON r.id = f.run_id LEFT JOIN attempts a ON a.id = r.attempt_id
WHERE f.run_id IN (SELECT value FROM json_each(?))
"""
DEAD_PARENTS = f"""
SELECT r.id, r.state, f.kind, a.outcome, r.parent_id, r.child_index
FROM fanouts f JOIN runs r ON r.id = f.run_id LEFT JOIN attempts a ON a.id = r.attempt_id
WHERE r.state = '{RunState.DEAD.value}'
"""
REQUEUE_CHILDREN = f"""
UPDATE runs SET state = '{RunState.QUEUED.value}', lane = 0, used = 0, lost = 0, eta = :now,
    updated_at = :now, finished_at = NULL
WHERE parent_id = :parent AND child_index IS NOT NULL AND state IN {_REQUEUABLE}
RETURNING id, parent_id, child_index
"""
REVIVE = """
UPDATE runs SET state = :to, updated_at = :now, finished_at = NULL WHERE id = :id AND state = :from
"""
SUB_ENDS = "UPDATE fanouts SET ended = ended - ? WHERE run_id = ?"
REDUCE_RUN = "SELECT reduce_run FROM fanouts WHERE run_id = ?"

# -- broadcasts that wait for a live worker ------------------------------------------------------
# Read from fanouts (one row per parent, far fewer than runs), oldest first.
WAITING_BROADCASTS = f"""
SELECT {WAITING_BROADCAST_COLUMNS}
FROM fanouts f
JOIN runs r ON r.id = f.run_id
JOIN run_payloads p ON p.run_id = r.id
WHERE f.kind = 'broadcast' AND f.total = 0 AND r.state = '{RunState.WAITING.value}'
ORDER BY f.run_id LIMIT :limit
"""
SET_NOTE = "UPDATE fanouts SET note = ? WHERE run_id = ?"
# A broadcast parent no live worker came for ends dead, with an attempt that says so.
GIVE_UP_PARENT = f"""
UPDATE runs SET state = :state, attempts = attempts + 1, attempt_id = :attempt_id,
    updated_at = :now, finished_at = :now
WHERE id = :id AND state = '{RunState.WAITING.value}'
"""
# A requeued broadcast parent that had no children waits again for a live worker (its wait
# counts from now: updated_at); its counters' note is cleared until it ends again.
REVIVE_CHILDLESS = f"""
UPDATE runs SET state = '{RunState.WAITING.value}', updated_at = :now, finished_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN {_REQUEUABLE}
  AND EXISTS (SELECT 1 FROM fanouts f
              WHERE f.run_id = runs.id AND f.kind = 'broadcast' AND f.total = 0)
RETURNING id, parent_id, child_index
"""
CLEAR_NOTES = "UPDATE fanouts SET note = '' WHERE run_id IN (SELECT value FROM json_each(?))"
