"""Named SQL of fan-out parents and their children in the PostgreSQL store.

Lock order, so that no two transactions wait on each other in a cycle: a transaction that ends
children holds their rows (its completion locked them), then locks their parents' ``fanouts``
rows in ascending parent id, then the parents' rows that it settles, ascending. A cancel of a
waiting parent locks its children first (ascending id), then the parent, then the counters.
"""

from __future__ import annotations

from ...states import ACTIVE, TERMINAL, RunEvent, RunState, sources, sql_in
from ..rows import RUN_COLUMNS, RUN_FROM, WAITING_BROADCAST_COLUMNS

WAITING = f"'{RunState.WAITING.value}'"
_REQUEUABLE = sql_in(sources(RunEvent.REQUEUE))

INSERT_FANOUTS = """
INSERT INTO fanouts (run_id, kind, total, note)
SELECT * FROM unnest(%(run_id)b::bigint[], %(kind)b::text[], %(total)b::int[], %(note)b::text[])
"""
# A broadcast that found no live worker: its parent is a dead letter from the start.
END_PARENTS = f"""
UPDATE runs r SET state = e.state, finished_at = %(now)s, updated_at = %(now)s
FROM unnest(%(ids)b::bigint[], %(states)b::text[]) AS e(id, state)
WHERE r.id = e.id AND r.state = {WAITING}
RETURNING r.id, r.state, r.parent_id, r.child_index, r.job_id, r.concurrency_key
"""
LOCK_FANOUTS = """
SELECT run_id FROM fanouts WHERE run_id = ANY(%(ids)b::bigint[]) ORDER BY run_id FOR UPDATE
"""
COUNT_ENDS = """
UPDATE fanouts f SET ended = f.ended + e.ended, succeeded = f.succeeded + e.succeeded
FROM unnest(%(parent)b::bigint[], %(ended)b::int[], %(succeeded)b::int[])
    AS e(parent, ended, succeeded)
WHERE f.run_id = e.parent
"""
# Run after the counters were locked and changed: a statement of its own, so its snapshot sees
# every commit made before those locks were granted (a parent that began waiting meanwhile).
WAITING_PARENTS = f"""
SELECT f.run_id, f.total, f.ended, f.succeeded, f.reduce_spec IS NOT NULL, f.reduce_run,
    f.reduce_spec
FROM fanouts f JOIN runs r ON r.id = f.run_id
WHERE f.run_id = ANY(%(ids)b::bigint[]) AND r.state = {WAITING}
ORDER BY f.run_id
"""
CHILD_RESULTS = """
SELECT a.result FROM runs r LEFT JOIN attempts a ON a.id = r.attempt_id
WHERE r.parent_id = %(parent)s AND r.child_index IS NOT NULL
ORDER BY r.child_index
"""
SET_REDUCE_RUN = "UPDATE fanouts SET reduce_run = %(run)s WHERE run_id = %(parent)s"

# -- cancel --------------------------------------------------------------------------------------
_CHILDREN = """
    ((r.parent_id = %(parent)s AND r.child_index IS NOT NULL)
     OR r.id = (SELECT reduce_run FROM fanouts WHERE run_id = %(parent)s))
"""
LOCK_CHILDREN = f"""
SELECT r.id, r.state, r.parent_id, r.child_index FROM runs r
WHERE {_CHILDREN} AND r.state NOT IN {sql_in(TERMINAL)}
ORDER BY r.id FOR UPDATE
"""
# The same, in a cancel's first statement: only while the parent waits (it is locked next).
LOCK_WAITING_CHILDREN = f"""
SELECT r.id, r.state, r.parent_id, r.child_index FROM runs r
WHERE {_CHILDREN} AND r.state NOT IN {sql_in(TERMINAL)}
    AND EXISTS (SELECT 1 FROM runs p WHERE p.id = %(parent)s AND p.state = {WAITING})
ORDER BY r.id FOR UPDATE OF r
"""
SET_STATES = """
UPDATE runs r SET state = c.new, updated_at = %(now)s, finished_at = c.finished_at
FROM unnest(%(ids)b::bigint[], %(olds)b::text[], %(news)b::text[], %(finished)b::float8[])
    AS c(id, old, new, finished_at)
WHERE r.id = c.id AND r.state = c.old
"""

# -- requeue -------------------------------------------------------------------------------------
# Fan-out parents among runs to requeue, with their kind and their body's last outcome.
_PARENTS = """
SELECT r.id, r.state, f.kind, a.outcome, r.parent_id, r.child_index
FROM fanouts f JOIN runs r ON r.id = f.run_id LEFT JOIN attempts a ON a.id = r.attempt_id
"""
PARENTS_OF_IDS = f"""{_PARENTS}
WHERE f.run_id = ANY(%(ids)b::bigint[])
ORDER BY r.id FOR UPDATE OF r
"""
DEAD_PARENTS = f"""{_PARENTS}
WHERE r.state = '{RunState.DEAD.value}'
ORDER BY r.id FOR UPDATE OF r
"""
_REQUEUE = f"""
UPDATE runs SET state = '{RunState.QUEUED.value}', lane = 0, used = 0, lost = 0, eta = %(now)s,
    updated_at = %(now)s, finished_at = NULL
"""
# The dead and cancelled children of revived parents, and their reduce runs.
REQUEUE_CHILDREN = f"""{_REQUEUE}
WHERE ((parent_id = ANY(%(parents)b::bigint[]) AND child_index IS NOT NULL)
       OR id IN (SELECT reduce_run FROM fanouts WHERE run_id = ANY(%(parents)b::bigint[])))
    AND state IN {_REQUEUABLE}
RETURNING id, parent_id, child_index
"""
SUB_ENDS = """
UPDATE fanouts f SET ended = f.ended - e.ended
FROM unnest(%(parent)b::bigint[], %(ended)b::int[]) AS e(parent, ended)
WHERE f.run_id = e.parent
"""
REVIVE = """
UPDATE runs r SET state = v.new, finished_at = NULL, updated_at = %(now)s
FROM unnest(%(ids)b::bigint[], %(olds)b::text[], %(news)b::text[]) AS v(id, old, new)
WHERE r.id = v.id AND r.state = v.old
RETURNING r.id, r.parent_id, r.child_index
"""

# -- spawn and children --------------------------------------------------------------------------
# The parent is held FOR KEY SHARE: a cancel or the reaper waits for (or skips) it, while its
# worker's heartbeat still renews its lease (see sql.HEARTBEAT).
HOLDS_PARENT = f"""
SELECT id FROM runs
WHERE id = %(id)s AND attempt_id = %(attempt)s AND fence = %(fence)s AND state IN {sql_in(ACTIVE)}
FOR KEY SHARE
"""
# Children already made (a retried body maps the same items): left out before the insert, so
# it never waits on a child being completed (a unique check waits for its updater).
EXISTING_CHILDREN = """
SELECT child_index FROM runs
WHERE parent_id = %(id)s AND child_index = ANY(%(indexes)b::int[])
"""
# The counters last, so the spawn holds them (as each completing child does) only at its end.
ADD_CHILDREN = """
INSERT INTO fanouts (run_id, kind, total, reduce_spec)
VALUES (%(id)s, 'map', %(added)s, %(reduce)s)
ON CONFLICT (run_id) DO UPDATE SET total = fanouts.total + excluded.total,
    reduce_spec = coalesce(excluded.reduce_spec, fanouts.reduce_spec)
"""
LIST_CHILDREN = f"""
SELECT {RUN_COLUMNS} {RUN_FROM}
WHERE r.parent_id = %(parent)s AND r.child_index IS NOT NULL AND r.child_index > %(after)s
ORDER BY r.child_index LIMIT %(limit)s
"""
REDUCE_OF = f"""
SELECT {RUN_COLUMNS} {RUN_FROM}
WHERE r.id = (SELECT reduce_run FROM fanouts WHERE run_id = %(parent)s)
"""

# -- broadcasts that wait for a live worker ------------------------------------------------------
# Read from fanouts (one row per parent, far fewer than runs), oldest first; a parent another
# transaction holds (a cancel, another worker's pass) is left to the next pass.
WAITING_BROADCASTS = f"""
SELECT {WAITING_BROADCAST_COLUMNS}
FROM fanouts f
JOIN runs r ON r.id = f.run_id
JOIN run_payloads p ON p.run_id = r.id
WHERE f.kind = 'broadcast' AND f.total = 0 AND r.state = {WAITING}
ORDER BY f.run_id LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED
"""
SET_TOTAL = "UPDATE fanouts SET total = %(total)s WHERE run_id = %(id)s"
# A broadcast parent no live worker came for: an attempt that says so, and the same note on
# its counters; end_parents then ends it dead with what follows.
GIVE_UP_ATTEMPTS = f"""
WITH given AS (
    SELECT id, message, nextval('attempts_id_seq') AS attempt_id
    FROM unnest(%(ids)b::bigint[], %(messages)b::text[]) WITH ORDINALITY AS g(id, message, ord)
    ORDER BY ord
),
noted AS (
    UPDATE runs r SET attempts = r.attempts + 1, attempt_id = g.attempt_id
    FROM given g
    WHERE r.id = g.id AND r.state = {WAITING}
    RETURNING r.id, r.attempts, g.attempt_id, g.message
),
notes AS (
    UPDATE fanouts f SET note = n.message FROM noted n WHERE f.run_id = n.id
)
INSERT INTO attempts (id, run_id, number, worker_id, started_at, finished_at, outcome,
    error_type, error_message)
SELECT attempt_id, id, attempts, %(worker)s, %(now)s, %(now)s, %(outcome)s, %(error_type)s,
    message
FROM noted
"""
# A requeued broadcast parent that had no children waits again for a live worker (its wait
# counts from now: updated_at); its counters' note is cleared until it ends again.
REVIVE_CHILDLESS = f"""
WITH revived AS (
    UPDATE runs r SET state = {WAITING}, updated_at = %(now)s, finished_at = NULL
    FROM fanouts f
    WHERE r.id = ANY(%(ids)b::bigint[]) AND r.state IN {_REQUEUABLE}
      AND f.run_id = r.id AND f.kind = 'broadcast' AND f.total = 0
    RETURNING r.id, r.parent_id, r.child_index
),
cleared AS (
    UPDATE fanouts f SET note = '' FROM revived v WHERE f.run_id = v.id
)
SELECT id, parent_id, child_index FROM revived
"""
