"""Jobs in the PostgreSQL store: their rows, their fires, and what a job's run ending sets off.

A fire (runs inserted, next fire advanced by compare-and-set) and a run's end (an ``after``
job's next fire, child jobs fired) each happen inside the transaction of what caused them: the
functions that take a :class:`~.connection.Tx` queue their statements on the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ConflictError, JobExistsError, JobNotFoundError
from ...model import Fire, Job, JobSpec, NewRun
from ..logic import JOB_FOLLOW_UP_WAKEUPS, after_fire, job_run
from ..ports import JOBS_CHANNEL, RUNS_CHANNEL
from ..rows import job_from_row, job_params
from . import inserts
from . import jobs_sql as jq
from . import sql as q
from .connection import Connected, Tx
from .rows import arrays


async def after_triggers(tx: Tx, job_ids: Sequence[int]) -> dict[int, str]:
    """The triggers of the ``after`` jobs among ``job_ids`` that wait to plan a fire."""
    if not job_ids:
        return {}
    return dict(await tx.rows(q.AFTER_JOBS, (list(job_ids),)))


async def runs_ended(
    tx: Tx,
    triggers: Mapping[int, str],
    parents: Sequence[int],
    now: float,
) -> None:
    """Job runs ended: ``after`` jobs plan their next fire through their trigger (so its
    start and end bounds hold), and the children of successful runs fire."""
    following = _after_fires(triggers, now)
    if following:
        # By job id, so that transactions planning the same jobs lock them in one order.
        rows = sorted(following.items())
        params = {**arrays(("job_id", "next_fire_at"), rows), "now": now}
        await tx.queue(q.SET_NEXT_FIRES, params)
        tx.nudges.update(JOB_FOLLOW_UP_WAKEUPS)
    if parents:
        children = [job_from_row(row) for row in await tx.rows(jq.CHILD_JOBS, (parents,))]
        if children:
            await inserts.insert_runs(tx, [job_run(job, now, now) for job in children], now)
            tx.nudges.update(JOB_FOLLOW_UP_WAKEUPS)


def _after_fires(triggers: Mapping[int, str], now: float) -> dict[int, float]:
    """The next fires that ``after`` jobs plan when their run ends (none past their end)."""
    following: dict[int, float] = {}
    for job_id, text in triggers.items():
        fire_at = after_fire(job_id, text, now)
        if fire_at is not None:
            following[job_id] = fire_at
    return following


def _rounds(fires: Sequence[Fire]) -> list[list[int]]:
    """Split fires into rounds where each job appears once, keeping each job's fires in order
    (one batched compare-and-set cannot move one job twice)."""
    rounds: list[list[int]] = []
    seen: dict[int, int] = {}
    for i, plan in enumerate(fires):
        n = seen.get(plan.job_id, 0)
        seen[plan.job_id] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(i)
    return rounds


def _advance_params(plans: Sequence[Fire], now: float) -> dict[str, Any]:
    # By job id, so that schedulers firing the same jobs lock their rows in the same order.
    rows = [
        (
            plan.job_id,
            plan.expected,
            plan.next_fire_at,
            len(plan.runs),
            max((r.fire_at for r in plan.runs if r.fire_at is not None), default=None),
        )
        for plan in sorted(plans, key=lambda plan: plan.job_id)
    ]
    names = ("job_id", "expected", "next_fire_at", "runs", "last_fire_at")
    return {**arrays(names, rows), "now": now}


class PostgresJobs(Connected):
    """The jobs role (:class:`~cronbus.store.ports.Jobs`) of the PostgreSQL store."""

    async def put_job(
        self, spec: JobSpec, next_fire_at: float | None, now: float, *, create: bool = False
    ) -> Job:
        """Create or replace the job named ``spec.name`` (with ``create``: only create it)."""
        params = {**job_params(spec, next_fire_at, now), "paused": spec.paused}
        async with self._db.transaction() as tx:
            putting = await tx.queue(jq.INSERT_JOB if create else jq.UPSERT_JOB, params)
            tx.nudges.add(JOBS_CHANNEL)
        rows = await putting.fetchall()
        if not rows:
            if not create:
                await self._refuse_namespace(spec)
            raise JobExistsError(f"a job named {spec.name!r} exists; use update")
        return job_from_row(rows[0])

    async def _refuse_namespace(self, spec: JobSpec) -> None:
        """Raise :class:`ConflictError` when the job's name is taken in another namespace."""
        row = await self._db.one(jq.JOB_NAMESPACE, (spec.name,))
        if row is not None and row[0] != spec.namespace:
            raise ConflictError(f"job {spec.name!r} belongs to namespace {row[0]!r}")

    async def put_jobs(self, jobs: Sequence[tuple[JobSpec, float | None]], now: float) -> None:
        """Create or replace several jobs in one pipelined transaction."""
        if not jobs:
            return
        async with self._db.transaction() as tx:
            putting = [
                await tx.queue(
                    jq.UPSERT_JOB, {**job_params(spec, following, now), "paused": spec.paused}
                )
                for spec, following in jobs
            ]
            for (spec, _), cursor in zip(jobs, putting, strict=True):
                if not await cursor.fetchall():
                    # Raised inside the transaction: the other jobs are rolled back with it.
                    await self._refuse_namespace(spec)
            tx.nudges.add(JOBS_CHANNEL)

    async def get_job(self, name: str) -> Job:
        """One job by name."""
        row = await self._db.one(jq.SELECT_JOB, (name,))
        if row is None:
            raise JobNotFoundError(f"no job named {name!r}")
        return job_from_row(row)

    async def list_jobs(self, namespace: str | None = None) -> list[Job]:
        """Every job (of ``namespace``; None: of all), by name."""
        rows = await self._db.rows(jq.LIST_JOBS, {"namespace": namespace})
        return [job_from_row(row) for row in rows]

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""
        params = {"name": name, "paused": paused, "next_fire_at": next_fire_at, "now": now}
        async with self._db.transaction() as tx:
            rows = await tx.rows(jq.SET_PAUSED, params)
            if not rows:
                raise JobNotFoundError(f"no job named {name!r}")
            tx.nudges.add(JOBS_CHANNEL)
        return job_from_row(rows[0])

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing; they are kept."""
        return sorted(row[0] for row in await self._db.rows(jq.DISABLE, (now, list(names))))

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""
        if not await self._db.rows(jq.DELETE, (name,)):
            raise JobNotFoundError(f"no job named {name!r}")

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs due by ``until``, earliest first (through the ``jobs_due`` index)."""
        return [job_from_row(row) for row in await self._db.rows(jq.DUE_JOBS, (until, limit))]

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction, each by compare-and-set of its job's next fire."""
        done = [False] * len(fires)
        if not fires:
            return done
        async with self._db.transaction() as tx:
            for batch in _rounds(fires):
                plans = [fires[i] for i in batch]
                moved = {row[0] for row in await tx.rows(jq.ADVANCE, _advance_params(plans, now))}
                runs: list[NewRun] = []
                for i in batch:
                    if fires[i].job_id in moved:
                        done[i] = True
                        runs.extend(fires[i].runs)
                if runs:
                    await inserts.insert_runs(tx, runs, now)
            if any(done):
                tx.nudges.add(RUNS_CHANNEL)
        return done

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""
        row = await self._db.one(jq.NEXT_FIRE)
        return None if row is None or row[0] is None else float(row[0])

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar."""
        async with self._db.transaction() as tx:
            await tx.queue(jq.CLEAR_CALENDAR, (name,))
            await tx.queue(jq.PUT_DAYS, (name, list(days)))
            tx.nudges.add(JOBS_CHANNEL)

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""
        calendars: dict[str, set[str]] = {}
        for name, day in await self._db.rows(jq.CALENDARS):
            calendars.setdefault(name, set()).add(day)
        return {name: frozenset(days) for name, days in calendars.items()}
