"""The embedded store: one SQLite file in WAL mode, shared by the processes of one machine.

The connection, its threads and transactions live in :mod:`.sqlite_db`; this module is what the
store does with them. A claim is one write transaction that reads and updates, so no other
writer can slip between the two. Batches are executed with ``executemany`` and ids are read
from ``sqlite_sequence`` while the lock is held, because AUTOINCREMENT ids inside one write
transaction are consecutive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ..errors import (
    JobExistsError,
    JobNotFoundError,
    RunNotFoundError,
    StoreError,
)
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
from . import sqlite_jobs
from . import sqlite_sql as q
from .base import JOBS_CHANNEL, RUNS_CHANNEL, HeldAttempt, Listener
from .logic import (
    Finish,
    cancel_state,
    finish,
    holds_cancelling,
    initial_state,
    lease_lost,
    overlap_decisions,
    wakeups,
    worker_state,
)
from .migrations import Migrated, SchemaVersions
from .rows import attempt_from_row, job_from_row, job_params, run_from_row
from .sqlite_db import Database, Inline, read_versions
from .sqlite_events import SqliteEvents
from .wake import WakeHub

T = TypeVar("T")
log = logging.getLogger("cronbus.store")
_WAKEUP_CACHE_SECONDS = 1.0
_REAP_BATCH = 1000
_INLINE_BATCH = 16
"""Defers of at most this many runs may run on the event loop's thread (see ``_call``)."""
_NO_CLAIM = ClaimRequest(worker_id="", queues=(), limit=0, lease_seconds=0.0)
Row = tuple[Any, ...]


class SQLiteStore(SqliteEvents):
    """A :class:`~cronbus.store.base.Store` on one SQLite file."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
        url: str | None = None,
        migrate: bool = True,
    ) -> None:
        self.path = path
        self.url = url or f"sqlite:///{path}"
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._database = Database(
            path, synchronous=synchronous, busy_timeout=busy_timeout, migrate=migrate
        )
        self._hub = WakeHub()
        self._registered: frozenset[str] = frozenset()
        self._wakeups: list[tuple[str, frozenset[str]]] = []
        self._wakeups_read = 0.0

    @property
    def _db(self) -> sqlite3.Connection:
        return self._database.conn

    async def _call(self, fn: Callable[..., T], *args: Any, inline: Inline = "") -> T:
        return await self._database.call(fn, *args, inline=inline)

    @contextlib.contextmanager
    def _write(
        self, *, durable: bool = True, wake: bool | set[str] = False
    ) -> Iterator[sqlite3.Connection]:
        """A write transaction. ``wake`` (or a set of channels that ends up non-empty) re-reads
        the wake-up registry inside it, so the nudges that follow reach every listener that had
        registered by then."""

        def before_commit(conn: sqlite3.Connection) -> None:
            if wake:
                self._read_wakeups(conn)

        with self._database.write(durable=durable, before_commit=before_commit) as conn:
            yield conn

    async def _nudge(self, channels: set[str]) -> None:
        if channels:
            await self.notify(sorted(channels))

    def _read_wakeups(self, conn: sqlite3.Connection) -> None:
        self._wakeups = _wakeups(conn)
        self._wakeups_read = time.monotonic()

    async def open(self) -> None:
        """Open the file (creating it), switch to WAL and apply pending migrations.

        With ``migrate=false`` in the URL, a schema that is behind (or a missing file) raises
        :class:`~cronbus.errors.SchemaError` instead (``cronbus migrate`` applies them).
        """
        if self._database.is_open:
            return
        self._registered = frozenset()
        try:
            await self._database.open()
        except sqlite3.Error as exc:
            self._hub.close()
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        except BaseException:
            self._hub.close()
            raise

    async def close(self) -> None:
        """Unregister wake-ups and close the connection."""
        if not self._database.is_open:
            return
        if self._hub.bound:
            with contextlib.suppress(Exception):
                await self._call(self._forget_wakeup)
        self._hub.close()
        await self._database.close()

    async def schema_version(self) -> int:
        """The newest migration applied."""

        def read() -> int:
            (version,) = self._db.execute("SELECT max(version) FROM cronbus_migrations").fetchone()
            return int(version or 0)

        return await self._call(read)

    async def schema_versions(self) -> SchemaVersions:
        """The schema's version and the newest this cronbus knows; works on a closed store."""
        return await asyncio.to_thread(read_versions, self.path, self.busy_timeout)

    async def migrate(self) -> Migrated:
        """Apply pending migrations, whatever the URL's ``migrate``; works on a closed store."""
        # A connection of its own, which migrates as it opens: the store may be open or not.
        database = Database(self.path, synchronous=self.synchronous, busy_timeout=self.busy_timeout)
        await database.open()
        try:
            assert database.migrated is not None
            return database.migrated
        finally:
            await database.close()

    # -- defer ---------------------------------------------------------------------------------
    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs in one transaction; known idempotency keys return their run."""
        if not runs:
            return []
        quick: Inline = "write" if len(runs) <= _INLINE_BATCH else ""
        result = await self._call(self._defer, runs, now, inline=quick)
        await self._nudge(set(wakeups(RunState.QUEUED)))
        return result

    def _defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        with self._write(wake=True) as conn:
            return insert_runs(conn, runs, now)

    # -- claim ---------------------------------------------------------------------------------
    async def claim(self, request: ClaimRequest, now: float) -> list[ClaimedRun]:
        """Promote due runs, then claim up to ``request.limit`` of them under a lease."""
        _, claimed = await self.complete_and_claim([], request, now)
        return claimed

    async def complete_and_claim(
        self, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        """Record ended attempts and claim the next runs, in one transaction."""
        wants = request.limit > 0 and bool(request.queues)
        if not outcomes and not wants:
            return [], []

        def exchange() -> tuple[list[bool], list[ClaimedRun], set[str]]:
            nudges: set[str] = set()
            with self._write(durable=False, wake=nudges) as conn:
                done = self._complete_in(conn, outcomes, now, nudges)
                claimed = self._claim_in(conn, request, now, nudges) if wants else []
            return done, claimed, nudges

        done, claimed, nudges = await self._call(exchange, inline="write")
        await self._nudge(nudges)
        return done, claimed

    def _claim_in(
        self, conn: sqlite3.Connection, request: ClaimRequest, now: float, nudges: set[str]
    ) -> list[ClaimedRun]:
        conn.execute(q.PROMOTE_DUE, {"now": now})
        rows = self._overlap(conn, self._pick(conn, request), now, nudges)
        if not rows:
            return []
        first = _sequence(conn, "attempts") + 1
        conn.executemany(
            q.INSERT_ATTEMPT, [(row[0], row[1] + 1, request.worker_id, now) for row in rows]
        )
        expires = now + request.lease_seconds
        conn.executemany(
            q.START_RUN,
            [(request.worker_id, expires, first + i, now, row[0]) for i, row in enumerate(rows)],
        )
        ids = json.dumps([row[0] for row in rows])
        payload = {r[0]: (r[1], r[2]) for r in conn.execute(q.PAYLOADS, (ids,))}
        claimed = []
        for i, (run_id, _, used, task, queue, max_attempts, timeout, eta, *_) in enumerate(rows):
            args, kwargs = payload.get(run_id, ("[]", "{}"))
            claimed.append(
                ClaimedRun(
                    run_id=run_id,
                    attempt_id=first + i,
                    attempt=used + 1,
                    task=task,
                    queue=queue,
                    args_json=args,
                    kwargs_json=kwargs,
                    max_attempts=max_attempts,
                    timeout=timeout,
                    eta=eta,
                )
            )
        return claimed

    def _overlap(
        self, conn: sqlite3.Connection, rows: list[Row], now: float, nudges: set[str]
    ) -> list[Row]:
        """Apply job overlap policies (:func:`.logic.overlap_decisions`) to picked rows;
        ``queue`` runs whose key is busy were not even selected."""
        keys = {row[8] for row in rows if row[8] is not None}
        if not keys:
            return rows
        busy: dict[str, list[int]] = {}
        for key, run_id in conn.execute(q.ACTIVE_KEYS, (json.dumps(sorted(keys)),)):
            busy.setdefault(key, []).append(run_id)
        kept, skipped_rows, cancel = overlap_decisions(rows, busy, lambda r: (r[8], r[9]))
        skipped = [row[0] for row in skipped_rows]
        for run_id in cancel:
            conn.execute(q.CANCEL_RUNNING, {"id": run_id, "now": now})
        if cancel:
            nudges.update(wakeups(RunState.CANCELLING))
        if skipped:
            conn.executemany(q.SKIP_RUN, [{"id": run_id, "now": now} for run_id in skipped])
            self._jobs_runs_ended(conn, skipped, now, nudges)
        return kept

    def _pick(self, conn: sqlite3.Connection, request: ClaimRequest) -> list[Row]:
        """Each queue's share first, then what is left to the queues that had more."""
        picked: list[Row] = []
        full = []
        for share in request.queues:
            rows = conn.execute(
                q.SELECT_READY,
                {
                    "queue": share.name,
                    "worker": request.worker_id,
                    "limit": share.limit,
                    "offset": 0,
                },
            ).fetchall()
            picked.extend(rows)
            if len(rows) == share.limit:
                full.append(share)
        for share in full:
            left = request.limit - len(picked)
            if left <= 0:
                break
            picked.extend(
                conn.execute(
                    q.SELECT_READY,
                    {
                        "queue": share.name,
                        "worker": request.worker_id,
                        "limit": left,
                        "offset": share.limit,
                    },
                ).fetchall()
            )
        return picked[: request.limit]

    # -- complete ------------------------------------------------------------------------------
    async def complete(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Record ended attempts in one transaction, each fenced by its attempt id."""
        if not outcomes:
            return []
        done, _ = await self.complete_and_claim(outcomes, _NO_CLAIM, now)
        return done

    def _complete_in(
        self, conn: sqlite3.Connection, outcomes: Sequence[Outcome], now: float, nudges: set[str]
    ) -> list[bool]:
        if not outcomes:
            return []
        runs: list[dict[str, Any]] = []
        attempts: list[dict[str, Any]] = []
        done: list[bool] = []
        ended_jobs: list[int] = []
        ids = json.dumps([o.run_id for o in outcomes])
        held = {row[0]: row for row in conn.execute(q.HELD, (ids,))}
        for outcome in outcomes:
            row = held.pop(outcome.run_id, None)
            if row is None or row[1] != outcome.attempt_id:
                done.append(False)
                continue
            change = finish(RunState(row[2]), outcome, row[3], now)
            nudges.update(wakeups(change.state, row[5]))
            if row[4] is not None and change.state.terminal:
                ended_jobs.append(outcome.run_id)
            runs.append(_finish_params(outcome.run_id, outcome.attempt_id, change, now))
            attempts.append(_attempt_params(outcome, now))
            done.append(True)
        conn.executemany(q.FINISH_RUN, runs)
        conn.executemany(q.FINISH_ATTEMPT, attempts)
        self._jobs_runs_ended(conn, ended_jobs, now, nudges)
        return done

    def _jobs_runs_ended(
        self, conn: sqlite3.Connection, run_ids: Sequence[int], now: float, nudges: set[str]
    ) -> None:
        """Job runs reached an end: ``after`` jobs plan their next fire, children fire."""
        if not run_ids:
            return
        rows = conn.execute(q.JOB_RUN_STATES, (json.dumps(list(run_ids)),)).fetchall()
        ended = [(job_id, RunState(state)) for job_id, state in rows]
        if sqlite_jobs.runs_ended(conn, ended, now, insert_runs):
            nudges.update((JOBS_CHANNEL, RUNS_CHANNEL))

    # -- leases --------------------------------------------------------------------------------
    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew every lease the worker holds, in one statement."""

        def beat() -> list[HeldAttempt]:
            with self._write(durable=False) as conn:
                rows = conn.execute(
                    q.RENEW_LEASES, {"expires": now + lease_seconds, "worker": worker_id}
                ).fetchall()
                conn.execute(q.WORKER_SEEN, {"now": now, "worker": worker_id})
            return [
                HeldAttempt(
                    run_id=r[0], attempt_id=r[1], cancelling=holds_cancelling(RunState(r[2]))
                )
                for r in rows
            ]

        return await self._call(beat, inline="write")

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Requeue the runs of expired leases; a run lost ``max_lost`` times becomes dead."""
        reaped, nudges = await self._call(self._reap, now, max_lost)
        await self._nudge(nudges)
        return reaped

    def _reap(self, now: float, max_lost: int) -> tuple[list[int], set[str]]:
        nudges: set[str] = set()
        with self._write(durable=False, wake=nudges) as conn:
            rows = conn.execute(q.EXPIRED, {"now": now, "limit": _REAP_BATCH}).fetchall()
            runs, attempts, ended = [], [], []
            for run_id, attempt_id, state, lost, eta, job_id in rows:
                change, outcome = lease_lost(
                    run_id, attempt_id, RunState(state), lost, max_lost, eta, now
                )
                nudges.update(wakeups(change.state))
                if change.state.terminal and job_id is not None:
                    ended.append(run_id)
                runs.append(_finish_params(run_id, attempt_id, change, now))
                attempts.append(_attempt_params(outcome, now))
            conn.executemany(q.FINISH_RUN, runs)
            conn.executemany(q.FINISH_ATTEMPT, attempts)
            self._jobs_runs_ended(conn, ended, now, nudges)
        return [r[0] for r in rows], nudges

    async def age_retries(self, now: float, after: float) -> int:
        """Promote retries that waited ``after`` seconds to the fresh lane."""

        def age() -> int:
            with self._write(durable=False) as conn:
                return conn.execute(q.AGE_RETRIES, {"cutoff": now - after}).rowcount

        return await self._call(age)

    # -- commands ------------------------------------------------------------------------------
    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a waiting run at once, or ask a running one to stop."""

        def cancel() -> tuple[RunState, set[str]]:
            nudges: set[str] = set()
            with self._write(wake=nudges) as conn:
                row = conn.execute(q.RUN_STATE, (run_id,)).fetchone()
                if row is None:
                    raise RunNotFoundError(f"no run has id {run_id}")
                old = RunState(row[0])
                new = cancel_state(run_id, old)
                if new is not old:
                    finished = now if new.terminal else None
                    conn.execute(q.SET_STATE, (new.value, now, finished, run_id, old.value))
                nudges.update(wakeups(new))
                if new.terminal and row[1] is not None:
                    self._jobs_runs_ended(conn, [run_id], now, nudges)
            return new, nudges

        state, nudges = await self._call(cancel, inline="write")
        await self._nudge(nudges)
        return state

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead (or cancelled, when named) runs again, with a fresh retry budget."""

        def requeue() -> list[int]:
            with self._write(wake=True) as conn:
                if run_ids is None:
                    rows = conn.execute(q.REQUEUE_ALL_DEAD, {"now": now}).fetchall()
                else:
                    params = {"now": now, "ids": json.dumps(list(run_ids))}
                    rows = conn.execute(q.REQUEUE_IDS, params).fetchall()
            return sorted(r[0] for r in rows)

        ids = await self._call(requeue)
        if ids:
            await self._nudge(set(wakeups(RunState.QUEUED)))
        return ids

    # -- reads ---------------------------------------------------------------------------------
    async def get_run(self, run_id: int) -> Run:
        """One run by id."""
        row = await self._call(
            lambda: self._db.execute(q.GET_RUN, (run_id,)).fetchone(), inline="read"
        )
        if row is None:
            raise RunNotFoundError(f"no run has id {run_id}")
        return run_from_row(row)

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id."""
        ids = json.dumps(list(run_ids))
        rows = await self._call(lambda: self._db.execute(q.GET_RUNS, (ids,)).fetchall())
        return [run_from_row(row) for row in rows]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Runs matching ``filter``, newest first."""
        where: list[str] = []
        params: list[Any] = []
        if filter.states:
            where.append("r.state IN (SELECT value FROM json_each(?))")
            params.append(json.dumps([s.value for s in filter.states]))
        for column, value in (
            ("r.task", filter.task),
            ("r.queue", filter.queue),
            ("r.job_id", filter.job_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if filter.before_id is not None:
            where.append("r.id < ?")
            params.append(filter.before_id)
        sql = q.LIST_RUNS + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY r.id DESC LIMIT ?"
        params.append(filter.limit)
        rows = await self._call(lambda: self._db.execute(sql, params).fetchall())
        return [run_from_row(row) for row in rows]

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""
        rows = await self._call(lambda: self._db.execute(q.LIST_ATTEMPTS, (run_id,)).fetchall())
        return [attempt_from_row(row) for row in rows]

    async def count_runs(self) -> dict[RunState, int]:
        """How many runs are in each state."""
        rows = await self._call(lambda: self._db.execute(q.COUNT_RUNS).fetchall())
        return {RunState(state): count for state, count in rows}

    async def next_eta(self, queues: Sequence[str]) -> float | None:
        """When the next scheduled run of ``queues`` is due."""
        names = json.dumps(list(queues))
        row = await self._call(
            lambda: self._db.execute(q.NEXT_ETA, (names,)).fetchone(), inline="read"
        )
        return None if row is None or row[0] is None else float(row[0])

    # -- jobs ----------------------------------------------------------------------------------
    async def put_job(
        self, spec: JobSpec, next_fire_at: float | None, now: float, *, create: bool = False
    ) -> Job:
        """Create or replace the job named ``spec.name`` (with ``create``: only create it)."""
        query = sqlite_jobs.INSERT_JOB if create else sqlite_jobs.UPSERT_JOB

        def put() -> Job:
            with self._write(wake=True) as conn:
                if conn.execute(query, job_params(spec, next_fire_at, now)).rowcount == 0:
                    raise JobExistsError(f"a job named {spec.name!r} exists; use update")
                return sqlite_jobs.get_job(conn, spec.name)

        job = await self._call(put)
        await self.notify([JOBS_CHANNEL])
        return job

    async def put_jobs(self, jobs: Sequence[tuple[JobSpec, float | None]], now: float) -> None:
        """Create or replace several jobs in one transaction."""
        rows = [job_params(spec, following, now) for spec, following in jobs]
        if not rows:
            return

        def put() -> None:
            with self._write(wake=True) as conn:
                conn.executemany(sqlite_jobs.UPSERT_JOB, rows)

        await self._call(put)
        await self.notify([JOBS_CHANNEL])

    async def get_job(self, name: str) -> Job:
        """One job by name."""
        return await self._call(sqlite_jobs.get_job, self._db, name, inline="read")

    async def list_jobs(self) -> list[Job]:
        """Every job, by name."""
        rows = await self._call(lambda: self._db.execute(sqlite_jobs.LIST_JOBS).fetchall())
        return [job_from_row(row) for row in rows]

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""

        def update() -> Job:
            with self._write(wake=True) as conn:
                sqlite_jobs.get_job(conn, name)
                conn.execute(sqlite_jobs.SET_PAUSED, (int(paused), next_fire_at, now, name))
                return sqlite_jobs.get_job(conn, name)

        job = await self._call(update)
        await self.notify([JOBS_CHANNEL])
        return job

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing; they are kept."""

        def disable() -> list[str]:
            with self._write() as conn:
                rows = conn.execute(sqlite_jobs.DISABLE, (now, json.dumps(list(names))))
                return sorted(r[0] for r in rows)

        return await self._call(disable)

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""

        def delete() -> None:
            with self._write() as conn:
                if conn.execute(sqlite_jobs.DELETE, (name,)).fetchone() is None:
                    raise JobNotFoundError(f"no job named {name!r}")

        await self._call(delete)

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs due by ``until``, earliest first (through the ``jobs_due`` index)."""
        rows = await self._call(
            lambda: self._db.execute(sqlite_jobs.DUE_JOBS, (until, limit)).fetchall(),
            inline="read",
        )
        return [job_from_row(row) for row in rows]

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction, each by compare-and-set of its job's next fire."""
        if not fires:
            return []

        def apply() -> list[bool]:
            with self._write(wake=True) as conn:
                return sqlite_jobs.fire(conn, fires, now, insert_runs)

        done = await self._call(apply, inline="write" if len(fires) <= _INLINE_BATCH else "")
        if any(done):
            await self.notify([RUNS_CHANNEL])
        return done

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""
        row = await self._call(
            lambda: self._db.execute(sqlite_jobs.NEXT_FIRE).fetchone(), inline="read"
        )
        return None if row is None or row[0] is None else float(row[0])

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar."""

        def put() -> None:
            with self._write() as conn:
                conn.execute(sqlite_jobs.CLEAR_CALENDAR, (name,))
                conn.executemany(sqlite_jobs.PUT_DAY, [(name, day) for day in days])

        await self._call(put)
        await self.notify([JOBS_CHANNEL])

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""
        rows = await self._call(lambda: self._db.execute(sqlite_jobs.CALENDARS).fetchall())
        calendars: dict[str, set[str]] = {}
        for name, day in rows:
            calendars.setdefault(name, set()).add(day)
        return {name: frozenset(days) for name, days in calendars.items()}

    # -- workers -------------------------------------------------------------------------------
    async def register_worker(self, worker: WorkerInfo) -> None:
        """Add or replace a worker in the registry."""
        row = (
            worker.id,
            worker.host,
            worker.pid,
            json.dumps(list(worker.queues)),
            json.dumps(list(worker.labels)),
            worker.concurrency,
            worker.version,
            worker.started_at,
            worker.heartbeat_at,
            worker.state.value,
        )

        def register() -> None:
            with self._write(durable=False) as conn:
                conn.execute(q.UPSERT_WORKER, row)

        await self._call(register)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""

        def update() -> None:
            with self._write(durable=False) as conn:
                conn.execute(q.SET_WORKER_STATE, (state.value, now, worker_id))

        await self._call(update)

    async def prune_workers(self, silent_since: float) -> list[str]:
        """Delete the rows of workers silent since before ``silent_since`` and holding no run."""

        def prune() -> list[str]:
            with self._write(durable=False) as conn:
                return [row[0] for row in conn.execute(q.PRUNE_WORKERS, (silent_since,))]

        return await self._call(prune)

    async def list_workers(self, now: float, lease_seconds: float) -> list[WorkerInfo]:
        """Registered workers, with their running runs; silent ones are reported lost."""

        def read() -> tuple[list[Row], list[Row]]:
            return (
                self._db.execute(q.LIST_WORKERS).fetchall(),
                self._db.execute(q.RUNNING_BY_OWNER).fetchall(),
            )

        rows, running = await self._call(read)
        by_owner: dict[str, list[int]] = {}
        for owner, run_id in running:
            by_owner.setdefault(owner, []).append(run_id)
        workers = []
        for row in rows:
            state = worker_state(WorkerState(row[9]), row[8], now - lease_seconds)
            workers.append(
                WorkerInfo(
                    id=row[0],
                    host=row[1],
                    pid=row[2],
                    queues=tuple(json.loads(row[3])),
                    labels=tuple(json.loads(row[4])),
                    concurrency=row[5],
                    version=row[6],
                    started_at=row[7],
                    heartbeat_at=row[8],
                    state=state,
                    running=tuple(sorted(by_owner.get(row[0], ()))),
                )
            )
        return workers

    # -- wake-ups ------------------------------------------------------------------------------
    async def listen(self, channels: Sequence[str]) -> Listener:
        """Receive nudges for ``channels`` from this and other processes."""
        listener = self._hub.add(channels)
        wanted = frozenset(self._hub.channels())
        if wanted != self._registered:
            self._registered = wanted
            row = (self._hub.address, self._hub.pid, ",".join(sorted(wanted)), time.time())

            def register() -> None:
                with self._write(durable=False) as conn:
                    conn.execute(q.REGISTER_WAKEUP, row)

            await self._call(register)
        return listener

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake this process's listeners directly and nudge the other processes' sockets."""
        self._hub.wake_local(channels)
        if time.monotonic() - self._wakeups_read > _WAKEUP_CACHE_SECONDS:
            self._wakeups = await self._call(lambda: _wakeups(self._db))
            self._wakeups_read = time.monotonic()
        wanted = set(channels)
        targets = [address for address, chans in self._wakeups if chans & wanted]
        gone = self._hub.send(targets, channels)
        if gone:
            self._wakeups = [w for w in self._wakeups if w[0] not in gone]

            def forget() -> None:
                with self._write(durable=False) as conn:
                    conn.executemany(q.DELETE_WAKEUP, [(a,) for a in gone])

            await self._call(forget)

    def _forget_wakeup(self) -> None:
        with self._write(durable=False) as conn:
            conn.execute(q.DELETE_WAKEUP, (self._hub.address,))


# -- rows ----------------------------------------------------------------------------------------
def insert_runs(conn: sqlite3.Connection, runs: Sequence[NewRun], now: float) -> list[Deferred]:
    """Insert runs and their payloads; a known idempotency key or (job, fire) returns its run.

    Plain runs go in with one ``executemany``, their ids read from ``sqlite_sequence`` (the
    write lock makes them consecutive); keyed ones one at a time, to learn which were new.
    """
    out: list[Deferred | None] = [None] * len(runs)
    payloads: list[tuple[int, str, str]] = []
    plain = [i for i, run in enumerate(runs) if run.idempotency_key is None and run.job_id is None]
    if plain:
        first = _sequence(conn, "runs") + 1
        conn.executemany(q.INSERT_RUN, [_run_row(runs[i], now) for i in plain])
        if _sequence(conn, "runs") != first + len(plain) - 1:
            raise StoreError("run ids were not consecutive inside one transaction")
        for offset, i in enumerate(plain):
            out[i] = Deferred(id=first + offset, created=True)
            payloads.append((first + offset, runs[i].args_json, runs[i].kwargs_json))
    for i, run in enumerate(runs):
        if out[i] is not None:
            continue
        row = conn.execute(q.INSERT_KEYED_RUN, _run_row(run, now)).fetchone()
        if row is not None:
            out[i] = Deferred(id=row[0], created=True)
            payloads.append((row[0], run.args_json, run.kwargs_json))
            continue
        if run.idempotency_key is not None:
            existing = conn.execute(q.RUN_BY_KEY, (run.idempotency_key,)).fetchone()
        else:
            existing = conn.execute(q.RUN_BY_FIRE, (run.job_id, run.fire_at)).fetchone()
        out[i] = Deferred(id=existing[0], created=False)
    conn.executemany(q.INSERT_PAYLOAD, payloads)
    return [d for d in out if d is not None]


def _wakeups(conn: sqlite3.Connection) -> list[tuple[str, frozenset[str]]]:
    return [(a, frozenset(c.split(","))) for a, c in conn.execute(q.LIST_WAKEUPS)]


def _sequence(conn: sqlite3.Connection, table: str) -> int:
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
    return int(row[0]) if row else 0


def _run_row(run: NewRun, now: float) -> tuple[Any, ...]:
    return (
        run.task,
        run.queue,
        initial_state(run.eta, now).value,
        run.priority,
        run.eta,
        run.max_attempts,
        run.timeout,
        run.idempotency_key,
        run.target_worker,
        run.route_key,
        run.job_id,
        run.fire_at,
        run.concurrency_key,
        run.overlap.value,
        now,
        now,
    )


def _finish_params(run_id: int, attempt_id: int, change: Finish, now: float) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "attempt_id": attempt_id,
        "state": change.state.value,
        "eta": change.eta,
        "lane": int(change.lane),
        "used": change.used,
        "lost": change.lost,
        "now": now,
        "finished_at": change.finished_at,
    }


def _attempt_params(outcome: Outcome, now: float) -> dict[str, Any]:
    error = outcome.error
    return {
        "attempt_id": outcome.attempt_id,
        "now": now,
        "outcome": outcome.outcome.value,
        "result": outcome.result_json,
        "error_type": error.type if error else None,
        "error_message": error.message if error else None,
        "traceback": error.traceback if error else None,
        "logs": outcome.logs or None,
    }
