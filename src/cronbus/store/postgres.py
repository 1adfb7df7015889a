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
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.abc import Params, QueryNoTemplate
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from ..errors import (
    InvalidTransitionError,
    JobNotFoundError,
    RunNotFoundError,
    StoreError,
    StoreURLError,
)
from ..model import (
    Attempt,
    ClaimedRun,
    ClaimRequest,
    Deferred,
    ErrorInfo,
    Fire,
    Job,
    JobSpec,
    Lane,
    NewRun,
    Outcome,
    Run,
    RunFilter,
    WorkerInfo,
    WorkerState,
)
from ..states import ACTIVE, AttemptOutcome, RunEvent, RunState, sources, transition
from ..triggers import trigger_from_spec
from . import migrations
from . import postgres_sql as q
from .base import CONTROL_CHANNEL, JOBS_CHANNEL, RUNS_CHANNEL, HeldAttempt, Listener
from .common import LEASE_EXPIRED, finish, job_run, overlap_decisions
from .rows import attempt_from_row, job_from_row, job_params, run_from_row
from .wake import WakeHub

log = logging.getLogger("cronbus.store")
Row = tuple[Any, ...]
Conn = AsyncConnection[TupleRow]
Cursor = AsyncCursor[TupleRow]

DEFAULT_SCHEMA = "cronbus"
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_URL_OPTIONS = ("schema", "statement_timeout", "pool_min", "pool_max")
_REAP_BATCH = 1000
_CONNECT_TIMEOUT = 10
_KEY_LOCK_SPACE = 0x63627573
"""First key of the advisory locks on concurrency keys ('cbus'), apart from other users'."""
_NO_CLAIM = ClaimRequest(worker_id="", queues=(), limit=0, lease_seconds=0.0)
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


# -- the URL -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresOptions:
    """A ``postgresql://`` store URL, split into libpq's connection string and cronbus's options.

    ``statement_timeout`` (seconds, 0 for none) also bounds how long a transaction may sit idle,
    so a stalled process cannot hold claimed rows locked.
    """

    conninfo: str
    schema: str = DEFAULT_SCHEMA
    statement_timeout: float = 30.0
    pool_min: int = 1
    pool_max: int = 10

    @property
    def where(self) -> str:
        """Host, database and schema, for messages (never the password)."""
        params = conninfo_to_dict(self.conninfo)
        host = params.get("host") or "localhost"
        port = params.get("port") or 5432
        return f"{host}:{port}/{params.get('dbname') or '?'} (schema {self.schema})"


def parse_url(url: str) -> PostgresOptions:
    """Read a ``postgresql://`` (or ``postgres://``) store URL; libpq's options pass through."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("postgresql", "postgres"):
        raise StoreURLError(f"store URL {url!r} is not a postgresql://user@host/db URL")
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _URL_OPTIONS:
            ours[key] = value
        else:
            theirs.append((key, value))
    conninfo = urlunsplit(parts._replace(query=urlencode(theirs)))
    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise StoreURLError(f"store URL {url!r}: {str(exc).strip()}") from None
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA.fullmatch(schema):
        raise StoreURLError(
            f"store URL {url!r}: schema={schema!r} must be 1-63 lower-case letters, digits "
            "or _, not starting with a digit"
        )
    pool_min = _url_int(url, ours, "pool_min", 1)
    pool_max = _url_int(url, ours, "pool_max", max(10, pool_min))
    if pool_max < pool_min:
        raise StoreURLError(f"store URL {url!r}: pool_max must be at least pool_min")
    return PostgresOptions(
        conninfo=conninfo,
        schema=schema,
        statement_timeout=_url_seconds(url, ours, "statement_timeout", 30.0),
        pool_min=pool_min,
        pool_max=pool_max,
    )


def _url_seconds(url: str, options: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(options.get(name, default))
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise StoreURLError(f"store URL {url!r}: {name} must be seconds (0 for none)")
    return value


def _url_int(url: str, options: Mapping[str, str], name: str, default: int) -> int:
    try:
        value = int(options.get(name, default))
    except ValueError:
        value = 0
    if value < 1:
        raise StoreURLError(f"store URL {url!r}: {name} must be a whole number of at least 1")
    return value


def _session_conninfo(options: PostgresOptions) -> str:
    """The connection string with the store's schema and timeouts as session settings."""
    params = conninfo_to_dict(options.conninfo)
    settings = [str(params.get("options") or ""), f"-c search_path={options.schema}"]
    if options.statement_timeout > 0:
        ms = max(1, round(options.statement_timeout * 1000))
        settings += [f"-c statement_timeout={ms}", f"-c idle_in_transaction_session_timeout={ms}"]
    extra: dict[str, Any] = {"options": " ".join(s for s in settings if s)}
    if not params.get("application_name"):
        extra["application_name"] = "cronbus"
    if not params.get("connect_timeout"):
        # libpq waits for ever on a host that drops packets.
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    return make_conninfo(options.conninfo, **extra)


# -- the store -----------------------------------------------------------------------------------
class PostgresStore:
    """A :class:`~cronbus.store.base.Store` on PostgreSQL (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.options = parse_url(url)
        self._conninfo = _session_conninfo(self.options)
        self._where = self.options.where
        self._wait = self.options.statement_timeout or 30.0
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._checking: asyncio.Task[None] | None = None
        self._hub = _LocalHub()
        self._token = uuid.uuid4().hex
        self._listening: _Listening | None = None

    @property
    def schema(self) -> str:
        """The schema that holds the store's tables."""
        return self.options.schema

    # -- lifecycle -----------------------------------------------------------------------------
    async def open(self) -> None:
        """Apply pending migrations (under an advisory lock), then open the connection pool."""
        if self._pool is not None:
            return
        await self._migrate()
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            min_size=self.options.pool_min,
            max_size=self.options.pool_max,
            kwargs={"autocommit": True},
            open=False,
            timeout=self._wait,
            name="cronbus",
        )
        try:
            await pool.open(wait=True, timeout=self._wait)
        except psycopg.Error as exc:
            await pool.close()
            raise StoreError(f"cannot connect to PostgreSQL store {self._where}: {exc}") from exc
        self._pool = pool

    async def close(self) -> None:
        """Stop listening and close the pool."""
        if self._listening is not None:
            await self._listening.close()
            self._listening = None
        self._hub.close()
        if self._checking is not None:
            self._checking.cancel()
            await _stopped(self._checking)
            self._checking = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            # Its worker tasks may have been cancelled by a shutdown that cancels every task.
            await _stopped(pool.close())

    async def schema_version(self) -> int:
        """The newest migration applied."""
        row = await self._one(q.SCHEMA_VERSION)
        return int(row[0]) if row else 0

    async def _migrate(self) -> None:
        try:
            conn = await AsyncConnection.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL store {self._where}: {_describe(exc)}"
            ) from exc
        try:
            async with conn, conn.transaction():
                await conn.execute(q.MIGRATION_LOCK, (_lock_key(self.schema),))
                await conn.execute(sql.SQL(q.CREATE_SCHEMA).format(sql.Identifier(self.schema)))
                await conn.execute(q.CREATE_MIGRATIONS)
                row = await (await conn.execute(q.SCHEMA_VERSION)).fetchone()
                current = int(row[0]) if row else 0
                for migration in _pending(migrations.load("postgres"), current):
                    await conn.execute(migration.sql)
                    await conn.execute(q.RECORD_MIGRATION, (migration.version, migration.name))
        except psycopg.Error as exc:
            raise StoreError(
                f"PostgreSQL store {self._where}: migrating the schema failed: {_describe(exc)}"
            ) from exc

    # -- connections and transactions ----------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; database errors come out as :class:`StoreError`."""
        if self._pool is None:
            raise StoreError("the store is not open; use `async with app:` or `with app:`")
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self._check_pool()
            raise StoreError(f"PostgreSQL store {self._where}: {_describe(exc)}") from exc

    @contextlib.asynccontextmanager
    async def _transaction(self, *, durable: bool = True) -> AsyncIterator[_Tx]:
        """A pipelined transaction; its wake-ups are sent with the commit, and after it here.

        ``durable`` transactions (defers, fires, commands: users are told they happened) wait
        for the server's disk at commit; the others (claims, completions, reaping) do not: a
        server crash may lose the last moment of them, which only repeats an attempt, as
        at-least-once execution allows (the SQLite store relaxes the same ones). Those also
        keep their statements' generic plans: their array parameters make the planner plan
        every call anew (a millisecond for a claim) for the same index scans.
        """
        async with self._connection() as conn:
            tx = _Tx(conn)
            try:
                async with conn.pipeline():
                    await conn.execute(q.BEGIN)
                    if not durable:
                        await conn.execute(q.RELAXED)
                    yield tx
                    if tx.nudges:
                        await conn.execute(q.NOTIFY, self._notify_params(tx.nudges))
                    await conn.execute(q.COMMIT)
            except Exception:
                await _rollback(conn)
                raise
        self._hub.wake_local(tx.nudges)

    async def _rows(self, query: QueryNoTemplate, params: Params | None = None) -> list[Row]:
        """One statement on its own (autocommit: one round trip)."""
        async with self._connection() as conn:
            return await (await conn.execute(query, params)).fetchall()

    async def _one(self, query: QueryNoTemplate, params: Params | None = None) -> Row | None:
        rows = await self._rows(query, params)
        return rows[0] if rows else None

    async def _execute(self, query: QueryNoTemplate, params: Params | None = None) -> int:
        """One statement without rows; returns how many rows it changed."""
        async with self._connection() as conn:
            return (await conn.execute(query, params)).rowcount

    def _check_pool(self) -> None:
        """After a connection error, test the idle connections (a restarted server broke all
        of them) so the next calls get working ones instead of failing one by one."""
        if self._pool is None or (self._checking is not None and not self._checking.done()):
            return

        async def check(pool: AsyncConnectionPool[Conn]) -> None:
            with contextlib.suppress(Exception):
                await pool.check()

        self._checking = asyncio.get_running_loop().create_task(check(self._pool))

    # -- defer ---------------------------------------------------------------------------------
    async def defer(self, runs: Sequence[NewRun], now: float) -> list[Deferred]:
        """Create runs in one transaction (one round trip); a known key returns its run."""
        if not runs:
            return []
        async with self._transaction() as tx:
            inserting = await self._insert_runs(tx, runs, now)
            tx.nudges.add(RUNS_CHANNEL)
        return await self._deferred(inserting, runs)

    async def _insert_runs(self, tx: _Tx, runs: Sequence[NewRun], now: float) -> Cursor:
        keyed = any(run.idempotency_key is not None or run.job_id is not None for run in runs)
        query = q.INSERT_KEYED_RUNS if keyed else q.INSERT_RUNS
        return await tx.queue(query, _run_params(runs, now))

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
        row = await self._one(q.RUN_BY_KEY_OR_FIRE, params)
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
        eligible = _first_per_run(outcomes)
        async with self._transaction(durable=False) as tx:
            completing = await self._queue_complete(tx, eligible, now)
            picking = await self._queue_pick(tx, request, now) if wants else None
            ended = await completing.fetchall() if completing else []
            picks = [_Pick(*row) for row in await picking.fetchall()] if picking else []
            await self._completed(tx, ended, now)
            picks = await self._apply_overlap(tx, picks, now)
            starting = await self._queue_start(tx, picks, request, now)
        claimed = _claimed(picks, await starting.fetchall()) if starting else []
        return _fenced(outcomes, ended), claimed

    async def _queue_complete(
        self, tx: _Tx, outcomes: Sequence[Outcome], now: float
    ) -> Cursor | None:
        if not outcomes:
            return None
        return await tx.queue(q.COMPLETE, _complete_params(outcomes, now))

    async def _queue_pick(self, tx: _Tx, request: ClaimRequest, now: float) -> Cursor:
        await tx.queue(q.PROMOTE_DUE, {"now": now})
        params = {
            "queues": [share.name for share in request.queues],
            "limits": [share.limit for share in request.queues],
            "limit": request.limit,
            "worker": request.worker_id,
        }
        return await tx.queue(q.PICK, params)

    async def _queue_start(
        self, tx: _Tx, picks: Sequence[_Pick], request: ClaimRequest, now: float
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

    async def _completed(self, tx: _Tx, ended: Sequence[Row], now: float) -> None:
        """Wake-ups and job follow-ups of the attempts that ended (rows of ``COMPLETE``)."""
        triggers: dict[int, str] = {}
        parents: list[int] = []
        for _, _, state, job_id, key, has_children, after_trigger in ended:
            new = RunState(state)
            # A retry changes the earliest due time that idle workers sleep towards, and runs
            # queued behind a key wait for this one to end.
            if new in (RunState.QUEUED, RunState.SCHEDULED) or key is not None:
                tx.nudges.add(RUNS_CHANNEL)
            if job_id is not None and new.terminal:
                if after_trigger is not None:
                    triggers[job_id] = after_trigger
                if new is RunState.SUCCEEDED and has_children:
                    parents.append(job_id)
        await self._jobs_runs_ended(tx, triggers, parents, now)

    async def _apply_overlap(self, tx: _Tx, picks: list[_Pick], now: float) -> list[_Pick]:
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
            tx.nudges.add(CONTROL_CHANNEL)
        if skipped:
            await tx.queue(q.SKIP_RUNS, {"ids": [p.id for p in skipped], "now": now})
            ended = [p.job_id for p in skipped if p.job_id is not None]
            await self._jobs_runs_ended(tx, await self._after_triggers(tx, ended), [], now)
        return kept

    async def _after_triggers(self, tx: _Tx, job_ids: Sequence[int]) -> dict[int, str]:
        """The triggers of the ``after`` jobs among ``job_ids`` that wait to plan a fire."""
        if not job_ids:
            return {}
        return dict(await tx.rows(q.AFTER_JOBS, (list(job_ids),)))

    async def _jobs_runs_ended(
        self, tx: _Tx, triggers: Mapping[int, str], parents: Sequence[int], now: float
    ) -> None:
        """Job runs ended: ``after`` jobs plan their next fire through their trigger (so its
        start and end bounds hold), and the children of successful runs fire."""
        following = _after_fires(triggers, now)
        if following:
            # By job id, so that transactions planning the same jobs lock them in one order.
            rows = sorted(following.items())
            params = {**_arrays(("job_id", "next_fire_at"), rows), "now": now}
            await tx.queue(q.SET_NEXT_FIRES, params)
            tx.nudges.update((JOBS_CHANNEL, RUNS_CHANNEL))
        if parents:
            children = [job_from_row(row) for row in await tx.rows(q.CHILD_JOBS, (parents,))]
            if children:
                await self._insert_runs(tx, [job_run(job, now, now) for job in children], now)
                tx.nudges.update((JOBS_CHANNEL, RUNS_CHANNEL))

    # -- leases --------------------------------------------------------------------------------
    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew every lease the worker holds, and its registry entry, in one statement."""
        params = {"now": now, "worker": worker_id, "expires": now + lease_seconds}
        return [
            HeldAttempt(run_id=r[0], attempt_id=r[1], cancelling=r[2] == RunState.CANCELLING)
            for r in await self._rows(q.HEARTBEAT, params)
        ]

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Requeue the runs of expired leases; a run lost ``max_lost`` times becomes dead."""
        async with self._transaction(durable=False) as tx:
            rows = await tx.rows(q.EXPIRED, {"now": now, "limit": _REAP_BATCH})
            if rows:
                await self._reap_rows(tx, rows, now, max_lost)
        return [row[0] for row in rows]

    async def _reap_rows(self, tx: _Tx, rows: Sequence[Row], now: float, max_lost: int) -> None:
        changes, attempts, ended = [], [], []
        for run_id, attempt_id, state, lost, eta, job_id in rows:
            new, message = _lost(RunState(state), lost, max_lost)
            if new is RunState.QUEUED:
                tx.nudges.add(RUNS_CHANNEL)
            elif job_id is not None:
                ended.append(job_id)
            due = min(eta, now)
            finished_at = now if new.terminal else None
            changes.append(
                (run_id, attempt_id, state, new.value, due, due, int(Lane.FRESH), 0, 1, finished_at)
            )
            error = ErrorInfo(type=LEASE_EXPIRED, message=message)
            lost_attempt = Outcome(
                run_id=run_id,
                attempt_id=attempt_id,
                outcome=AttemptOutcome.LOST,
                error=error,
                counts=False,
            )
            attempts.append(_attempt_row(lost_attempt))
        await tx.queue(q.COMPLETE, _finish_params(changes, attempts, now))
        await self._jobs_runs_ended(tx, await self._after_triggers(tx, ended), [], now)

    async def age_retries(self, now: float, after: float) -> int:
        """Promote retries that waited ``after`` seconds to the fresh lane."""
        return await self._execute(q.AGE_RETRIES, {"cutoff": now - after})

    # -- commands ------------------------------------------------------------------------------
    async def cancel(self, run_id: int, now: float) -> RunState:
        """Cancel a waiting run at once, or ask a running one to stop."""
        async with self._transaction() as tx:
            rows = await tx.rows(q.RUN_STATE, (run_id,))
            if not rows:
                raise RunNotFoundError(f"no run has id {run_id}")
            old, job_id = RunState(rows[0][0]), rows[0][1]
            if old not in sources(RunEvent.CANCEL):
                raise InvalidTransitionError(f"run {run_id} is {old.value}; it cannot be cancelled")
            new = transition(old, RunEvent.CANCEL)
            if new is not old:
                finished_at = now if new.terminal else None
                params = {"new": new.value, "old": old.value, "id": run_id, "now": now}
                await tx.queue(q.SET_STATE, {**params, "finished_at": finished_at})
            if new is RunState.CANCELLING:
                tx.nudges.add(CONTROL_CHANNEL)
            elif job_id is not None:
                await self._jobs_runs_ended(tx, await self._after_triggers(tx, [job_id]), [], now)
        return new

    async def requeue(self, run_ids: Sequence[int] | None, now: float) -> list[int]:
        """Queue dead (or cancelled, when named) runs again, with a fresh retry budget."""
        async with self._transaction() as tx:
            if run_ids is None:
                rows = await tx.rows(q.REQUEUE_ALL_DEAD, {"now": now})
            else:
                rows = await tx.rows(q.REQUEUE_IDS, {"now": now, "ids": list(run_ids)})
            if rows:
                tx.nudges.add(RUNS_CHANNEL)
        return sorted(row[0] for row in rows)

    # -- reads ---------------------------------------------------------------------------------
    async def get_run(self, run_id: int) -> Run:
        """One run by id."""
        row = await self._one(q.GET_RUN, (run_id,))
        if row is None:
            raise RunNotFoundError(f"no run has id {run_id}")
        return run_from_row(row)

    async def get_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """Several runs by id."""
        return [run_from_row(row) for row in await self._rows(q.GET_RUNS, (list(run_ids),))]

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
        rows = await self._rows(query, [*given.values(), filter.limit])
        return [run_from_row(row) for row in rows]

    async def list_attempts(self, run_id: int) -> list[Attempt]:
        """A run's attempts, oldest first."""
        return [attempt_from_row(row) for row in await self._rows(q.LIST_ATTEMPTS, (run_id,))]

    async def count_runs(self) -> dict[RunState, int]:
        """How many runs are in each state."""
        return {RunState(state): count for state, count in await self._rows(q.COUNT_RUNS)}

    async def next_eta(self, queues: Sequence[str]) -> float | None:
        """When the next scheduled run of ``queues`` is due."""
        row = await self._one(q.NEXT_ETA, (list(queues),))
        return None if row is None or row[0] is None else float(row[0])

    # -- jobs ----------------------------------------------------------------------------------
    async def put_job(self, spec: JobSpec, next_fire_at: float | None, now: float) -> Job:
        """Create or replace the job named ``spec.name``."""
        params = {**job_params(spec, next_fire_at, now), "paused": spec.paused}
        async with self._transaction() as tx:
            putting = await tx.queue(q.UPSERT_JOB, params)
            tx.nudges.add(JOBS_CHANNEL)
        return job_from_row((await putting.fetchall())[0])

    async def get_job(self, name: str) -> Job:
        """One job by name."""
        row = await self._one(q.SELECT_JOB, (name,))
        if row is None:
            raise JobNotFoundError(f"no job named {name!r}")
        return job_from_row(row)

    async def list_jobs(self) -> list[Job]:
        """Every job, by name."""
        return [job_from_row(row) for row in await self._rows(q.LIST_JOBS)]

    async def set_job_paused(
        self, name: str, paused: bool, next_fire_at: float | None, now: float
    ) -> Job:
        """Pause a job, or resume it with its next fire planned anew."""
        params = {"name": name, "paused": paused, "next_fire_at": next_fire_at, "now": now}
        async with self._transaction() as tx:
            rows = await tx.rows(q.SET_PAUSED, params)
            if not rows:
                raise JobNotFoundError(f"no job named {name!r}")
            tx.nudges.add(JOBS_CHANNEL)
        return job_from_row(rows[0])

    async def disable_jobs(self, names: Sequence[str], now: float) -> list[str]:
        """Stop jobs removed from the code from firing; they are kept."""
        return sorted(row[0] for row in await self._rows(q.DISABLE, (now, list(names))))

    async def delete_job(self, name: str) -> None:
        """Delete a job; its runs stay."""
        if not await self._rows(q.DELETE, (name,)):
            raise JobNotFoundError(f"no job named {name!r}")

    async def due_jobs(self, until: float, limit: int) -> list[Job]:
        """Active jobs due by ``until``, earliest first (through the ``jobs_due`` index)."""
        return [job_from_row(row) for row in await self._rows(q.DUE_JOBS, (until, limit))]

    async def fire(self, fires: Sequence[Fire], now: float) -> list[bool]:
        """Apply fires in one transaction, each by compare-and-set of its job's next fire."""
        done = [False] * len(fires)
        if not fires:
            return done
        async with self._transaction() as tx:
            for batch in _rounds(fires):
                plans = [fires[i] for i in batch]
                moved = {row[0] for row in await tx.rows(q.ADVANCE, _advance_params(plans, now))}
                runs: list[NewRun] = []
                for i in batch:
                    if fires[i].job_id in moved:
                        done[i] = True
                        runs.extend(fires[i].runs)
                if runs:
                    await self._insert_runs(tx, runs, now)
            if any(done):
                tx.nudges.add(RUNS_CHANNEL)
        return done

    async def next_job_fire(self) -> float | None:
        """The earliest planned fire of any active job."""
        row = await self._one(q.NEXT_FIRE)
        return None if row is None or row[0] is None else float(row[0])

    async def put_calendar(self, name: str, days: Sequence[str]) -> None:
        """Replace the dates of a named calendar."""
        async with self._transaction() as tx:
            await tx.queue(q.CLEAR_CALENDAR, (name,))
            await tx.queue(q.PUT_DAYS, (name, list(days)))
            tx.nudges.add(JOBS_CHANNEL)

    async def get_calendars(self) -> dict[str, frozenset[str]]:
        """Every calendar, with its dates."""
        calendars: dict[str, set[str]] = {}
        for name, day in await self._rows(q.CALENDARS):
            calendars.setdefault(name, set()).add(day)
        return {name: frozenset(days) for name, days in calendars.items()}

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
        await self._execute(q.UPSERT_WORKER, row)

    async def set_worker_state(self, worker_id: str, state: WorkerState, now: float) -> None:
        """Mark a worker draining or stopped."""
        await self._execute(q.SET_WORKER_STATE, (state.value, now, worker_id))

    async def list_workers(self, now: float, lease_seconds: float) -> list[WorkerInfo]:
        """Registered workers, with their running runs; silent ones are reported lost."""
        return [_worker(row, now - lease_seconds) for row in await self._rows(q.LIST_WORKERS)]

    # -- wake-ups ------------------------------------------------------------------------------
    async def listen(self, channels: Sequence[str]) -> Listener:
        """Receive wake-ups for ``channels``, from this process and (by LISTEN) from others."""
        if self._pool is None:
            raise StoreError("the store is not open; use `async with app:` or `with app:`")
        listener = self._hub.add(channels)
        if self._listening is None:
            self._listening = _Listening(
                _listening_conninfo(self._conninfo),
                names=self._channel_name,
                wake=self._hub.wake_local,
                token=self._token,
                # The listening connection is the first to see a server restart: replace the
                # pool's idle connections before anyone runs into them.
                lost=self._check_pool,
            )
        await self._listening.subscribe(channels)
        return listener

    async def notify(self, channels: Sequence[str]) -> None:
        """Wake this process's listeners directly and the others' by NOTIFY."""
        self._hub.wake_local(channels)
        await self._execute(q.NOTIFY, self._notify_params(channels))

    def _channel_name(self, channel: str) -> str:
        return channel_name(self.schema, channel)

    def _channel_names(self, channels: Iterable[str]) -> list[str]:
        return sorted({self._channel_name(channel) for channel in channels})

    def _notify_params(self, channels: Iterable[str]) -> dict[str, Any]:
        return {"token": self._token, "channels": self._channel_names(channels)}


class _Tx:
    """One pipelined transaction: statements queue up and go with the next read or the commit.

    ``nudges`` are the wake-up channels to NOTIFY with the commit.
    """

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.nudges: set[str] = set()

    async def queue(self, query: QueryNoTemplate, params: Params | None = None) -> Cursor:
        """Queue a statement; read its rows later (a read forces a round trip)."""
        return await self.conn.execute(query, params)

    async def rows(self, query: QueryNoTemplate, params: Params | None = None) -> list[Row]:
        """Run a statement, with everything queued before it, and read its rows now."""
        return await (await self.conn.execute(query, params)).fetchall()


async def _stopped(awaitable: Awaitable[object]) -> None:
    """Await something whose tasks were cancelled, without swallowing our own cancellation."""
    try:
        await awaitable
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def _rollback(conn: Conn) -> None:
    """End a failed transaction, unless the connection is gone (the pool then drops it)."""
    if conn.closed or conn.info.transaction_status not in _IN_TRANSACTION:
        return
    with contextlib.suppress(psycopg.Error):
        await conn.execute(q.ROLLBACK)


def _describe(exc: psycopg.Error) -> str:
    """The first line of a psycopg error, with its SQLSTATE when the server sent one."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return f"{line} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else line


def _pending(known: Sequence[migrations.Migration], current: int) -> list[migrations.Migration]:
    if known and current > known[-1].version:
        raise StoreError(
            f"the store's schema is version {current}, newer than this cronbus knows "
            f"({known[-1].version}); upgrade cronbus"
        )
    return [migration for migration in known if migration.version > current]


def _lock_key(schema: str) -> int:
    """The advisory lock that serialises migrations of one schema."""
    digest = hashlib.blake2b(f"cronbus-migrations:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def channel_name(schema: str, channel: str) -> str:
    """The NOTIFY channel of a wake-up channel in ``schema`` (``cronbus_runs`` by default).

    PostgreSQL truncates longer identifiers, so names over 63 bytes are replaced by a digest.
    """
    name = f"{schema}_{channel}"
    if len(name.encode()) <= 63:
        return name
    return "cronbus_" + hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


# -- claims and completions (pure) ---------------------------------------------------------------
class _Pick(NamedTuple):
    """A candidate run of ``PICK``, locked by the claiming transaction."""

    id: int
    attempts: int
    used: int
    task: str
    queue: str
    max_attempts: int
    timeout: float | None
    eta: float
    concurrency_key: str | None
    overlap: str | None
    job_id: int | None
    args: str | None
    kwargs: str | None


def _claimed(picks: Sequence[_Pick], started: Sequence[Row]) -> list[ClaimedRun]:
    attempt_ids: dict[int, int] = dict(started)
    return [
        ClaimedRun(
            run_id=pick.id,
            attempt_id=attempt_ids[pick.id],
            attempt=pick.used + 1,
            task=pick.task,
            queue=pick.queue,
            args_json=pick.args if pick.args is not None else "[]",
            kwargs_json=pick.kwargs if pick.kwargs is not None else "{}",
            max_attempts=pick.max_attempts,
            timeout=pick.timeout,
            eta=pick.eta,
        )
        for pick in picks
        if pick.id in attempt_ids
    ]


def _first_per_run(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Only the first outcome of a run in a batch may complete it (as in the SQLite store)."""
    seen: set[int] = set()
    first = []
    for outcome in outcomes:
        if outcome.run_id not in seen:
            seen.add(outcome.run_id)
            first.append(outcome)
    return first


def _fenced(outcomes: Sequence[Outcome], ended: Sequence[Row]) -> list[bool]:
    """Which outcomes were recorded: those whose attempt the run still held."""
    held = {(row[0], row[1]) for row in ended}
    seen: set[int] = set()
    done = []
    for outcome in outcomes:
        done.append(outcome.run_id not in seen and (outcome.run_id, outcome.attempt_id) in held)
        seen.add(outcome.run_id)
    return done


def _changes(outcomes: Sequence[Outcome], now: float) -> list[Row]:
    """``COMPLETE``'s rows: each outcome's change of its run from each active state.

    :func:`~cronbus.store.common.finish` keeps a run's eta, caps it (a lost attempt is due now
    at the latest) or replaces it (a retry): a clamp of the current eta, whose bounds are what
    it gives for -inf and +inf. So the database applies it without the run being read first.
    Outcomes alike (a batch of successes) share one computation.
    """
    known: dict[tuple[AttemptOutcome, bool, float | None], list[Row]] = {}
    rows: list[Row] = []
    for outcome in outcomes:
        key = (outcome.outcome, outcome.counts, outcome.retry_at)
        if key not in known:
            known[key] = [_change(source, outcome, now) for source in sorted(ACTIVE)]
        rows.extend((outcome.run_id, outcome.attempt_id, *change) for change in known[key])
    return rows


def _change(source: RunState, outcome: Outcome, now: float) -> Row:
    low = finish(source, outcome, -math.inf, now)
    high = finish(source, outcome, math.inf, now)
    return (
        source.value,
        low.state.value,
        low.eta,
        high.eta,
        int(low.lane),
        low.used,
        low.lost,
        low.finished_at,
    )


def _attempt_row(outcome: Outcome) -> Row:
    error = outcome.error
    return (
        outcome.attempt_id,
        outcome.outcome.value,
        outcome.result_json,
        error.type if error else None,
        error.message if error else None,
        error.traceback if error else None,
        outcome.logs or None,
    )


_CHANGE_COLUMNS = (
    "run_id",
    "attempt_id",
    "source",
    "state",
    "eta_low",
    "eta_high",
    "lane",
    "used",
    "lost",
    "finished_at",
)
_ATTEMPT_COLUMNS = (
    "a_id",
    "a_outcome",
    "a_result",
    "a_error_type",
    "a_error_message",
    "a_traceback",
    "a_logs",
)
_RUN_COLUMNS = (
    "task",
    "queue",
    "state",
    "priority",
    "eta",
    "max_attempts",
    "timeout",
    "idempotency_key",
    "target_worker",
    "route_key",
    "job_id",
    "fire_at",
    "concurrency_key",
    "overlap",
    "args",
    "kwargs",
)


def _arrays(names: Sequence[str], rows: Sequence[Row]) -> dict[str, list[Any]]:
    """Rows as one array per column, for ``unnest``."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return {name: list(column) for name, column in zip(names, columns, strict=True)}


def _complete_params(outcomes: Sequence[Outcome], now: float) -> dict[str, Any]:
    attempts = [_attempt_row(outcome) for outcome in outcomes]
    return _finish_params(_changes(outcomes, now), attempts, now)


def _finish_params(changes: Sequence[Row], attempts: Sequence[Row], now: float) -> dict[str, Any]:
    return {
        **_arrays(_CHANGE_COLUMNS, changes),
        **_arrays(_ATTEMPT_COLUMNS, attempts),
        "now": now,
    }


def _lost(state: RunState, lost: int, max_lost: int) -> tuple[RunState, str]:
    """What a run whose lease expired becomes, and the reason recorded on its attempt."""
    new = transition(state, RunEvent.LOSE)
    message = "the worker holding the lease stopped renewing it"
    if new is RunState.QUEUED and lost + 1 >= max_lost:
        new = RunState.DEAD
        message += f"; lost {lost + 1} times, so the run is dead"
    return new, message


def _run_params(runs: Sequence[NewRun], now: float) -> dict[str, Any]:
    rows = [
        (
            run.task,
            run.queue,
            (RunState.QUEUED if run.eta <= now else RunState.SCHEDULED).value,
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
            run.args_json,
            run.kwargs_json,
        )
        for run in runs
    ]
    return {**_arrays(_RUN_COLUMNS, rows), "now": now}


# -- jobs and workers (pure) ---------------------------------------------------------------------
def _after_fires(triggers: Mapping[int, str], now: float) -> dict[int, float]:
    """The next fires that ``after`` jobs plan when their run ends (none past their end)."""
    following: dict[int, float] = {}
    for job_id, text in triggers.items():
        fire_at = trigger_from_spec(json.loads(text)).next_fire(now)
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
    return {**_arrays(names, rows), "now": now}


def _worker(row: Row, silent_since: float) -> WorkerInfo:
    state = WorkerState(row[9])
    if state is not WorkerState.STOPPED and row[8] < silent_since:
        state = WorkerState.LOST
    return WorkerInfo(
        id=row[0],
        host=row[1],
        pid=row[2],
        queues=tuple(row[3]),
        labels=tuple(row[4]),
        concurrency=row[5],
        version=row[6],
        started_at=row[7],
        heartbeat_at=row[8],
        state=state,
        running=tuple(row[10]),
    )


# -- listening -----------------------------------------------------------------------------------
_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0
_SUBSCRIBE_SECONDS = 10.0
# Notice a silently dead server (no FIN, no RST) within about half a minute.
_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def _listening_conninfo(conninfo: str) -> str:
    params = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in _KEEPALIVES.items() if k not in params})


class _LocalHub(WakeHub):
    """The in-process half of :class:`~cronbus.store.wake.WakeHub`: PostgreSQL carries the
    wake-ups between processes, so no socket is bound."""

    def _bind(self) -> None:
        return None


class _Listening:
    """A store's one LISTEN connection (not from the pool), feeding this process's listeners.

    A supervising task connects, LISTENs on every channel a local listener wants and reads the
    notifications. When the connection breaks (a server restart, a network cut) it reconnects
    with backoff and then wakes every listener, since what was sent meanwhile is lost. psycopg
    holds the connection while it waits for notifications, so a new channel interrupts the
    reading to run its LISTEN.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        names: Callable[[str], str],
        wake: Callable[[Iterable[str]], None],
        token: str,
        lost: Callable[[], None],
    ) -> None:
        self._conninfo = conninfo
        self._names = names
        self._wake = wake
        self._token = token
        self._lost = lost
        self._wanted: set[str] = set()
        self._listening: set[str] = set()
        self._by_name: dict[str, str] = {}
        self._changed = asyncio.Event()
        self._subscribed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def subscribe(self, channels: Iterable[str]) -> None:
        """LISTEN on ``channels``; returns once the server has them (or after a while: polling
        covers the time until the connection is back)."""
        wanted = set(channels)
        if wanted <= self._listening:
            return
        self._wanted |= wanted
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._supervise(), name="cronbus-listen"
            )
        self._changed.set()
        try:
            async with asyncio.timeout(_SUBSCRIBE_SECONDS), self._subscribed:
                await self._subscribed.wait_for(lambda: self._closed or wanted <= self._listening)
        except TimeoutError:
            log.warning(
                "not listening on %s yet; wake-ups fall back to polling until reconnected",
                ", ".join(sorted(wanted)),
            )

    async def close(self) -> None:
        """Stop the supervising task and close the connection."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await _stopped(self._task)
            self._task = None
        async with self._subscribed:
            self._subscribed.notify_all()

    async def _supervise(self) -> None:
        delay, broken = _BACKOFF_FIRST, False
        while True:
            connected = False
            try:
                async with await AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                    connected = True
                    await self._listen(conn)
                    delay = _BACKOFF_FIRST
                    if broken:
                        log.warning("listening again", extra={"action": "store.listen"})
                        # Notifications sent while disconnected are lost: look for work now.
                        self._wake(self._wanted)
                    await self._serve(conn)
            except psycopg.Error as exc:
                what = "listening connection lost" if connected else "cannot connect to listen"
                log.warning(
                    "%s (%s); retrying in %.1fs",
                    what,
                    _describe(exc),
                    delay,
                    extra={"action": "store.listen"},
                )
                if connected:
                    self._lost()
            except Exception:
                # Whatever it was, wake-ups must come back: polling alone is only the safety net.
                log.exception("listening failed; retrying in %.1fs", delay)
            finally:
                self._listening = set()
            broken = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    async def _listen(self, conn: Conn) -> None:
        for channel in sorted(self._wanted - self._listening):
            name = self._names(channel)
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            self._by_name[name] = channel
            self._listening.add(channel)
        async with self._subscribed:
            self._subscribed.notify_all()

    async def _serve(self, conn: Conn) -> None:
        """Read notifications; stop reading to LISTEN when new channels are wanted."""
        while True:
            self._changed.clear()
            await self._listen(conn)
            reader = asyncio.create_task(self._read(conn))
            changed = asyncio.create_task(self._changed.wait())
            try:
                await asyncio.wait((reader, changed), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (reader, changed):
                    task.cancel()
                await asyncio.gather(reader, changed, return_exceptions=True)
            if not reader.cancelled() and (error := reader.exception()) is not None:
                raise error

    async def _read(self, conn: Conn) -> None:
        async for note in conn.notifies():
            channel = self._by_name.get(note.channel)
            if channel is not None and note.payload != self._token:
                self._wake((channel,))
