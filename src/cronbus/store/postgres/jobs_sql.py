"""Named SQL of the PostgreSQL store's jobs and calendars."""

from __future__ import annotations

from ..rows import JOB_COLUMNS as _JOB_COLUMNS

SELECT_JOB = f"SELECT {_JOB_COLUMNS} FROM jobs WHERE name = %s"
LIST_JOBS = f"""
SELECT {_JOB_COLUMNS} FROM jobs
WHERE %(namespace)s::text IS NULL OR namespace = %(namespace)s
ORDER BY name
"""
# Names are unique per store: which namespace holds a name (a replace never moves a job).
JOB_NAMESPACE = "SELECT namespace FROM jobs WHERE name = %s"
DUE_JOBS = f"""
SELECT {_JOB_COLUMNS} FROM jobs
WHERE next_fire_at IS NOT NULL AND NOT paused AND enabled AND next_fire_at <= %s
ORDER BY next_fire_at LIMIT %s
"""
NEXT_FIRE = """
SELECT min(next_fire_at) FROM jobs WHERE next_fire_at IS NOT NULL AND NOT paused AND enabled
"""
UPSERT_JOB = f"""
INSERT INTO jobs (name, task, trigger, after_seconds, args, kwargs, queue, priority,
                  max_attempts, timeout, misfire, misfire_grace, misfire_max, overlap, children,
                  calendars, max_fires, source, spec_hash, paused, enabled, next_fire_at,
                  namespace, broadcast, shards, created_at, updated_at)
VALUES (%(name)s, %(task)s, %(trigger)s, %(after_seconds)s, %(args)s, %(kwargs)s, %(queue)s,
        %(priority)s, %(max_attempts)s, %(timeout)s, %(misfire)s, %(misfire_grace)s,
        %(misfire_max)s, %(overlap)s, %(children)s, %(calendars)s, %(max_fires)s, %(source)s,
        %(spec_hash)s, %(paused)s, true, %(next_fire_at)s, %(namespace)s, %(broadcast)s,
        %(shards)s, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, trigger = excluded.trigger, after_seconds = excluded.after_seconds,
    args = excluded.args, kwargs = excluded.kwargs, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    timeout = excluded.timeout, misfire = excluded.misfire,
    misfire_grace = excluded.misfire_grace, misfire_max = excluded.misfire_max,
    overlap = excluded.overlap, children = excluded.children, calendars = excluded.calendars,
    max_fires = excluded.max_fires, source = excluded.source, spec_hash = excluded.spec_hash,
    paused = excluded.paused, enabled = true, next_fire_at = excluded.next_fire_at,
    broadcast = excluded.broadcast, shards = excluded.shards, updated_at = excluded.updated_at
WHERE jobs.namespace = excluded.namespace
RETURNING {_JOB_COLUMNS}
"""
# ``jobs.add``: the name must be new, decided by the insert itself. A replace of a job of another
# namespace changes nothing (the upsert's WHERE) and is refused as a conflict.
INSERT_JOB = (
    UPSERT_JOB[: UPSERT_JOB.index("ON CONFLICT")]
    + f"ON CONFLICT (name) DO NOTHING RETURNING {_JOB_COLUMNS}"
)
SET_PAUSED = f"""
UPDATE jobs SET paused = %(paused)s, next_fire_at = %(next_fire_at)s, updated_at = %(now)s
WHERE name = %(name)s
RETURNING {_JOB_COLUMNS}
"""
DISABLE = """
UPDATE jobs SET enabled = false, updated_at = %s
WHERE name = ANY(%b::text[]) AND enabled
RETURNING name
"""
DELETE = "DELETE FROM jobs WHERE name = %s RETURNING id"
# Compare-and-set of each job's next fire: a second scheduler's identical plan waits for the
# first one's row lock, then finds next_fire_at moved and changes nothing.
ADVANCE = """
UPDATE jobs j
SET next_fire_at = f.next_fire_at, fires = j.fires + f.runs,
    last_fire_at = coalesce(f.last_fire_at, j.last_fire_at),
    updated_at = %(now)s
FROM unnest(
    %(job_id)b::bigint[], %(expected)b::float8[], %(next_fire_at)b::float8[], %(runs)b::int[],
    %(last_fire_at)b::float8[]
) AS f(job_id, expected, next_fire_at, runs, last_fire_at)
WHERE j.id = f.job_id AND j.next_fire_at = f.expected AND NOT j.paused AND j.enabled
RETURNING j.id
"""
CHILD_JOBS = f"""
SELECT {_JOB_COLUMNS} FROM jobs
WHERE enabled AND name IN (
    SELECT json_array_elements_text(children::json) FROM jobs WHERE id = ANY(%b::bigint[]))
ORDER BY id
"""
CLEAR_CALENDAR = "DELETE FROM calendars WHERE name = %s"
PUT_DAYS = """
INSERT INTO calendars (name, day) SELECT %s, unnest(%b::text[]) ON CONFLICT DO NOTHING
"""
CALENDARS = "SELECT name, day FROM calendars ORDER BY name, day"
