"""The PostgreSQL connections of a store: its pool, transactions and migrations.

A write is one *pipelined* transaction: statements queue up and travel with the next read or
with the commit. Its wake-ups go as a NOTIFY inside it, which the server delivers at the commit;
this process's own listeners are woken directly after the commit (and ignore their own NOTIFY,
which carries the store's token).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.abc import Params, QueryNoTemplate
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from ...errors import StoreError
from ...observability.hooks import StoreObserver, caller
from .. import migrations
from ..presence import check_readable, not_found
from ..wake import WakeHub
from . import sql as q
from .url import PostgresOptions, session_conninfo

NOT_OPEN = "the store is not open; use `async with app:` or `with app:`"


class Database:
    """The connection pool of one store, on one schema, as the store uses it."""

    def __init__(
        self, options: PostgresOptions, *, hub: WakeHub, token: str, url: str = ""
    ) -> None:
        self.options = options
        self.url = url
        self.conninfo = session_conninfo(options)
        self.where = options.where
        self.hub = hub
        self.token = token
        self._wait = options.statement_timeout or 30.0
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._checking: asyncio.Task[None] | None = None
        self.observer: StoreObserver | None = None
        """Told how long each transaction took (see :mod:`cronbus.observability.hooks`)."""

    @property
    def is_open(self) -> bool:
        """True between :meth:`open` and :meth:`close`."""
        return self._pool is not None

    # -- lifecycle -----------------------------------------------------------------------------
    async def open(self, *, create: bool = True) -> None:
        """Apply pending migrations (unless the URL says ``migrate=false``: then check that
        there are none), then open the connection pool.

        With ``create`` false (commands that only read), the schema must hold an up-to-date
        cronbus store: nothing is created or migrated (:class:`StoreNotFoundError` when the
        schema is missing or holds no cronbus tables).
        """
        if not create:
            versions = await self.schema_versions()
            if versions.current == 0:
                raise not_found(self.url, f"schema {self.options.schema!r} holds no cronbus tables")
            check_readable(versions)
        elif self.options.migrate:
            await self.migrate()
        else:
            migrations.check(await self.schema_versions())
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.conninfo,
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
            raise StoreError(f"cannot connect to PostgreSQL store {self.where}: {exc}") from exc
        self._pool = pool

    async def close(self) -> None:
        """Stop checking the pool and close it."""
        if self._checking is not None:
            self._checking.cancel()
            await stopped(self._checking)
            self._checking = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            # Its worker tasks may have been cancelled by a shutdown that cancels every task.
            await stopped(pool.close())

    # -- migrations ----------------------------------------------------------------------------
    async def schema_versions(self) -> migrations.SchemaVersions:
        """The schema's version and the newest this cronbus knows, changing nothing."""
        async with await self._connect() as conn:
            try:
                exists = await (await conn.execute(q.MIGRATIONS_TABLE)).fetchone()
                row = await (await conn.execute(q.SCHEMA_VERSION)).fetchone() if exists else None
            except psycopg.Error as exc:
                raise StoreError(
                    f"PostgreSQL store {self.where}: reading the schema version failed: "
                    f"{describe(exc)}"
                ) from exc
        known = migrations.load("postgres")
        return migrations.SchemaVersions(
            store=self.name,
            current=int(row[0]) if row else 0,
            latest=known[-1].version if known else 0,
        )

    async def migrate(self, progress: migrations.Step | None = None) -> migrations.Migrated:
        """Apply pending migrations in one transaction, under an advisory lock on the schema,
        so that concurrent migrations (every process opening at once) apply each one once;
        ``progress`` is told ``(applied, pending)`` as they go (still one transaction)."""
        schema = self.options.schema
        conn = await self._connect()
        try:
            async with conn, conn.transaction():
                await conn.execute(q.MIGRATION_LOCK, (_lock_key(schema),))
                await conn.execute(sql.SQL(q.CREATE_SCHEMA).format(sql.Identifier(schema)))
                await conn.execute(q.CREATE_MIGRATIONS)
                row = await (await conn.execute(q.SCHEMA_VERSION)).fetchone()
                current = int(row[0]) if row else 0
                todo = migrations.pending(self.name, migrations.load("postgres"), current)
                for done, migration in enumerate(todo):
                    if progress is not None:
                        progress(done, len(todo))
                    await conn.execute(migration.sql)
                    await conn.execute(q.RECORD_MIGRATION, (migration.version, migration.name))
                if progress is not None and todo:
                    progress(len(todo), len(todo))
        except psycopg.Error as exc:
            raise StoreError(
                f"PostgreSQL store {self.where}: migrating the schema failed: {describe(exc)}"
            ) from exc
        return migrations.Migrated(
            store=self.name,
            before=current,
            after=todo[-1].version if todo else current,
            applied=tuple(f"{m.version:04d}_{m.name}" for m in todo),
        )

    @property
    def name(self) -> str:
        """The store, for messages."""
        return f"PostgreSQL store {self.where}"

    async def _connect(self) -> Conn:
        """A connection of its own, outside the pool."""
        try:
            return await AsyncConnection.connect(self.conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL store {self.where}: {describe(exc)}"
            ) from exc

    # -- connections and transactions ----------------------------------------------------------
    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; database errors come out as :class:`StoreError`."""
        if self._pool is None:
            raise StoreError(NOT_OPEN)
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.check_pool()
            raise StoreError(f"PostgreSQL store {self.where}: {describe(exc)}") from exc

    @contextlib.asynccontextmanager
    async def transaction(self, *, durable: bool = True) -> AsyncIterator[Tx]:
        """A pipelined transaction; its wake-ups are sent with the commit, and after it here.

        ``durable`` transactions (defers, fires, commands: users are told they happened) wait
        for the server's disk at commit; the others (claims, completions, reaping) do not: a
        server crash may lose the last moment of them, which only repeats an attempt, as
        at-least-once execution allows (the SQLite store relaxes the same ones). Those also
        keep their statements' generic plans: their array parameters make the planner plan
        every call anew (a millisecond for a claim) for the same index scans.
        """
        observer = self.observer
        if observer is None:
            async with self._transaction(durable) as tx:
                yield tx
            return
        # Three frames up: this generator, contextlib's __aenter__, the store method.
        op, start = caller(2), time.perf_counter()
        try:
            async with self._transaction(durable) as tx:
                yield tx
        finally:
            observer.transaction(op, time.perf_counter() - start)

    @contextlib.asynccontextmanager
    async def _transaction(self, durable: bool) -> AsyncIterator[Tx]:
        async with self.connection() as conn:
            tx = Tx(conn)
            try:
                async with conn.pipeline():
                    await conn.execute(q.BEGIN)
                    if not durable:
                        await conn.execute(q.RELAXED)
                    yield tx
                    if tx.nudges:
                        await conn.execute(q.NOTIFY, self.notify_params(tx.nudges))
                    await conn.execute(q.COMMIT)
            except Exception:
                await rollback(conn)
                raise
        self.hub.wake_local(tx.nudges)

    async def rows(
        self, query: QueryNoTemplate, params: Params | None = None, *, prepare: bool | None = None
    ) -> list[Row]:
        """One statement on its own (autocommit: one round trip). ``prepare=False`` plans it
        for its parameters every time (never a generic plan), as psycopg's ``execute``."""
        async with self.connection() as conn:
            return await (await conn.execute(query, params, prepare=prepare)).fetchall()

    async def one(self, query: QueryNoTemplate, params: Params | None = None) -> Row | None:
        """The first row of one statement on its own, if any."""
        rows = await self.rows(query, params)
        return rows[0] if rows else None

    async def execute(self, query: QueryNoTemplate, params: Params | None = None) -> int:
        """One statement without rows; returns how many rows it changed."""
        async with self.connection() as conn:
            return (await conn.execute(query, params)).rowcount

    def check_pool(self) -> None:
        """After a connection error, test the idle connections (a restarted server broke all
        of them) so the next calls get working ones instead of failing one by one."""
        if self._pool is None or (self._checking is not None and not self._checking.done()):
            return

        async def check(pool: AsyncConnectionPool[Conn]) -> None:
            with contextlib.suppress(Exception):
                await pool.check()

        self._checking = asyncio.get_running_loop().create_task(check(self._pool))

    # -- wake-ups ------------------------------------------------------------------------------
    def channel_name(self, channel: str) -> str:
        """The NOTIFY channel of a wake-up channel in this store's schema."""
        return channel_name(self.options.schema, channel)

    def notify_params(self, channels: Iterable[str]) -> dict[str, Any]:
        """``NOTIFY``'s parameters: the channels, and this store's token as the payload."""
        names = sorted({self.channel_name(channel) for channel in channels})
        return {"token": self.token, "channels": names}


def _lock_key(schema: str) -> int:
    """The advisory lock that serialises migrations of one schema."""
    digest = hashlib.blake2b(f"cronbus-migrations:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


Row = tuple[Any, ...]
Conn = AsyncConnection[TupleRow]
Cursor = AsyncCursor[TupleRow]
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


class Tx:
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


async def stopped(awaitable: Awaitable[object]) -> None:
    """Await something whose tasks were cancelled, without swallowing our own cancellation."""
    try:
        await awaitable
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def rollback(conn: Conn) -> None:
    """End a failed transaction, unless the connection is gone (the pool then drops it)."""
    if conn.closed or conn.info.transaction_status not in _IN_TRANSACTION:
        return
    with contextlib.suppress(psycopg.Error):
        await conn.execute(q.ROLLBACK)


def describe(exc: psycopg.Error) -> str:
    """The first line of a psycopg error, with its SQLSTATE when the server sent one."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return f"{line} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else line


def channel_name(schema: str, channel: str) -> str:
    """The NOTIFY channel of a wake-up channel in ``schema`` (``cronbus_runs`` by default).

    PostgreSQL truncates longer identifiers, so names over 63 bytes are replaced by a digest.
    """
    name = f"{schema}_{channel}"
    if len(name.encode()) <= 63:
        return name
    return "cronbus_" + hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


class Connected:
    """What the PostgreSQL store's role mixins share: the pool's database and the in-process
    wake-up hub (see :mod:`.store`)."""

    _db: Database
    _hub: WakeHub

    @property
    def observer(self) -> StoreObserver | None:
        """Told how long each transaction took, and what was published (the app's metrics,
        when its roles run; see :mod:`cronbus.observability.hooks`)."""
        return self._db.observer

    @observer.setter
    def observer(self, value: StoreObserver | None) -> None:
        self._db.observer = value
