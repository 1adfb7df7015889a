"""Named SQL of the SQLite store's jobs and calendars."""

from __future__ import annotations

from ..rows import JOB_COLUMNS

SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?"


LIST_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY name"
LIST_NAMESPACE_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs WHERE namespace = ? ORDER BY name"


DUE_JOBS = f"""
SELECT {JOB_COLUMNS} FROM jobs
WHERE next_fire_at IS NOT NULL AND paused = 0 AND enabled = 1 AND next_fire_at <= ?
ORDER BY next_fire_at LIMIT ?
"""


NEXT_FIRE = """
SELECT min(next_fire_at) FROM jobs WHERE next_fire_at IS NOT NULL AND paused = 0 AND enabled = 1
"""


UPSERT_JOB = """
INSERT INTO jobs (name, task, trigger, after_seconds, args, kwargs, queue, priority,
                  max_attempts, timeout, misfire, misfire_grace, misfire_max, overlap, children,
                  calendars, max_fires, source, spec_hash, paused, enabled, next_fire_at,
                  namespace, created_at, updated_at, broadcast, shards)
VALUES (:name, :task, :trigger, :after_seconds, :args, :kwargs, :queue, :priority,
        :max_attempts, :timeout, :misfire, :misfire_grace, :misfire_max, :overlap, :children,
        :calendars, :max_fires, :source, :spec_hash, :paused, 1, :next_fire_at, :namespace,
        :now, :now, :broadcast, :shards)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, trigger = excluded.trigger, after_seconds = excluded.after_seconds,
    args = excluded.args, kwargs = excluded.kwargs, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    timeout = excluded.timeout, misfire = excluded.misfire,
    misfire_grace = excluded.misfire_grace, misfire_max = excluded.misfire_max,
    overlap = excluded.overlap, children = excluded.children, calendars = excluded.calendars,
    max_fires = excluded.max_fires, source = excluded.source, spec_hash = excluded.spec_hash,
    paused = excluded.paused, enabled = 1, next_fire_at = excluded.next_fire_at,
    updated_at = excluded.updated_at, broadcast = excluded.broadcast, shards = excluded.shards
WHERE jobs.namespace = excluded.namespace
"""
# Names are unique per store: which namespace holds a name (a replace never moves a job).
JOB_NAMESPACE = "SELECT namespace FROM jobs WHERE name = ?"


# ``jobs.add``: the name must be new, decided by the insert itself. A replace of a job of another
# namespace changes nothing (the upsert's WHERE) and is refused as a conflict.
INSERT_JOB = UPSERT_JOB[: UPSERT_JOB.index("ON CONFLICT")] + "ON CONFLICT (name) DO NOTHING"


SET_PAUSED = """
UPDATE jobs SET paused = ?, next_fire_at = ?, updated_at = ? WHERE name = ?
"""


DISABLE = """
UPDATE jobs SET enabled = 0, updated_at = ?
WHERE name IN (SELECT value FROM json_each(?)) AND enabled = 1
RETURNING name
"""


DELETE = "DELETE FROM jobs WHERE name = ? RETURNING id"


ADVANCE = """
UPDATE jobs SET next_fire_at = :next, fires = fires + :count,
    last_fire_at = coalesce(:last, last_fire_at),
    updated_at = :now
WHERE id = :id AND next_fire_at = :expected AND paused = 0 AND enabled = 1
"""


# An `after` job plans its next fire when its run ends, if nothing else planned one meanwhile.
AFTER_JOB = """
SELECT trigger FROM jobs
WHERE id = :id AND after_seconds IS NOT NULL AND next_fire_at IS NULL AND enabled = 1
    AND paused = 0 AND (max_fires IS NULL OR fires < max_fires)
"""


SET_NEXT_FIRE = "UPDATE jobs SET next_fire_at = :next, updated_at = :now WHERE id = :id"


CHILDREN = "SELECT children FROM jobs WHERE id = ?"


CHILD_JOBS = f"""
SELECT {JOB_COLUMNS} FROM jobs WHERE name IN (SELECT value FROM json_each(?)) AND enabled = 1
"""


PUT_DAY = "INSERT OR IGNORE INTO calendars (name, day) VALUES (?, ?)"


CLEAR_CALENDAR = "DELETE FROM calendars WHERE name = ?"


CALENDARS = "SELECT name, day FROM calendars ORDER BY name, day"
