"""Named SQL of the PostgreSQL store. State lists come from the state machine, never typed by hand.

Tables are unqualified: every connection of a store sets ``search_path`` to the store's schema.
Batches travel as arrays (``unnest``), so a statement costs the same for one row or a thousand;
parameters are psycopg's named ``%(name)s`` placeholders, and arrays go in binary (``%(name)b``:
psycopg's text format quotes every element, which costs more than the insert itself).
"""

from __future__ import annotations

from ...model import Lane, Overlap
from ...states import ACTIVE, RunEvent, RunState, sources, sql_in, sql_match
from ..rows import RUN_COLUMNS as _RUN_COLUMNS
from ..rows import RUN_FROM as _RUN_FROM


def _compact(statement: str) -> str:
    """``statement`` without its indentation and blank lines (it holds no string literal that
    spans lines, nor ``--`` comments)."""
    return "\n".join(line.strip() for line in statement.splitlines() if line.strip())


def _value(value: str | int) -> str:
    """A single state, lane or policy as an SQL literal (enum constants, never user input)."""
    return f"'{value}'" if isinstance(value, str) else str(value)


SCHEDULED = _value(RunState.SCHEDULED.value)
QUEUED = _value(RunState.QUEUED.value)
RUNNING = _value(RunState.RUNNING.value)
CANCELLING = _value(RunState.CANCELLING.value)
SKIPPED = _value(RunState.SKIPPED.value)
SUCCEEDED = _value(RunState.SUCCEEDED.value)
WAITING = _value(RunState.WAITING.value)
DEAD = _value(RunState.DEAD.value)
FRESH = _value(int(Lane.FRESH))
RETRY = _value(int(Lane.RETRY))
OVERLAP_QUEUE = _value(Overlap.QUEUE.value)

BEGIN = "BEGIN"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
# The worker's transactions: they may be lost in a server crash, and their prepared statements
# keep their generic plans (see connection.Database.transaction).
RELAXED = """
SELECT set_config('synchronous_commit', 'off', true),
    set_config('plan_cache_mode', 'force_generic_plan', true)
"""

# -- schema and migrations ----------------------------------------------------------------------
# Migrations run under one transaction-level advisory lock per schema, so processes that open the
# store at once apply each migration once; the schema itself is created under the same lock.
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(%s)"
CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {}"
CREATE_MIGRATIONS = """
CREATE TABLE IF NOT EXISTS cronbus_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at double precision NOT NULL
)
"""
SCHEMA_VERSION = "SELECT coalesce(max(version), 0) FROM cronbus_migrations"
# Whether the schema (first on the search_path) has been migrated at all, creating nothing.
MIGRATIONS_TABLE = "SELECT 1 WHERE to_regclass('cronbus_migrations') IS NOT NULL"
RECORD_MIGRATION = """
INSERT INTO cronbus_migrations (version, name, applied_at)
VALUES (%s, %s, extract(epoch FROM clock_timestamp()))
"""

# -- wake-ups -----------------------------------------------------------------------------------
# NOTIFY inside a transaction is delivered at its commit, never before, and never if it rolls back.
# The "ended" channel (a run ended) is notified only while some process waits for runs to end:
# such a process holds the shared advisory lock below (ENDED_WAITERS_LOCK) on its LISTEN
# connection, so this transaction's exclusive try fails. NOTIFY takes a global lock at commit, so
# completions must not NOTIFY when nobody listens. A waiter takes its lock after every
# transaction that tried it found it free has committed, and reads its runs after that: none is
# missed. (Concurrent completions may see each other's try: a spare NOTIFY, never a lost one.)
NOTIFY = """
SELECT pg_notify(c, %(token)s) FROM unnest(%(channels)b::text[]) AS c
WHERE CASE WHEN c <> current_schema() || '_ended' THEN true
      ELSE NOT pg_try_advisory_xact_lock(1701733988, hashtext(current_schema())) END
"""
ENDED_WAITERS_LOCK = "SELECT pg_advisory_lock_shared(1701733988, hashtext(current_schema()))"
ENDED_WAITERS_UNLOCK = "SELECT pg_advisory_unlock_shared(1701733988, hashtext(current_schema()))"

# -- runs: insert (the statements are built in insert_sql) -------------------------------------
RUN_BY_KEY_OR_FIRE = """
SELECT coalesce(
    (SELECT id FROM runs WHERE namespace = %(namespace)s AND idempotency_key = %(key)s),
    (SELECT id FROM runs WHERE job_id = %(job_id)s AND fire_at = %(fire_at)s))
"""

# -- runs: claim ---------------------------------------------------------------------------------
# Lease times are the server's clock (see cronbus.store.fencing): `statement_timestamp()` is
# stable within a statement, so a comparison with it can use the runs_leases index. A store
# switched to the caller's clock (tests that move time by hand) passes `clock` instead.
_LEASE_NOW = "coalesce(%(clock)s::float8, extract(epoch FROM statement_timestamp()))"
# Rows locked by another claimer are skipped, never waited for.
PROMOTE_DUE = f"""
UPDATE runs SET state = {QUEUED}, updated_at = %(now)s
WHERE id IN (
    SELECT id FROM runs
    WHERE {sql_match("state", sources(RunEvent.DUE))} AND eta <= %(now)s
    FOR UPDATE SKIP LOCKED)
"""
# A run of a job with overlap=queue waits while another run with its key is active. Only runs of
# the tasks the worker knows (None: any), targeted at nobody or at it, needing no label it lacks,
# and under their limits (a saturated key or a full rate window leaves its runs queued without
# holding back the others; the claim then admits, under the keys' locks, what fits) are taken.
# The active runs per limit key and the full rate windows are read once per claim, and only when
# a candidate has a limit (an InitPlan runs when first needed), so a long line of runs of a
# saturated key costs a lookup in an array each, not a subquery.
_LIMITED = f"""
busy AS (
    SELECT array_agg(limit_key) AS keys, array_agg(n) AS counts
    FROM (SELECT limit_key, count(*) AS n FROM runs
          WHERE limit_key IS NOT NULL AND state IN {sql_in(ACTIVE)}
          GROUP BY limit_key) AS active
),
full_windows AS (
    SELECT array_agg(key) AS keys FROM rate_windows
    WHERE window_start <= %(now)s AND window_start + period > %(now)s AND used >= max_starts
),"""
_UNDER_LIMIT = """
    coalesce(
        (SELECT counts FROM busy)[array_position((SELECT keys FROM busy), r.limit_key)], 0
    ) < r.limit_max
"""
_UNDER_RATE = "array_position((SELECT keys FROM full_windows), r.rate_key) IS NULL"
_READY = f"""
    r.state = {QUEUED} AND r.namespace = %(namespace)s AND r.queue = s.queue
    AND (r.target_worker IS NULL OR r.target_worker = %(worker)s)
    AND (%(tasks)b::text[] IS NULL OR r.task = ANY(%(tasks)b::text[]))
    AND (r.route_labels IS NULL OR r.route_labels <@ %(labels)b::text[])
    AND NOT (r.overlap = {OVERLAP_QUEUE} AND EXISTS (
        SELECT 1 FROM runs b
        WHERE b.concurrency_key = r.concurrency_key AND b.state IN {sql_in(ACTIVE)}))
    AND (r.limit_key IS NULL OR r.limit_max IS NULL OR {_UNDER_LIMIT})
    AND (r.rate_key IS NULL OR r.rate_max IS NULL OR {_UNDER_RATE})
"""
_PICK_COLUMNS = """
    r.id, r.attempts, r.used, r.task, r.queue, r.max_attempts, r.timeout, r.eta,
    r.concurrency_key, r.overlap, r.job_id, r.limit_key, r.limit_max, r.rate_key, r.rate_max,
    r.rate_period, r.parent_id, r.child_index, r.shard_total, r.lane, r.priority
"""
_READY_ORDER = "r.lane, r.priority DESC, r.eta, r.id"
# Each queue's share first; then what the shares left unused goes to the queues that filled
# theirs, in order, each up to its `most` in all (NULL: no bound). Every candidate is locked
# (SKIP LOCKED) as it is read, through the runs_ready index; the final LIMIT may leave a few
# leftovers locked until the commit when several queues filled their share, which only hides
# them from other claimers for a moment. The payloads are joined by one index probe per picked
# run: as a plain join, the planner (which cannot know how few rows the lateral picks give)
# hashed the whole of run_payloads on every claim, 35-125 ms with 100,000 runs queued.
# The text is compacted (see _compact): psycopg caches the parsing of statements up to 4 kB
# only, and parsing this one on every claim was 3% of a busy worker's time.
PICK = _compact(
    f"""
WITH {_LIMITED}
shares AS (
    SELECT queue, least(lim, coalesce(most, lim)) AS lim, most, ord
    FROM unnest(%(queues)b::text[], %(limits)b::int[], %(mosts)b::int[])
        WITH ORDINALITY AS s(queue, lim, most, ord)
),
first_pass AS (
    SELECT s.ord, c.*
    FROM shares s
    CROSS JOIN LATERAL (
        SELECT {_PICK_COLUMNS} FROM runs r
        WHERE {_READY}
        ORDER BY {_READY_ORDER}
        LIMIT s.lim
        FOR UPDATE OF r SKIP LOCKED
    ) c
),
second_pass AS (
    SELECT s.ord, c.*
    FROM (
        SELECT s.queue, s.ord,
            least(
                %(limit)s - (SELECT count(*) FROM first_pass),
                coalesce(s.most - s.lim, %(limit)s)) AS room
        FROM shares s
        WHERE s.lim = (SELECT count(*) FROM first_pass f WHERE f.ord = s.ord)
    ) s
    CROSS JOIN LATERAL (
        SELECT {_PICK_COLUMNS} FROM runs r
        WHERE {_READY} AND r.id <> ALL (ARRAY(SELECT id FROM first_pass))
        ORDER BY {_READY_ORDER}
        LIMIT greatest(s.room, 0)
        FOR UPDATE OF r SKIP LOCKED
    ) c
),
picked AS (
    SELECT 0 AS pass, * FROM first_pass
    UNION ALL
    SELECT 1 AS pass, * FROM second_pass
)
SELECT p.id, p.attempts, p.used, p.task, p.queue, p.max_attempts, p.timeout, p.eta,
    p.concurrency_key, p.overlap, p.job_id, pl.args, pl.kwargs, p.limit_key, p.limit_max,
    p.rate_key, p.rate_max, p.rate_period, p.parent_id, p.child_index, p.shard_total, pl.trace
FROM picked p
LEFT JOIN LATERAL (
    SELECT x.args, x.kwargs, x.trace FROM run_payloads x WHERE x.run_id = p.id LIMIT 1
) pl ON true
ORDER BY p.pass, p.ord, p.lane, p.priority DESC, p.eta, p.id
LIMIT %(limit)s
"""
)
# Start picked runs (locked by this transaction) under a lease, with one attempt each and the
# claim's random fence; attempt ids are drawn in pick order.
START = f"""
WITH chosen AS (
    SELECT id, fence, nextval('attempts_id_seq') AS attempt_id
    FROM unnest(%(ids)b::bigint[], %(fences)b::bigint[]) WITH ORDINALITY AS c(id, fence, ord)
    ORDER BY ord
),
started AS (
    UPDATE runs r
    SET state = {RUNNING}, attempts = r.attempts + 1, lease_owner = %(worker)s,
        lease_expires = {_LEASE_NOW} + %(lease)s, attempt_id = c.attempt_id, fence = c.fence,
        updated_at = %(now)s
    FROM chosen c
    -- Written so that the primary key is the only way in. "= ANY" too: without it the planner,
    -- guessing 100 rows for the unnest, may join by scanning every run (40-70 ms with 100,000
    -- queued). And the state test is no "=": "state = 'queued'" lets the planner read the
    -- runs_ready partial index instead, and statistics taken before a burst of defers (a few
    -- queued runs) make that look cheap; it then filtered all 10,000 queued runs on every
    -- claim (5-10 ms, two thirds of PostgreSQL's CPU in bench/peers.py). The picked rows are
    -- locked by this transaction, so the test only guards against a change of this claim's own.
    WHERE r.id = c.id AND r.id = ANY(%(ids)b::bigint[])
        AND r.state IS NOT DISTINCT FROM {QUEUED}
    RETURNING r.id, r.attempt_id, r.attempts, r.fence
)
INSERT INTO attempts (id, run_id, number, worker_id, started_at, fence)
SELECT attempt_id, id, attempts, %(worker)s, %(now)s, fence FROM started
RETURNING run_id, id, number, fence
"""

# -- runs: overlap policies at claim -------------------------------------------------------------
# Claimers of runs that share a concurrency key take these locks (sorted, so never in a cycle)
# before reading which keys are busy: two claimers cannot both see a key free.
KEY_LOCKS = """
SELECT pg_advisory_xact_lock(%(space)s, hashtext(k))
FROM (SELECT DISTINCT k FROM unnest(%(keys)b::text[]) AS k) AS keys
ORDER BY k
"""
ACTIVE_KEYS = f"""
SELECT concurrency_key, id FROM runs
WHERE concurrency_key = ANY(%(keys)b::text[]) AND state IN {sql_in(ACTIVE)}
ORDER BY id
"""
SKIP_RUNS = f"""
UPDATE runs SET state = {SKIPPED}, updated_at = %(now)s, finished_at = %(now)s
WHERE id = ANY(%(ids)b::bigint[]) AND state IN {sql_in(sources(RunEvent.SKIP))}
"""
CANCEL_RUNNING = f"""
UPDATE runs SET state = {CANCELLING}, updated_at = %(now)s
WHERE id = ANY(%(ids)b::bigint[]) AND state = {RUNNING}
"""

# -- runs: complete ------------------------------------------------------------------------------
# An `after` job plans its next fire (through its trigger, in Python) when its run ends, unless
# something planned one meanwhile; the same condition guards the update (compare-and-set).
_AFTER_JOB = """
    j.after_seconds IS NOT NULL AND j.next_fire_at IS NULL AND j.enabled AND NOT j.paused
    AND (j.max_fires IS NULL OR j.fires < j.max_fires)
"""
# One statement ends a batch of attempts. Fencing is in the WHERE clause: a change applies only
# to the run's current attempt under the claim's fence (a NULL fence: the attempt id alone),
# and only from the state it was computed for (each outcome comes with one change per active
# state, so the database picks the one matching the row it locks).
# The new eta is a clamp of the current one, [eta_low, eta_high] (see rows._changes).
# A fan-out parent (a run with counters) whose body succeeded waits for its children (AWAIT);
# the caller then settles it under its counters' lock if they all ended already.
# Rows of job runs say whether their job fires children, and bring the trigger of an `after` job
# that waits for its run's end to plan its next fire; rows of children bring their place.
COMPLETE = f"""
WITH change AS (
    SELECT c.*, c.state = {SUCCEEDED} AND EXISTS (
        SELECT 1 FROM fanouts f WHERE f.run_id = c.run_id) AS awaits
    FROM unnest(
        %(run_id)b::bigint[], %(attempt_id)b::bigint[], %(source)b::text[], %(state)b::text[],
        %(eta_low)b::float8[], %(eta_high)b::float8[], %(lane)b::smallint[], %(used)b::int[],
        %(lost)b::int[], %(finished_at)b::float8[], %(fence)b::bigint[]
    ) AS c(run_id, attempt_id, source, state, eta_low, eta_high, lane, used, lost, finished_at,
        fence)
),
done AS (
    UPDATE runs r
    SET state = CASE WHEN c.awaits THEN {WAITING} ELSE c.state END,
        eta = greatest(c.eta_low, least(r.eta, c.eta_high)), lane = c.lane,
        used = r.used + c.used, lost = r.lost + c.lost,
        finished_at = CASE WHEN c.awaits THEN NULL ELSE c.finished_at END,
        lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s
    FROM change c
    WHERE r.id = c.run_id AND r.attempt_id = c.attempt_id AND r.state = c.source
        AND (c.fence IS NULL OR r.fence = c.fence)
    RETURNING r.id, r.attempt_id, r.state, r.job_id, r.concurrency_key, r.parent_id,
        r.child_index
),
ended AS (
    UPDATE attempts a
    SET finished_at = %(now)s, outcome = o.outcome, result = o.result,
        error_type = o.error_type, error_message = o.error_message, traceback = o.traceback,
        logs = o.logs
    FROM unnest(
        %(a_id)b::bigint[], %(a_outcome)b::text[], %(a_result)b::text[],
        %(a_error_type)b::text[], %(a_error_message)b::text[], %(a_traceback)b::text[],
        %(a_logs)b::text[]
    ) AS o(attempt_id, outcome, result, error_type, error_message, traceback, logs)
    JOIN done d ON d.attempt_id = o.attempt_id
    WHERE a.id = o.attempt_id
)
SELECT d.id, d.attempt_id, d.state, d.job_id, d.concurrency_key,
    coalesce(j.children <> '[]', false) AS has_children,
    CASE WHEN {_AFTER_JOB} THEN j.trigger END AS after_trigger, d.parent_id, d.child_index
FROM done d LEFT JOIN jobs j ON j.id = d.job_id
"""
AFTER_JOBS = f"SELECT j.id, j.trigger FROM jobs j WHERE j.id = ANY(%b::bigint[]) AND {_AFTER_JOB}"
SET_NEXT_FIRES = f"""
UPDATE jobs j SET next_fire_at = f.next_fire_at, updated_at = %(now)s
FROM unnest(%(job_id)b::bigint[], %(next_fire_at)b::float8[]) AS f(job_id, next_fire_at)
WHERE j.id = f.job_id AND {_AFTER_JOB}
"""

# -- runs: leases --------------------------------------------------------------------------------
# A worker's heartbeat and its own completions run at once on two connections: waiting for each
# other's row locks (taken in different orders) could deadlock. So the heartbeat renews the
# leases nobody holds a lock on at that instant (the others are being completed, cancelled or
# reaped; a lease is several heartbeats long) and reports every attempt the worker still holds.
# A parent creating its children (spawn) holds its row FOR KEY SHARE, which this lock mode does
# not conflict with: a long ctx.map keeps its lease (while the reaper's FOR UPDATE skips it).
# The lease runs `lease` seconds of the server's clock from the heartbeat, whatever the
# worker's clock says; its registry entry keeps the worker's own time, as every record does.
# Each row also says whether the worker was asked to drain; a worker holding nothing gets one
# row of NULLs with it.
HEARTBEAT = f"""
WITH seen AS (
    UPDATE workers SET heartbeat_at = %(now)s WHERE id = %(worker)s RETURNING drain_requested
),
renewed AS (
    UPDATE runs SET lease_expires = {_LEASE_NOW} + %(lease)s
    WHERE id IN (
        SELECT id FROM runs WHERE lease_owner = %(worker)s AND state IN {sql_in(ACTIVE)}
        FOR NO KEY UPDATE SKIP LOCKED)
)
SELECT r.id, r.attempt_id, r.state, r.fence,
    coalesce((SELECT drain_requested FROM seen), false)
FROM (SELECT 1) AS one
LEFT JOIN runs r ON r.lease_owner = %(worker)s AND r.state IN {sql_in(ACTIVE)}
"""
EXPIRED = f"""
SELECT id, attempt_id, state, lost, eta, job_id, parent_id, child_index FROM runs
WHERE state IN {sql_in(ACTIVE)} AND lease_expires < {_LEASE_NOW}
ORDER BY lease_expires LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""
# Attempts that already ended, for completions the fence refused (an ambiguous commit's retry).
ENDED_ATTEMPTS = """
SELECT id, fence, outcome FROM attempts
WHERE id = ANY(%(ids)b::bigint[]) AND outcome IS NOT NULL
"""
AGE_RETRIES = f"""
UPDATE runs SET lane = {FRESH}
WHERE id IN (
    SELECT id FROM runs WHERE state = {QUEUED} AND lane = {RETRY} AND eta <= %(cutoff)s
    FOR UPDATE SKIP LOCKED)
"""

# -- runs: commands ------------------------------------------------------------------------------
RUN_STATE = """
SELECT state, job_id, parent_id, child_index, concurrency_key FROM runs WHERE id = %s FOR UPDATE
"""
PEEK_STATE = "SELECT state FROM runs WHERE id = %s"
SET_STATE = """
UPDATE runs SET state = %(new)s, updated_at = %(now)s, finished_at = %(finished_at)s
WHERE id = %(id)s AND state = %(old)s
"""
_REQUEUE = f"""
UPDATE runs SET state = {QUEUED}, lane = {FRESH}, used = 0, lost = 0, eta = %(now)s,
    updated_at = %(now)s, finished_at = NULL
"""
# Fan-out parents to revive are kept out (see requeue.py); each row says where the run sits.
REQUEUE_IDS = f"""{_REQUEUE}
WHERE id = ANY(%(ids)b::bigint[]) AND state IN {sql_in(sources(RunEvent.REQUEUE))}
RETURNING id, parent_id, child_index
"""
# A loose index scan: each step seeks the next namespace name, so the cost grows with the number
# of namespaces, not of runs (PostgreSQL has no skip scan for SELECT DISTINCT).
RUN_NAMESPACES = """
WITH RECURSIVE spaces(name) AS (
    (SELECT namespace FROM runs ORDER BY namespace LIMIT 1)
    UNION ALL
    SELECT (SELECT namespace FROM runs WHERE namespace > spaces.name ORDER BY namespace LIMIT 1)
    FROM spaces WHERE spaces.name IS NOT NULL
)
SELECT name FROM spaces WHERE name IS NOT NULL
"""
# Every dead run, found per namespace through runs_by_state (namespace, state, id).
REQUEUE_ALL_DEAD = f"""{_REQUEUE}
WHERE namespace = ANY(ARRAY({RUN_NAMESPACES})) AND state = {DEAD}
    AND id <> ALL(%(keep)b::bigint[])
RETURNING id, parent_id, child_index
"""

# -- runs: reads ---------------------------------------------------------------------------------
GET_RUN = f"SELECT {_RUN_COLUMNS} {_RUN_FROM} WHERE r.id = %s"
GET_RUNS = f"SELECT {_RUN_COLUMNS} {_RUN_FROM} WHERE r.id = ANY(%b::bigint[]) ORDER BY r.id"
RUN_COLUMNS = _RUN_COLUMNS
RUN_FROM = _RUN_FROM
LIST_ATTEMPTS = """
SELECT id, run_id, number, worker_id, started_at, finished_at, outcome, result, error_type,
       error_message, traceback, logs
FROM attempts WHERE run_id = %s ORDER BY id
"""
# A namespace's full rate windows: its keys start with "<namespace>:" (rate_windows is small:
# one row per rate key).
FULL_WINDOW_ENDS = """
SELECT min(window_start + period) FROM rate_windows
WHERE starts_with(key, %(prefix)s) AND used >= max_starts AND window_start + period > %(now)s
"""
NEXT_ETA = f"""
SELECT least(
    (SELECT min(eta) FROM runs
     WHERE state = {SCHEDULED} AND namespace = %(namespace)s AND queue = ANY(%(queues)b::text[])),
    ({FULL_WINDOW_ENDS}))
"""
