"""Jobs in the SQLite store: their rows, their fires, and what a job's run ending sets off.

Every function takes a connection inside a write transaction the caller holds, so a fire (runs
inserted, next fire advanced by compare-and-set) and a run's end (an ``after`` job's next fire,
child jobs fired) are each one transaction with what caused them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError, JobExistsError, JobNotFoundError
from ...model import Deferred, Fire, Job, JobSpec
from ...states import RunState
from ..logic import JOB_FOLLOW_UP_WAKEUPS, after_fire, job_run
from ..ports import JOBS_CHANNEL, RUNS_CHANNEL
from ..rows import job_from_row, job_params
from . import jobs_sql as jq
from . import sql as q
from .connection import Connected, Inline
from .fanout import insert_runs
from .rows import fetch_all

_INLINE_BATCH = 16


def get_job(conn: sqlite3.Connection, name: str) -> Job:
    """One job by name."""
    row = conn.execute(jq.SELECT_JOB, (name,)).fetchone()
    if row is None:
        raise JobNotFoundError(f"no job named {name!r}")
    return job_from_row(row)


def fire(conn: sqlite3.Connection, fires: Sequence[Fire], now: float) -> list[bool]:
    """Advance each job by compare-and-set, and insert its runs only if that succeeded."""
    done = []
    dead: list[int] = []
    for plan in fires:
        last = max((r.fire_at for r in plan.runs if r.fire_at is not None), default=None)
        moved = conn.execute(
            jq.ADVANCE,
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
            insert_runs(conn, plan.runs, now, dead)
        done.append(bool(moved))
    runs_ended(conn, _job_states(conn, dead), now)
    return done


def runs_ended(
    conn: sqlite3.Connection,
    ended: Sequence[tuple[int, RunState]],
    now: float,
) -> bool:
    """A job's run ended: plan an ``after`` job's next fire; fire children of a success.

    Returns whether any job or run changed (so schedulers and workers should be nudged).
    """
    changed = False
    pending = list(ended)
    while pending:
        job_id, state = pending.pop(0)
        row = conn.execute(jq.AFTER_JOB, {"id": job_id}).fetchone()
        if row is not None:
            following = after_fire(job_id, row[0], now)
            conn.execute(jq.SET_NEXT_FIRE, {"id": job_id, "next": following, "now": now})
            changed = changed or following is not None
        if state is RunState.SUCCEEDED:
            dead: list[int] = []
            changed |= bool(_fire_children(conn, job_id, now, dead))
            # A child job's fan-out that ended at once (no children) follows up too.
            pending.extend(_job_states(conn, dead))
    return changed


def _fire_children(
    conn: sqlite3.Connection, job_id: int, now: float, dead: list[int]
) -> list[Deferred]:
    row = conn.execute(jq.CHILDREN, (job_id,)).fetchone()
    if row is None or row[0] == "[]":
        return []
    children = [job_from_row(r) for r in conn.execute(jq.CHILD_JOBS, (row[0],))]
    return insert_runs(conn, [job_run(child, now, now) for child in children], now, dead)


def _job_states(conn: sqlite3.Connection, run_ids: Sequence[int]) -> list[tuple[int, RunState]]:
    """(job id, state) of the job runs among ``run_ids`` (none read when there are none)."""
    if not run_ids:
        return []
    rows = conn.execute(q.JOB_RUN_STATES, (json.dumps(list(run_ids)),)).fetchall()
    return [(job_id, RunState(state)) for job_id, state in rows]


def jobs_runs_ended(
    conn: sqlite3.Connection, run_ids: Sequence[int], now: float, nudges: set[str]
) -> None:
    """Job runs reached an end: ``after`` jobs plan their next fire, children fire."""
    if not run_ids:
        return
    if runs_ended(conn, _job_states(conn, run_ids), now):
        nudges.update(JOB_FOLLOW_UP_WAKEUPS)


def _put_job(conn: sqlite3.Connection, query: str, params: dict[str, Any], name: str) -> Job:
    if conn.execute(query, params).rowcount == 0:
        if query is jq.UPSERT_JOB:
            _refuse_namespace(conn, params)
        raise JobExistsError(f"a job named {name!r} exists; use update")
    return get_job(conn, name)


def _put_jobs(conn: sqlite3.Connection, rows: Sequence[dict[str, Any]]) -> None:
    for params in rows:
        if conn.execute(jq.UPSERT_JOB, params).rowcount == 0:
            _refuse_namespace(conn, params)


def _refuse_namespace(conn: sqlite3.Connection, params: dict[str, Any]) -> None:
    """Raise :class:`ConflictError` when the job's name is taken in another namespace."""
    row = conn.execute(jq.JOB_NAMESPACE, (params["name"],)).fetchone()
    if row is not None and row[0] != params["namespace"]:
        raise ConflictError(f"job {params['name']!r} belongs to namespace {row[0]!r}")


def _set_paused(conn: sqlite3.Connection, name: str, params: tuple[Any, ...]) -> Job:
    get_job(conn, name)
    conn.execute(jq.SET_PAUSED, params)
    return get_job(conn, name)


def _delete_job(conn: sqlite3.Connection, name: str) -> None:
    if conn.execute(jq.DELETE, (name,)).fetchone() is None:
        raise JobNotFoundError(f"no job named {name!r}")


def _put_calendar(conn: sqlite3.Connection, name: str, days: Sequence[str]) -> None:
    conn.execute(jq.CLEAR_CALENDAR, (name,))
    conn.executemany(jq.PUT_DAY, [(name, day) for day in days])


class SqliteJobs(Connected):
    """The jobs role (:class:`~cronbus.store.ports.Jobs`) of the SQLite store."""

    async def put_job(
        self, spec: JobSpec, next_fire_at: float | None, now: float, *, create: bool = False
    ) -> Job:
        """Create or replace the job named ``spec.name`` (with ``create``: only create it)."""
        query = jq.INSERT_JOB if create else jq.UPSERT_JOB
        params = job_params(spec, next_fire_at, now)
        job = await self._transact(_put_job, query, params, spec.name, wake=True)
        await self.notify([JOBS_CHANNEL])
        return job

    async def put_jobs(self, jobs: Sequence[tuple[JobSpec, float | None]], now: float) -> None:
        """Create or replace several jobs in one transaction."""
        rows = [job_params(spec, following, now) for spec, following in jobs]
        if not rows:
            return
        await self._transact(_put_jobs, rows, wake=True)
        await self.notify([JOBS_CHANNEL])

    async def get_job(self, name: str) -> Job:
        """One job by name."""
        return await self._call(get_job, self._db, name, inline="read")

    async def list_jobs(self, namespace: str | None = None) -> list[Job]:
        """Every job (of ``namespace``; None: of all), by name."""
        if namespace is None:
            rows = await self._rows(jq.LIST_JOBS)
        else:
            rows = await self._rows(jq.LIST_NAMESPACE_JOBS, (namespace,))
        return [job_from_row(row) for row in rows]

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""
        params = (int(paused), next_fire_at, now, name)
        job = await self._transact(_set_paused, name, params, wake=True)
        await self.notify([JOBS_CHANNEL])
        return job

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing; they are kept."""
        rows = await self._transact(fetch_all, jq.DISABLE, (now, json.dumps(list(names))))
        return sorted(r[0] for r in rows)

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""
        await self._transact(_delete_job, name)

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs due by ``until``, earliest first (through the ``jobs_due`` index)."""
        rows = await self._rows(jq.DUE_JOBS, (until, limit), inline="read")
        return [job_from_row(row) for row in rows]

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction, each by compare-and-set of its job's next fire."""
        if not fires:
            return []
        quick: Inline = "write" if len(fires) <= _INLINE_BATCH else ""
        done = await self._transact(fire, fires, now, wake=True, inline=quick)
        if any(done):
            await self.notify([RUNS_CHANNEL])
        return done

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""
        row = await self._one(jq.NEXT_FIRE, inline="read")
        return None if row is None or row[0] is None else float(row[0])

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar."""
        await self._transact(_put_calendar, name, days)
        await self.notify([JOBS_CHANNEL])

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""
        rows = await self._rows(jq.CALENDARS)
        calendars: dict[str, set[str]] = {}
        for name, day in rows:
            calendars.setdefault(name, set()).add(day)
        return {name: frozenset(days) for name, days in calendars.items()}
