"""Named SQL of the SQLite store. State lists come from the state machine, never typed by hand."""

from __future__ import annotations

from ...model import Overlap
from ...states import ACTIVE, TRANSITIONS, RunEvent, RunState, sources, sql_in, sql_match
from ..rows import DISTRIBUTION_COLUMNS, RUN_COLUMNS, RUN_FROM


def _to(event: RunEvent) -> str:
    """The one state ``event`` leads to, as an SQL literal (an enum constant, not user input)."""
    (target,) = set(TRANSITIONS[event].values())
    return f"'{target.value}'"


_WAITING = sql_match("state", sources(RunEvent.CLAIM))
_CANCELLING = TRANSITIONS[RunEvent.CANCEL][RunState.RUNNING]
_RUN = _to(RunEvent.CLAIM)
"""A claimed run's state."""
_REQ = _to(RunEvent.REQUEUE)
"""A requeued run's state."""

# A plain run (rows.plain: no route, limit or parent) leaves the distribution columns to their
# defaults, so the common insert binds no more values than before they existed.
_INSERT_COLUMNS = """task, queue, state, priority, lane, eta, max_attempts, timeout,
    idempotency_key, target_worker, route_key, job_id, fire_at, concurrency_key, overlap,
    namespace, created_at, updated_at"""
INSERT_RUN = f"""
INSERT INTO runs ({_INSERT_COLUMNS})
VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# The common columns (rows.new_run_values), the times, then rows.DISTRIBUTION_COLUMNS.
INSERT_FULL_RUN = f"""
INSERT INTO runs ({_INSERT_COLUMNS}, {", ".join(DISTRIBUTION_COLUMNS)})
VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# Without a target, DO NOTHING covers every unique key: the idempotency key and (job, fire).
INSERT_KEYED_RUN = INSERT_FULL_RUN + " ON CONFLICT DO NOTHING RETURNING id"
RUN_BY_FIRE = "SELECT id FROM runs WHERE job_id = ? AND fire_at = ?"
# An idempotency key is unique per namespace (0017): another namespace's run is never found.
RUN_BY_KEY = "SELECT id FROM runs WHERE namespace = ? AND idempotency_key = ?"
INSERT_PAYLOAD = """
INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at, trace)
VALUES (?, ?, ?, ?, ?, ?)
"""

PROMOTE_DUE = f"""
UPDATE runs INDEXED BY runs_due SET state = {_to(RunEvent.DUE)}, updated_at = :now
WHERE {sql_match("state", sources(RunEvent.DUE))} AND eta <= :now
"""
READY_COLUMNS = """id, attempts, used, task, queue, max_attempts, timeout, eta, concurrency_key,
    overlap, parent_id, child_index, shard_total, limit_key, limit_max, rate_key, rate_max,
    rate_period"""
"""What a claim reads of each ready run (see ``leases._claimed`` and ``limits.admitted``)."""
# Runs of a job with overlap=queue wait while another run with their key is active. A run
# whose limit key is saturated or whose rate window is full is left out, so it never blocks
# the runs behind it (the claim then admits, among the picked, what fits together).
_SELECT_READY = f"""
SELECT {READY_COLUMNS}
FROM runs
WHERE {_WAITING} AND namespace = :namespace AND queue = :queue
  AND (target_worker IS NULL OR target_worker = :worker){{tasks}}{{labels}}
  AND NOT (overlap = '{Overlap.QUEUE.value}' AND concurrency_key IN (
        SELECT concurrency_key FROM runs INDEXED BY runs_active_key
        WHERE concurrency_key IS NOT NULL AND state IN {sql_in(ACTIVE)}))
  AND (limit_key IS NULL OR limit_max > (
        SELECT count(*) FROM runs AS busy INDEXED BY runs_limited
        WHERE busy.limit_key = runs.limit_key AND busy.state IN {sql_in(ACTIVE)}))
  AND (rate_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM rate_windows AS w
        WHERE w.key = runs.rate_key AND w.window_start + w.period > :now
          AND w.used >= runs.rate_max))
ORDER BY lane, priority DESC, eta, id
LIMIT :limit OFFSET :offset
"""
# "+task": the task test must not lead the planner to runs_by_task instead of runs_ready.
_TASKS = "\n  AND +task IN (SELECT value FROM json_each(:tasks))"
_LABELS = """
  AND (route_labels IS NULL OR NOT EXISTS (
        SELECT 1 FROM json_each(route_labels) AS need
        WHERE need.value NOT IN (SELECT value FROM json_each(:labels))))"""
_NO_LABELS = "\n  AND route_labels IS NULL"
SELECT_READY = {
    (tasks, labels): _SELECT_READY.format(
        tasks=_TASKS if tasks else "", labels=_LABELS if labels else _NO_LABELS
    )
    for tasks in (False, True)
    for labels in (False, True)
}
"""The pick of one queue, by (the claim names its tasks, the worker has labels)."""
ACTIVE_KEYS = f"""
SELECT concurrency_key, id FROM runs INDEXED BY runs_active_key
WHERE concurrency_key IN (SELECT value FROM json_each(?)) AND concurrency_key IS NOT NULL
  AND state IN {sql_in(ACTIVE)}
"""
SKIP_RUN = f"""
UPDATE runs SET state = {_to(RunEvent.SKIP)}, updated_at = :now, finished_at = :now
WHERE id = :id AND state IN {sql_in(sources(RunEvent.SKIP))}
"""
CANCEL_RUNNING = f"""
UPDATE runs SET state = '{_CANCELLING.value}', updated_at = :now
WHERE id = :id AND {sql_match("state", [RunState.RUNNING])}
"""
INSERT_ATTEMPT = """
INSERT INTO attempts (run_id, number, worker_id, started_at, fence) VALUES (?, ?, ?, ?, ?)
"""
# The claim's random fence goes on the run with its lease (see cronbus.store.fencing).
START_RUN = f"""
UPDATE runs SET state = {_RUN}, attempts = attempts + 1, lease_owner = ?, lease_expires = ?,
    attempt_id = ?, fence = ?, updated_at = ?
WHERE id = ?
"""
PAYLOADS = (
    "SELECT run_id, args, kwargs, trace FROM run_payloads"
    " WHERE run_id IN (SELECT value FROM json_each(?))"
)

# With the run's place as a child, for a fan-out parent its counters (fanouts: total, ended,
# succeeded, reduce spec, reduce run), and its limit key (its end lets another run go).
HELD = f"""
SELECT r.id, r.attempt_id, r.state, r.eta, r.job_id, r.concurrency_key, r.fence, r.parent_id,
    r.child_index, f.total, f.ended, f.succeeded, f.reduce_spec, f.reduce_run, r.limit_key
FROM runs r LEFT JOIN fanouts f ON f.run_id = r.id
WHERE r.id IN (SELECT value FROM json_each(?))
  AND r.state IN {sql_in(ACTIVE)}
"""
FINISH_RUN = """
UPDATE runs SET state = :state, lease_owner = NULL, lease_expires = NULL, eta = :eta,
    lane = :lane, used = used + :used, lost = lost + :lost, updated_at = :now,
    finished_at = :finished_at
WHERE id = :run_id AND attempt_id = :attempt_id
"""
# Attempts that already ended, for completions the fence refused (an ambiguous commit's retry).
ENDED_ATTEMPTS = """
SELECT id, fence, outcome FROM attempts
WHERE id IN (SELECT value FROM json_each(?)) AND outcome IS NOT NULL
"""
FINISH_ATTEMPT = """
UPDATE attempts SET finished_at = :now, outcome = :outcome, result = :result,
    error_type = :error_type, error_message = :error_message, traceback = :traceback,
    logs = :logs
WHERE id = :attempt_id
"""

RENEW_LEASES = f"""
UPDATE runs SET lease_expires = :expires
WHERE lease_owner = :worker AND state IN {sql_in(ACTIVE)}
RETURNING id, attempt_id, state, fence
"""
WORKER_SEEN = """
UPDATE workers SET heartbeat_at = :now WHERE id = :worker RETURNING drain_requested
"""

EXPIRED = f"""
SELECT id, attempt_id, state, lost, eta, job_id, parent_id, child_index
FROM runs INDEXED BY runs_leases
WHERE state IN {sql_in(ACTIVE)} AND lease_expires < :now
ORDER BY lease_expires LIMIT :limit
"""
AGE_RETRIES = f"""
UPDATE runs INDEXED BY runs_retry_aging SET lane = 0
WHERE {_WAITING} AND lane = 1 AND eta <= :cutoff
"""

RUN_STATE = "SELECT state, job_id, parent_id, child_index FROM runs WHERE id = ?"
JOB_RUN_STATES = """
SELECT job_id, state FROM runs WHERE id IN (SELECT value FROM json_each(?)) AND job_id IS NOT NULL
"""
SET_STATE = "UPDATE runs SET state = ?, updated_at = ?, finished_at = ? WHERE id = ? AND state = ?"
REQUEUE_IDS = f"""
UPDATE runs SET state = {_REQ}, lane = 0, used = 0, lost = 0, eta = :now, updated_at = :now,
    finished_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN {sql_in(sources(RunEvent.REQUEUE))}
RETURNING id, parent_id, child_index
"""
# A loose index scan: each step seeks the next namespace name, so the cost grows with the number
# of namespaces, not of runs (SELECT DISTINCT would walk the whole index).
_NAMESPACES = """
WITH RECURSIVE spaces(name) AS (
    SELECT (SELECT min(namespace) FROM runs INDEXED BY runs_by_state)
    UNION ALL
    SELECT (SELECT min(namespace) FROM runs INDEXED BY runs_by_state
            WHERE namespace > spaces.name)
    FROM spaces WHERE spaces.name IS NOT NULL
)
"""
RUN_NAMESPACES = _NAMESPACES + "SELECT name FROM spaces WHERE name IS NOT NULL"
# Every dead run, found per namespace through runs_by_state (namespace, state, id).
REQUEUE_ALL_DEAD = f"""{_NAMESPACES}
UPDATE runs INDEXED BY runs_by_state SET state = {_REQ}, lane = 0, used = 0, lost = 0,
    eta = :now, updated_at = :now, finished_at = NULL
WHERE namespace IN (SELECT name FROM spaces WHERE name IS NOT NULL)
  AND {sql_match("state", [RunState.DEAD])}
  AND id NOT IN (SELECT value FROM json_each(:keep))
RETURNING id, parent_id, child_index
"""

GET_RUN = f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = ?"
GET_RUNS = f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id IN (SELECT value FROM json_each(?))"
LIST_ATTEMPTS = """
SELECT id, run_id, number, worker_id, started_at, finished_at, outcome, result, error_type,
       error_message, traceback, logs
FROM attempts WHERE run_id = ? ORDER BY id
"""
NEXT_ETA = f"""
SELECT min(eta) FROM runs INDEXED BY runs_due
WHERE {sql_match("state", sources(RunEvent.DUE))} AND namespace = :namespace
  AND queue IN (SELECT value FROM json_each(:queues))
"""

UPSERT_WORKER = """
INSERT INTO workers (id, host, pid, queues, labels, concurrency, version, started_at,
                     heartbeat_at, state, namespace, tasks, drain_requested, lease_seconds)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, labels = excluded.labels, concurrency = excluded.concurrency,
    version = excluded.version, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, state = excluded.state,
    namespace = excluded.namespace, tasks = excluded.tasks,
    drain_requested = excluded.drain_requested, lease_seconds = excluded.lease_seconds
"""
REQUEST_DRAIN = "UPDATE workers SET drain_requested = 1 WHERE id = ?"
SET_WORKER_STATE = "UPDATE workers SET state = ?, heartbeat_at = ? WHERE id = ?"
# A worker that still owns a run keeps its row until the reaper has taken the run back.
PRUNE_WORKERS = f"""
DELETE FROM workers WHERE heartbeat_at < ?
AND NOT EXISTS (
    SELECT 1 FROM runs r WHERE r.lease_owner = workers.id AND {sql_match("r.state", ACTIVE)}
)
RETURNING id
"""
_WORKER_COLUMNS = """
SELECT id, host, pid, queues, labels, concurrency, version, started_at, heartbeat_at, state,
    namespace, tasks, drain_requested, lease_seconds
FROM workers"""
LIST_WORKERS = f"{_WORKER_COLUMNS} ORDER BY started_at DESC"
LIST_NAMESPACE_WORKERS = f"{_WORKER_COLUMNS} WHERE namespace = ? ORDER BY started_at DESC"
GET_WORKER = f"{_WORKER_COLUMNS} WHERE id = ?"
WORKER_RUNS = f"SELECT id FROM runs WHERE lease_owner = ? AND state IN {sql_in(ACTIVE)}"
RUNNING_BY_OWNER = f"SELECT lease_owner, id FROM runs WHERE state IN {sql_in(ACTIVE)}"

REGISTER_WAKEUP = """
INSERT INTO wakeups (address, pid, channels, registered_at) VALUES (?, ?, ?, ?)
ON CONFLICT (address) DO UPDATE SET channels = excluded.channels
"""
LIST_WAKEUPS = "SELECT address, channels FROM wakeups"
DELETE_WAKEUP = "DELETE FROM wakeups WHERE address = ?"
