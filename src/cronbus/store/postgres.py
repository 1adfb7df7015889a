"""The shared store: PostgreSQL, for any number of machines.

Round trips are what a store call costs, so they are counted:

- a write is one *pipelined* transaction: statements queue up and travel with the next read or
  with the commit. A worker's turn (complete N attempts, claim M runs) is seven statements in
  two round trips whatever N and M (``BEGIN, RELAXED, COMPLETE, PROMOTE, PICK`` then
  ``START, COMMIT``), a defer of N runs one statement in one round trip; batches travel as
  arrays (``unnest``); the hot statements are prepared and keep their generic plans;
- a claim locks its candidates with ``FOR UPDATE SKIP LOCKED`` as it reads them, so claimers never
  wait for each other; a completion is fenced inside its UPDATE (attempt id and state).

Wake-ups are LISTEN/NOTIFY. The NOTIFY goes inside the transaction that made the work, and the
server delivers it at the commit; this process's own listeners are woken directly after the
commit (and ignore their own NOTIFY, which carries the store's token). Each store has one
listening connection, outside the pool, that reconnects with backoff by itself.

Tables live in one schema (URL option ``schema``, default ``cronbus``), set as every connection's
``search_path``; notification channels are named after the schema, so that two schemas in one
database (tests, tenants) neither share rows nor wake each other.

This module is what the store does; the parts it does it with are apart: the URL
(:mod:`.postgres_url`), the pool, transactions and migrations (:mod:`.postgres_db`,
:mod:`.postgres_tx`), the listening connection (:mod:`.postgres_listen`), the pure builders of
parameters (:mod:`.postgres_rows`), jobs (:mod:`.postgres_jobs`) and the SQL
(:mod:`.postgres_sql`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ..errors import RunNotFoundError, StoreError
from ..model import (
    Attempt,
    ClaimedRun,
    ClaimRequest,
    Deferred,
    Fire,
    Job,
    JobSpec,
    NewRun,
    Outcome,
    Run,
    RunFilter,
    WorkerInfo,
    WorkerState,
)
from ..states import RunState
from . import postgres_jobs
from . import postgres_jobs as jobs
from . import postgres_sql as q
from .base import HeldAttempt, Listener
from .logic import cancel_state, holds_cancelling, lease_lost, overlap_decisions, wakeups
from .migrations import Migrated, SchemaVersions
from .postgres_db import NOT_OPEN, Database
from .postgres_events import PostgresEvents
from .postgres_listen import Listening, LocalHub, channel_name, listening_conninfo
from .postgres_rows import (
    Pick,
    attempt_row,
    claimed_runs,
    complete_params,
    fenced,
    finish_params,
    first_per_run,
    lost_change,
    run_params,
    worker_from_row,
)
from .postgres_tx import Cursor, Row, Tx
from .postgres_url import PostgresOptions, parse_url
from .rows import attempt_from_row, run_from_row

__all__ = ["PostgresOptions", "PostgresStore", "channel_name", "parse_url"]

_REAP_BATCH = 1000
_KEY_LOCK_SPACE = 0x63627573
"""First key of the advisory locks on concurrency keys ('cbus'), apart from other users'."""
_NO_CLAIM = ClaimRequest(worker_id="", queues=(), limit=0, lease_seconds=0.0)


class PostgresStore(PostgresEvents):
    """A :class:`~cronbus.store.base.Store` on PostgreSQL (see the module's docstring); the
    event bus's half is :class:`~.postgres_events.PostgresEvents`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.options = parse_url(url)
        self._hub = LocalHub()
        self._token = uuid.uuid4().hex
        self._db = Database(self.options, hub=self._hub, token=self._token)
        self._listening: Listening | None = None

    @property
    def schema(self) -> str:
        """The schema that holds the store's tables."""
        return self.options.schema

    # -- lifecycle -----------------------------------------------------------------------------
    async def open(self) -> None:
        """Apply pending migrations (under an advisory lock), then open the connection pool.

        With ``migrate=false`` in the URL, a schema that is behind raises
        :class:`~cronbus.errors.SchemaError` instead (``cronbus migrate`` applies them).
        """
        if self._db.is_open:
            return
        await self._db.open()

    async def close(self) -> None:
        """Stop listening and close the pool."""
        if self._listening is not None:
            await self._listening.close()
            self._listening = None
        self._hub.close()
        await self._db.close()

    async def schema_version(self) -> int:
        """The newest migration applied."""
        row = await self._db.one(q.SCHEMA_VERSION)
        return int(row[0]) if row else 0

    async def schema_versions(self) -> SchemaVersions:
        """The schema's version and the newest this cronbus knows; works on a closed store."""
        return await self._db.schema_versions()

    async def migrate(self) -> Migrated:
        """Apply pending migrations, whatever the URL's ``migrate``; works on a closed store."""
        return await self._db.migrate()

    # -- defer ---------------------------------------------------------------------------------
    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs in one transaction (one round trip); a known key returns its run."""
        if not runs:
            return []
        async with self._db.transaction() as tx:
            inserting = await _insert_runs(tx, runs, now)
            tx.nudges.update(wakeups(RunState.QUEUED))
        return await self._deferred(inserting, runs)

    async def _deferred(self, inserting: Cursor, runs: Sequence[NewRun]) -> list[Deferred]:
        rows = await inserting.fetchall()
        out = []
        for run, (created, run_id) in zip(runs, rows, strict=True):
            if run_id is None:
                # Another transaction committed this key after our statement's snapshot.
                run_id = await self._existing_run(run)
            out.append(Deferred(id=run_id, created=created))
        return out

    async def _existing_run(self, run: NewRun) -> int:
        params = {"key": run.idempotency_key, "job_id": run.job_id, "fire_at": run.fire_at}
        row = await self._db.one(q.RUN_BY_KEY_OR_FIRE, params)
        if row is None or row[0] is None:
            what = run.idempotency_key or f"job {run.job_id} at {run.fire_at}"
            raise StoreError(f"the existing run of {what!r} could not be read")
        return int(row[0])

    # -- claim and complete --------------------------------------------------------------------
    async def claim(self, request: ClaimRequest, now: float) -> list[ClaimedRun]:
        """Promote due runs, then claim up to ``request.limit`` of them under a lease."""
        _, claimed = await self.complete_and_claim([], request, now)
        return claimed

    async def complete(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Record ended attempts in one transaction, each fenced by its attempt id."""
        if not outcomes:
            return []
        done, _ = await self.complete_and_claim(outcomes, _NO_CLAIM, now)
        return done

    async def complete_and_claim(
        self, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        """Record ended attempts and claim the next runs: one transaction, two round trips."""
        wants = request.limit > 0 and bool(request.queues)
        if not outcomes and not wants:
            return [], []
        eligible = first_per_run(outcomes)
        async with self._db.transaction(durable=False) as tx:
            completing = await self._queue_complete(tx, eligible, now)
            picking = await self._queue_pick(tx, request, now) if wants else None
            ended = await completing.fetchall() if completing else []
            picks = [Pick(*row) for row in await picking.fetchall()] if picking else []
            await self._completed(tx, ended, now)
            picks = await self._apply_overlap(tx, picks, now)
            starting = await self._queue_start(tx, picks, request, now)
        claimed = claimed_runs(picks, await starting.fetchall()) if starting else []
        return fenced(outcomes, ended), claimed

    async def _queue_complete(
        self, tx: Tx, outcomes: Sequence[Outcome], now: float
    ) -> Cursor | None:
        if not outcomes:
            return None
        return await tx.queue(q.COMPLETE, complete_params(outcomes, now))

    async def _queue_pick(self, tx: Tx, request: ClaimRequest, now: float) -> Cursor:
        await tx.queue(q.PROMOTE_DUE, {"now": now})
        params = {
            "queues": [share.name for share in request.queues],
            "limits": [share.limit for share in request.queues],
            "limit": request.limit,
            "worker": request.worker_id,
        }
        return await tx.queue(q.PICK, params)

    async def _queue_start(
        self, tx: Tx, picks: Sequence[Pick], request: ClaimRequest, now: float
    ) -> Cursor | None:
        if not picks:
            return None
        params = {
            "ids": [pick.id for pick in picks],
            "worker": request.worker_id,
            "expires": now + request.lease_seconds,
            "now": now,
        }
        return await tx.queue(q.START, params)

    async def _completed(self, tx: Tx, ended: Sequence[Row], now: float) -> None:
        """Wake-ups and job follow-ups of the attempts that ended (rows of ``COMPLETE``)."""
        triggers: dict[int, str] = {}
        parents: list[int] = []
        for _, _, state, job_id, key, has_children, after_trigger in ended:
            new = RunState(state)
            tx.nudges.update(wakeups(new, key))
            if job_id is not None and new.terminal:
                if after_trigger is not None:
                    triggers[job_id] = after_trigger
                if new is RunState.SUCCEEDED and has_children:
                    parents.append(job_id)
        await jobs.runs_ended(tx, triggers, parents, now, _insert_runs)

    async def _apply_overlap(self, tx: Tx, picks: list[Pick], now: float) -> list[Pick]:
        """Job overlap policies among picked runs that share a concurrency key.

        Claimers lock the keys first, so two of them cannot both find a key free.
        """
        keys = sorted({p.concurrency_key for p in picks if p.concurrency_key is not None})
        if not keys:
            return picks
        await tx.queue(q.KEY_LOCKS, {"space": _KEY_LOCK_SPACE, "keys": keys})
        busy: dict[str, list[int]] = {}
        for key, run_id in await tx.rows(q.ACTIVE_KEYS, {"keys": keys}):
            busy.setdefault(key, []).append(run_id)
        kept, skipped, cancel = overlap_decisions(
            picks, busy, lambda p: (p.concurrency_key, p.overlap)
        )
        if cancel:
            await tx.queue(q.CANCEL_RUNNING, {"ids": cancel, "now": now})
            tx.nudges.update(wakeups(RunState.CANCELLING))
        if skipped:
            await tx.queue(q.SKIP_RUNS, {"ids": [p.id for p in skipped], "now": now})
            ended = [p.job_id for p in skipped if p.job_id is not None]
            ending = await jobs.after_triggers(tx, ended)
            await jobs.runs_ended(tx, ending, [], now, _insert_runs)
        return kept

    # -- leases --------------------------------------------------------------------------------
    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew every lease the worker holds, and its registry entry, in one statement."""
        params = {"now": now, "worker": worker_id, "expires": now + lease_seconds}
        return [
            HeldAttempt(run_id=r[0], attempt_id=r[1], cancelling=holds_cancelling(RunState(r[2])))
            for r in await self._db.rows(q.HEARTBEAT, params)
        ]

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Requeue the runs of expired leases; a run lost ``max_lost`` times becomes dead."""
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(q.EXPIRED, {"now": now, "limit": _REAP_BATCH})
            if rows:
                await self._reap_rows(tx, rows, now, max_lost)
        return [row[0] for row in rows]

    async def _reap_rows(self, tx: Tx, rows: Sequence[Row], now: float, max_lost: int) -> None:
        changes, attempts, ended = [], [], []
        for run_id, attempt_id, state, lost, eta, job_id in rows:
            change, outcome = lease_lost(
                run_id, attempt_id, RunState(state), lost, max_lost, eta, now
            )
            tx.nudges.update(wakeups(change.state))
            if change.state.terminal and job_id is not None:
                ended.append(job_id)
            changes.append(lost_change(run_id, attempt_id, state, change))
            attempts.append(attempt_row(outcome))
        await tx.queue(q.COMPLETE, finish_params(changes, attempts, now))
        ending = await jobs.after_triggers(tx, ended)
        await jobs.runs_ended(tx, ending, [], now, _insert_runs)

    async def age_retries(self, now: float, after: float) -> int:
        """Promote retries that waited ``after`` seconds to the fresh lane."""
        return await self._db.execute(q.AGE_RETRIES, {"cutoff": now - after})

    # -- commands ------------------------------------------------------------------------------
    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a waiting run at once, or ask a running one to stop."""
        async with self._db.transaction() as tx:
            rows = await tx.rows(q.RUN_STATE, (run_id,))
            if not rows:
                raise RunNotFoundError(f"no run has id {run_id}")
            old, job_id = RunState(rows[0][0]), rows[0][1]
            new = cancel_state(run_id, old)
            if new is not old:
                finished_at = now if new.terminal else None
                params = {"new": new.value, "old": old.value, "id": run_id, "now": now}
                await tx.queue(q.SET_STATE, {**params, "finished_at": finished_at})
            tx.nudges.update(wakeups(new))
            if new.terminal and job_id is not None:
                ending = await jobs.after_triggers(tx, [job_id])
                await jobs.runs_ended(tx, ending, [], now, _insert_runs)
        return new

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead (or cancelled, when named) runs again, with a fresh retry budget."""
        async with self._db.transaction() as tx:
            if run_ids is None:
                rows = await tx.rows(q.REQUEUE_ALL_DEAD, {"now": now})
            else:
                rows = await tx.rows(q.REQUEUE_IDS, {"now": now, "ids": list(run_ids)})
            if rows:
                tx.nudges.update(wakeups(RunState.QUEUED))
        return sorted(row[0] for row in rows)

    # -- reads ---------------------------------------------------------------------------------
    async def get_run(self, run_id: int) -> Run:
        """One run by id."""
        row = await self._db.one(q.GET_RUN, (run_id,))
        if row is None:
            raise RunNotFoundError(f"no run has id {run_id}")
        return run_from_row(row)

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id."""
        return [run_from_row(row) for row in await self._db.rows(q.GET_RUNS, (list(run_ids),))]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Runs matching ``filter``, newest first."""
        values = {
            "states": [state.value for state in filter.states] or None,
            "task": filter.task,
            "queue": filter.queue,
            "job_id": filter.job_id,
            "before_id": filter.before_id,
        }
        given = {name: value for name, value in values.items() if value is not None}
        where = " AND ".join(q.RUN_FILTERS[name] for name in given)
        query = q.LIST_RUNS + (f" WHERE {where}" if where else "") + q.LIST_RUNS_ORDER
        rows = await self._db.rows(query, [*given.values(), filter.limit])
        return [run_from_row(row) for row in rows]

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""
        return [attempt_from_row(row) for row in await self._db.rows(q.LIST_ATTEMPTS, (run_id,))]

    async def count_runs(self) -> dict[RunState, int]:
        """How many runs are in each state."""
        return {RunState(state): count for state, count in await self._db.rows(q.COUNT_RUNS)}

    async def next_eta(self, queues: Sequence[str]) -> float | None:
        """When the next scheduled run of ``queues`` is due."""
        row = await self._db.one(q.NEXT_ETA, (list(queues),))
        return None if row is None or row[0] is None else float(row[0])

    # -- jobs (in .postgres_jobs) ---------------------------------------------------------------
    async def put_job(
        self, spec: JobSpec, next_fire_at: float | None, now: float, *, create: bool = False
    ) -> Job:
        """Create or replace the job named ``spec.name`` (with ``create``: only create it)."""
        return await jobs.put_job(self._db, spec, next_fire_at, now, create=create)

    async def put_jobs(self, jobs: Sequence[tuple[JobSpec, float | None]], now: float) -> None:
        """Create or replace several jobs in one transaction."""
        await postgres_jobs.put_jobs(self._db, jobs, now)

    async def get_job(self, name: str) -> Job:
        """One job by name."""
        return await jobs.get_job(self._db, name)

    async def list_jobs(self) -> list[Job]:
        """Every job, by name."""
        return await jobs.list_jobs(self._db)

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""
        return await jobs.set_job_paused(self._db, name, paused, next_fire_at, now)

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing; they are kept."""
        return await jobs.disable_jobs(self._db, names, now)

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""
        await jobs.delete_job(self._db, name)

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs due by ``until``, earliest first (through the ``jobs_due`` index)."""
        return await jobs.due_jobs(self._db, until, limit)

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction, each by compare-and-set of its job's next fire."""
        return await jobs.fire(self._db, fires, now, _insert_runs)

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""
        return await jobs.next_job_fire(self._db)

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar."""
        await jobs.put_calendar(self._db, name, days)

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""
        return await jobs.get_calendars(self._db)

    # -- workers -------------------------------------------------------------------------------
    async def register_worker(self, worker: WorkerInfo) -> None:
        """Add or replace a worker in the registry."""
        row = (
            worker.id,
            worker.host,
            worker.pid,
            list(worker.queues),
            list(worker.labels),
            worker.concurrency,
            worker.version,
            worker.started_at,
            worker.heartbeat_at,
            worker.state.value,
        )
        await self._db.execute(q.UPSERT_WORKER, row)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""
        await self._db.execute(q.SET_WORKER_STATE, (state.value, now, worker_id))

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the rows of workers silent since before ``silent_since`` and holding no run."""
        return [row[0] for row in await self._db.rows(q.PRUNE_WORKERS, (silent_since,))]

    async def list_workers(self, now: float, lease_seconds: float) -> list[WorkerInfo]:
        """Registered workers, with their running runs; silent ones are reported lost."""
        return [
            worker_from_row(row, now - lease_seconds) for row in await self._db.rows(q.LIST_WORKERS)
        ]

    # -- wake-ups ------------------------------------------------------------------------------
    async def listen(self, channels: Sequence[str]) -> Listener:
        """Receive wake-ups for ``channels``, from this process and (by LISTEN) from others."""
        if not self._db.is_open:
            raise StoreError(NOT_OPEN)
        listener = self._hub.add(channels)
        if self._listening is None:
            self._listening = Listening(
                listening_conninfo(self._db.conninfo),
                names=self._db.channel_name,
                wake=self._hub.wake_local,
                token=self._token,
                # The listening connection is the first to see a server restart: replace the
                # pool's idle connections before anyone runs into them.
                lost=self._db.check_pool,
            )
        await self._listening.subscribe(channels)
        return listener

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake this process's listeners directly and the others' by NOTIFY."""
        self._hub.wake_local(channels)
        await self._db.execute(q.NOTIFY, self._db.notify_params(channels))


async def _insert_runs(tx: Tx, runs: Sequence[NewRun], now: float) -> Cursor:
    keyed = any(run.idempotency_key is not None or run.job_id is not None for run in runs)
    query = q.INSERT_KEYED_RUNS if keyed else q.INSERT_RUNS
    return await tx.queue(query, run_params(runs, now))
