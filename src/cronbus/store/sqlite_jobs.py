"""Jobs in the SQLite store: their rows, their fires, and what a job's run ending sets off.

Every function takes a connection inside a write transaction the caller holds, so a fire (runs
inserted, next fire advanced by compare-and-set) and a run's end (an ``after`` job's next fire,
child jobs fired) are each one transaction with what caused them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence

from ..errors import JobNotFoundError
from ..model import Deferred, Fire, Job, NewRun
from ..states import RunState
from ..triggers import trigger_from_spec
from .logic import job_run
from .rows import JOB_COLUMNS, job_from_row

SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?"
LIST_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY name"
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
                  created_at, updated_at)
VALUES (:name, :task, :trigger, :after_seconds, :args, :kwargs, :queue, :priority,
        :max_attempts, :timeout, :misfire, :misfire_grace, :misfire_max, :overlap, :children,
        :calendars, :max_fires, :source, :spec_hash, :paused, 1, :next_fire_at, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, trigger = excluded.trigger, after_seconds = excluded.after_seconds,
    args = excluded.args, kwargs = excluded.kwargs, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    timeout = excluded.timeout, misfire = excluded.misfire,
    misfire_grace = excluded.misfire_grace, misfire_max = excluded.misfire_max,
    overlap = excluded.overlap, children = excluded.children, calendars = excluded.calendars,
    max_fires = excluded.max_fires, source = excluded.source, spec_hash = excluded.spec_hash,
    paused = excluded.paused, enabled = 1, next_fire_at = excluded.next_fire_at,
    updated_at = excluded.updated_at
"""
# ``jobs.add``: the name must be new, decided by the insert itself.
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

InsertRuns = Callable[[sqlite3.Connection, Sequence[NewRun], float], list[Deferred]]


def get_job(conn: sqlite3.Connection, name: str) -> Job:
    """One job by name."""
    row = conn.execute(SELECT_JOB, (name,)).fetchone()
    if row is None:
        raise JobNotFoundError(f"no job named {name!r}")
    return job_from_row(row)


def fire(
    conn: sqlite3.Connection, fires: Sequence[Fire], now: float, insert_runs: InsertRuns
) -> list[bool]:
    """Advance each job by compare-and-set, and insert its runs only if that succeeded."""
    done = []
    for plan in fires:
        last = max((r.fire_at for r in plan.runs if r.fire_at is not None), default=None)
        moved = conn.execute(
            ADVANCE,
            {
                "id": plan.job_id,
                "expected": plan.expected,
                "next": plan.next_fire_at,
                "count": len(plan.runs),
                "last": last,
                "now": now,
            },
        ).rowcount
        if moved:
            insert_runs(conn, plan.runs, now)
        done.append(bool(moved))
    return done


def runs_ended(
    conn: sqlite3.Connection,
    ended: Sequence[tuple[int, RunState]],
    now: float,
    insert_runs: InsertRuns,
) -> bool:
    """A job's run ended: plan an ``after`` job's next fire; fire children of a success.

    Returns whether any job or run changed (so schedulers and workers should be nudged).
    """
    changed = False
    for job_id, state in ended:
        row = conn.execute(AFTER_JOB, {"id": job_id}).fetchone()
        if row is not None:
            # The trigger decides, so its start and end bounds hold for after-jobs too.
            following = trigger_from_spec(json.loads(row[0])).next_fire(now)
            conn.execute(SET_NEXT_FIRE, {"id": job_id, "next": following, "now": now})
            changed = changed or following is not None
        if state is RunState.SUCCEEDED:
            changed |= bool(_fire_children(conn, job_id, now, insert_runs))
    return changed


def _fire_children(
    conn: sqlite3.Connection, job_id: int, now: float, insert_runs: InsertRuns
) -> list[Deferred]:
    row = conn.execute(CHILDREN, (job_id,)).fetchone()
    if row is None or row[0] == "[]":
        return []
    children = [job_from_row(r) for r in conn.execute(CHILD_JOBS, (row[0],))]
    return insert_runs(conn, [job_run(child, now, now) for child in children], now)
