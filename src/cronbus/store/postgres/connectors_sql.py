"""Named SQL of the PostgreSQL store's connectors (definitions, task commands, task leases).

As in :mod:`.events_sql`: tables are unqualified (the connection's ``search_path`` is the
store's schema), batches travel as binary arrays (``%(name)b``, ``unnest``), and every state
written or matched comes from the task state machine (:mod:`cronbus.connectors.states`).

Fencing: a holder's change is applied only while the task is still held (``running``) by the
holder under the lease's epoch. Every change that ends a hold (a command, a failure, a release,
a takeover) clears the holder or bumps the epoch, and every fenced change checks both in the
statement that writes, which locks the task row: whichever commits first wins.
"""

from __future__ import annotations

from ...connectors.states import HELD, TaskEvent, TaskState, sources, transition
from ...states import sql_in


def _state(state: TaskState) -> str:
    """One state as an SQL literal (enum constants, never user input)."""
    return f"'{state.value}'"


HELD_IN = sql_in(HELD)
TAKEABLE = sql_in(sources(TaskEvent.ASSIGN))
"""Tasks a worker takes as they are (unassigned)."""
LOSABLE = sql_in(sources(TaskEvent.LOSE))
"""Tasks whose holder is lost when their lease ran out (running): ``lose`` then ``assign``."""
(_RELEASED_FROM,) = sources(TaskEvent.LOSE)
RELEASED = _state(transition(_RELEASED_FROM, TaskEvent.LOSE))
"""Where a released task goes (unassigned); a lost one passes there on its way to a taker."""
ASSIGNED = _state(transition(transition(_RELEASED_FROM, TaskEvent.LOSE), TaskEvent.ASSIGN))
(_FAILED_FROM,) = sources(TaskEvent.FAIL)
FAILED = _state(transition(_FAILED_FROM, TaskEvent.FAIL))
NEW_TASK = TaskState.UNASSIGNED.value

# Lease times follow the store's lease clock, as run leases do (:mod:`.sql`, see
# cronbus.store.fencing): the server's, unless the store passes the caller's as `clock`.
_LEASE_NOW = "coalesce(%(clock)s::float8, extract(epoch FROM statement_timestamp()))"

# -- definitions ---------------------------------------------------------------------------------
_CONNECTOR_COLUMNS = """
c.name, c.namespace, c.kind, c.direction, c.topic, c.config, c.tolerance, c.max_tasks,
c.fingerprint, c.created_at, c.updated_at
"""
_TASK_COLUMNS = """
t.task, t.config, t.state, t.holder, t.lease_expires_at, t.epoch, t.error, t.positions,
t.delivered, t.dead, t.retried, t.updated_at
"""
# One row per task (a connector without tasks: one row of NULL task columns), by name and index.
_CONNECTORS = f"""
SELECT {_CONNECTOR_COLUMNS}, {_TASK_COLUMNS}
FROM connectors c LEFT JOIN connector_tasks t ON t.connector = c.name
"""
GET_CONNECTOR = f"{_CONNECTORS} WHERE c.name = %s ORDER BY t.task"
LIST_CONNECTORS = f"""{_CONNECTORS}
WHERE %(namespace)s::text IS NULL OR c.namespace = %(namespace)s
ORDER BY c.name, t.task
"""
# The insert decides a race between two creates of one name (the primary key: a second insert
# waits for the first to commit, then does nothing); tasks are inserted only with a new
# connector.
CREATE_CONNECTOR = f"""
WITH created AS (
    INSERT INTO connectors (name, namespace, kind, direction, topic, config, tolerance,
                            max_tasks, fingerprint, created_at, updated_at)
    VALUES (%(name)s, %(namespace)s, %(kind)s, %(direction)s, %(topic)s, %(config)s,
            %(tolerance)s, %(max_tasks)s, %(fingerprint)s, %(now)s, %(now)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING name
),
tasks AS (
    INSERT INTO connector_tasks (connector, task, config, state, updated_at)
    SELECT c.name, n.ord - 1, n.config::jsonb, '{NEW_TASK}', %(now)s
    FROM created c CROSS JOIN unnest(%(configs)b::text[]) WITH ORDINALITY AS n(config, ord)
)
SELECT count(*) FROM created
"""
# Locked first, in statements of their own (connector, then its tasks: the order of every
# command), so that what follows reads a snapshot in which no fenced change is half seen.
LOCK_CONNECTOR = "SELECT name FROM connectors WHERE name = %s FOR UPDATE"
LOCK_TASKS = "SELECT task, state FROM connector_tasks WHERE connector = %s ORDER BY task FOR UPDATE"
# One row per changed task: its new state, whether it keeps its holder (a held state), whether
# its epoch is bumped (it leaves running, or restarts) and its error cleared (not failed).
COMMAND = """
WITH changed AS (
    UPDATE connector_tasks t SET
        state = c.state,
        holder = CASE WHEN c.keep THEN t.holder END,
        lease_expires_at = CASE WHEN c.keep THEN t.lease_expires_at END,
        epoch = t.epoch + c.bump,
        error = CASE WHEN c.clear THEN NULL ELSE t.error END,
        updated_at = %(now)s
    FROM unnest(%(task)b::int[], %(state)b::text[], %(keep)b::bool[], %(bump)b::int[],
                %(clear)b::bool[]) AS c(task, state, keep, bump, clear)
    WHERE t.connector = %(name)s AND t.task = c.task
    RETURNING t.task
)
UPDATE connectors SET updated_at = %(now)s
WHERE name = %(name)s AND EXISTS (SELECT 1 FROM changed)
"""
# After LOCK_CONNECTOR and LOCK_TASKS: a holder's commit either committed before (its dead
# records are in this snapshot) or finds no task after (it waited for the locks).
DELETE_CONNECTOR = """
WITH gone AS (DELETE FROM connectors WHERE name = %(name)s RETURNING name),
tasks AS (DELETE FROM connector_tasks WHERE connector = %(name)s),
dead AS (DELETE FROM connector_dead_records WHERE connector = %(name)s)
SELECT name FROM gone
"""
# Newest first, through connector_dead_by_connector; a connector without dead records gives one
# row of NULLs, an unknown connector none.
LIST_DEAD = """
SELECT d.id, c.name, d.task, d.record, d.error, d.partition, d."offset", d.created_at
FROM connectors c
LEFT JOIN LATERAL (
    SELECT * FROM connector_dead_records r
    WHERE r.connector = c.name AND (%(before)s::bigint IS NULL OR r.id < %(before)s)
    ORDER BY r.id DESC
    LIMIT %(limit)s
) d ON true
WHERE c.name = %(name)s
ORDER BY d.id DESC
"""

# -- leases --------------------------------------------------------------------------------------
# Renew the holder's leases (waiting for its own fenced transactions of a moment), then take
# unassigned tasks and running ones whose lease ran out, of the oldest connectors first (as in
# the SQLite store), up to the limit, skipping rows another transaction has locked: two workers
# never wait for each other, and a row changed since the snapshot is checked again once locked,
# so two never take one task. Taking bumps the epoch, which fences any older holder.
ACQUIRE = f"""
WITH renewed AS (
    UPDATE connector_tasks SET lease_expires_at = {_LEASE_NOW} + %(lease)s
    WHERE holder = %(holder)s AND state IN {HELD_IN}
    RETURNING connector, task, epoch, lease_expires_at
),
free AS (
    SELECT t.connector, t.task
    FROM connector_tasks t JOIN connectors c ON c.name = t.connector
    WHERE t.state IN {TAKEABLE}
        OR (t.state IN {LOSABLE} AND t.holder <> %(holder)s AND t.lease_expires_at < {_LEASE_NOW})
    ORDER BY c.created_at, t.connector, t.task
    LIMIT greatest(%(limit)s - (SELECT count(*) FROM renewed), 0)
    FOR UPDATE OF t SKIP LOCKED
),
taken AS (
    UPDATE connector_tasks t
    SET state = {ASSIGNED}, holder = %(holder)s, lease_expires_at = {_LEASE_NOW} + %(lease)s,
        epoch = t.epoch + 1, updated_at = %(now)s
    FROM free f WHERE t.connector = f.connector AND t.task = f.task
    RETURNING t.connector, t.task, t.epoch, t.lease_expires_at
)
SELECT connector, task, epoch, lease_expires_at FROM renewed
UNION ALL
SELECT connector, task, epoch, lease_expires_at FROM taken
"""
_HELD = f"""
t.connector = %(connector)s AND t.task = %(task)s AND t.holder = %(holder)s
AND t.epoch = %(epoch)s AND t.state IN {HELD_IN}
"""
RELEASE = f"""
UPDATE connector_tasks t
SET state = {RELEASED}, holder = NULL, lease_expires_at = NULL, updated_at = %(now)s
FROM unnest(%(connector)b::text[], %(task)b::int[], %(holder)b::text[], %(epoch)b::bigint[])
    AS l(connector, task, holder, epoch)
WHERE t.connector = l.connector AND t.task = l.task AND t.holder = l.holder
    AND t.epoch = l.epoch AND t.state IN {HELD_IN}
RETURNING t.connector
"""
FAIL = f"""
UPDATE connector_tasks t
SET state = {FAILED}, error = %(error)s, holder = NULL, lease_expires_at = NULL,
    updated_at = %(now)s
WHERE {_HELD}
RETURNING t.task
"""
# append_from_source: the fence, locking the task row until the commit; returns where its
# events go.
LOCK_HELD = f"""
SELECT c.topic, c.namespace FROM connector_tasks t JOIN connectors c ON c.name = t.connector
WHERE {_HELD}
FOR UPDATE OF t
"""
# Positions are merged partition by partition; dead records are inserted only with the fenced
# update. With a `topic` (after an append), only if the topic is the connector's namespace's:
# the append wrote nothing otherwise, so neither does this.
COMMIT = f"""
WITH fenced AS (
    UPDATE connector_tasks t
    SET positions = t.positions || %(positions)s::jsonb, delivered = t.delivered + %(delivered)s,
        dead = t.dead + %(dead)s, retried = t.retried + %(retried)s, updated_at = %(now)s
    WHERE {_HELD}
        AND (%(topic)s::text IS NULL OR EXISTS (
            SELECT 1 FROM topics p WHERE p.name = %(topic)s AND p.namespace = %(namespace)s))
    RETURNING t.connector, t.task
),
buried AS (
    INSERT INTO connector_dead_records (connector, task, partition, "offset", record, error,
                                        created_at)
    SELECT f.connector, f.task, d.partition, d."offset", d.record::jsonb, d.error, %(now)s
    FROM fenced f
    CROSS JOIN unnest(%(partition)b::text[], %(offset)b::bigint[], %(record)b::text[],
                      %(error)b::text[])
        WITH ORDINALITY AS d(partition, "offset", record, error, ord)
    ORDER BY d.ord
)
SELECT count(*) FROM fenced
"""
