"""The SQL of retention on PostgreSQL (:mod:`.retention`). States are rendered by
:mod:`cronbus.states`, never from input."""

from __future__ import annotations

from ...events.states import LIVE
from ...states import TERMINAL, sql_in

_TERMINAL = sql_in(TERMINAL)
# How long a deleting statement has run when its last row is out: its row locks were taken
# inside it, and its COMMIT follows in the same pipeline, so this is how long it held them
# (the server's time, without the client's round trip). Read from a MATERIALIZED result, so
# that every delete of the statement has run before the clock is read.
_SPENT = "extract(epoch FROM clock_timestamp() - statement_timestamp())::float8"

# A run is held while a child of it is live (runs_by_parent, 0013), and a child while its
# parent exists: families go parent first, then their children, already old, as orphans.
_HELD = f"""(
    EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.id AND c.state NOT IN {_TERMINAL})
    OR (r.parent_id IS NOT NULL AND EXISTS (SELECT 1 FROM runs p WHERE p.id = r.parent_id)))"""

# Through runs_finished (namespace, finished_at, state): a range of one namespace, from the
# keyset position (finished_at, id) on. A plain read: no lock. The batch is materialized first,
# so that the family checks are planned as index probes for its few rows (over the whole range,
# the planner would hash every live run's parent instead: a scan of the table per batch).
FINISHED_RUNS = f"""
WITH r AS MATERIALIZED (
    SELECT r.id, r.finished_at, r.state, r.task, r.parent_id
    FROM runs r
    WHERE r.namespace = %(namespace)s AND r.finished_at IS NOT NULL
      AND r.finished_at >= %(from_at)s AND r.finished_at <= %(before)s
      AND (r.finished_at > %(from_at)s OR r.id > %(from_id)s)
      AND r.state = ANY(%(states)s::text[])
    ORDER BY r.finished_at, r.id LIMIT %(limit)s
)
SELECT r.id, r.finished_at, r.state, r.task, {_HELD}
FROM r ORDER BY r.finished_at, r.id
"""

# The runs still due among those read (same finished_at, still finished, not held), locked
# without waiting: a row another transaction holds (a requeue, a revive) stays for the next
# pass. FOR UPDATE re-checks the conditions on a row changed since the statement's snapshot.
PURGE_RUNS = f"""
WITH due AS (
    SELECT r.id FROM runs r
    JOIN unnest(%(ids)s::bigint[], %(at)s::float8[]) AS u(id, at)
      ON r.id = u.id AND r.finished_at = u.at
    WHERE r.state IN {_TERMINAL} AND NOT {_HELD}
    FOR UPDATE OF r SKIP LOCKED
),
gone AS (DELETE FROM runs WHERE id IN (SELECT id FROM due) RETURNING id),
attempts AS (DELETE FROM attempts WHERE run_id IN (SELECT id FROM gone) RETURNING 1),
payloads AS (DELETE FROM run_payloads WHERE run_id IN (SELECT id FROM gone) RETURNING 1),
counters AS (DELETE FROM fanouts WHERE run_id IN (SELECT id FROM gone) RETURNING 1),
done AS MATERIALIZED (
    SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM attempts)
        + (SELECT count(*) FROM payloads) + (SELECT count(*) FROM counters) AS rest
)
SELECT n, {_SPENT} FROM done
"""

# Through deliveries_ended (subscription_id, state, updated_at), 0013.
PURGE_DELIVERIES = f"""
WITH doomed AS (
    SELECT id FROM deliveries
    WHERE subscription_id = %(subscription)s AND state = %(state)s AND updated_at <= %(before)s
    ORDER BY updated_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
gone AS (DELETE FROM deliveries WHERE id IN (SELECT id FROM doomed) RETURNING id),
attempts AS (DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM gone) RETURNING 1),
done AS MATERIALIZED (
    SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM attempts) AS rest
)
SELECT n, {_SPENT} FROM done
"""

# A batch of a topic's offsets at or below the cut and the lowest cursor of its subscriptions
# (paused ones too), through the primary key; events a live delivery needs stay. The topic's
# count of events kept goes down by what went.
PURGE_EVENTS = f"""
WITH bound AS (
    SELECT least(%(cut)s::bigint, coalesce(
        (SELECT min(s.cursor) FROM subscriptions s WHERE s.topic = %(topic)s),
        %(cut)s::bigint)) AS cut
),
batch AS (
    SELECT e."offset", EXISTS (
        SELECT 1 FROM deliveries d
        WHERE d.topic = e.topic AND d."offset" = e."offset" AND d.state IN {sql_in(LIVE)}
    ) AS needed
    FROM events e
    WHERE e.topic = %(topic)s AND e."offset" > %(after)s AND e."offset" <= (SELECT cut FROM bound)
    ORDER BY e."offset" LIMIT %(limit)s
),
gone AS (
    DELETE FROM events e USING batch b
    WHERE e.topic = %(topic)s AND e."offset" = b."offset" AND NOT b.needed
    RETURNING e."offset"
),
counted AS (
    UPDATE topics SET events = events - (SELECT count(*) FROM gone)
    WHERE name = %(topic)s AND EXISTS (SELECT 1 FROM gone)
    RETURNING 1
),
done AS MATERIALIZED (
    SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM batch) AS read,
           (SELECT max("offset") FROM batch) AS last, (SELECT count(*) FROM counted) AS rest
)
SELECT n, {_SPENT}, read, last FROM done
"""
