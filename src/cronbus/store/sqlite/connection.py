"""The SQLite connection of a store: its threads, transactions, locks and checkpoints; and
:class:`Connected`, the base of the store's role mixins.

One connection serves a store. Calls run on a thread that owns it, so the event loop never waits
on the disk, except short calls, which run on the loop's thread when the connection is free (a
thread hop costs more than they do). Writes take the database lock up front (``BEGIN
IMMEDIATE``), queued on a kernel lock shared by every process on the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ...errors import StoreError
from ...observability.hooks import StoreObserver, caller
from .. import migrations
from ..presence import StoreFaultError
from ..wake import WakeHub
from . import files, matches
from . import sql as q
from .files import BROKEN, MEMORY, file_identity, statements, store_name, uri
from .rows import Row, fetch_all, fetch_one

T = TypeVar("T")
Inline = Literal["", "read", "write"]
log = logging.getLogger("cronbus.store")
_CHECKPOINT_EVERY = 64
_CHECKPOINT_BYTES = 4 * 1024 * 1024
_RELAXED = {"full": "normal", "extra": "normal"}


class Database:
    """One SQLite file in WAL mode, as a store uses it."""

    def __init__(
        self, path: str, *, synchronous: str, busy_timeout: float, migrate: bool = True
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.migrate = migrate
        self.migrated: migrations.Migrated | None = None
        """What opening applied (``None`` when it only checked the version)."""
        self.on_migration: migrations.Step | None = None
        """Told how far opening got in applying migrations (``cronbus migrate``'s bar)."""
        self._relaxed = _RELAXED.get(synchronous, synchronous)
        self._level = ""
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._conn_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._flock_held = False
        self._writes = 0
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpointing = False
        self.identity: tuple[int, int] | None = None
        """The file's device and inode when it was opened (None in memory)."""
        self._where = path
        """The file's absolute path when it was opened: a task that changes the process's
        folder must not make a relative path name another file."""

    @property
    def is_open(self) -> bool:
        """True between :meth:`open` and :meth:`close`."""
        return self._executor is not None

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection; use it only inside :meth:`call`."""
        assert self._conn is not None
        return self._conn

    # -- lifecycle -----------------------------------------------------------------------------
    async def open(self, *, create: bool = True) -> None:
        """Connect, switch to WAL and apply pending migrations (or, with ``migrate`` false,
        refuse a schema that is behind). With ``create`` false, the file must exist already
        (the caller has checked its schema): nothing is created and nothing migrated."""
        if create and not self.migrate:
            # Before connecting, which would create the file.
            migrations.check(files.read_versions(self.path, self.busy_timeout))
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cronbus-sqlite")
        self._checkpointer = ThreadPoolExecutor(1, thread_name_prefix="cronbus-checkpoint")
        try:
            await self.call(self._connect, create)
            if self.migrate and create:
                self.migrated = await self.call(self._migrate)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the connections and stop the threads."""
        if self._executor is None:
            return
        if self._conn is not None:
            await self.call(self._conn.close)
            self._conn = None
        self.identity = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._checkpointer is not None:
            self._checkpointer.submit(self._close_checkpointer)
            self._checkpointer.shutdown(wait=True)
            self._checkpointer = None
        self._executor.shutdown(wait=True)
        self._executor = None

    async def check(self) -> None:
        """Raise :class:`StoreFaultError` if the file is no longer the one opened (deleted,
        replaced) or no longer a database (header overwritten), or cannot be read; a busy
        file raises a plain :class:`StoreError`, which is no fault."""
        if self.identity is None:
            return
        fault = await asyncio.to_thread(files.file_fault, self._where, self.identity, self.path)
        if fault is None:
            try:
                await self.call(files.read_schema_version, self.conn, inline="read")
            except StoreFaultError:
                raise
            except StoreError as exc:
                # A busy or locked file is not a fault: the roles wait for it or retry.
                cause = exc.__cause__
                code = getattr(cause, "sqlite_errorcode", 0) & 0xFF
                if code not in BROKEN:
                    raise
                fault = f"the store file {self.path} cannot be read: {cause}"
        if fault is not None:
            raise StoreFaultError(fault)

    def _connect(self, create: bool) -> None:
        directory = os.path.dirname(self.path)
        if self.path != MEMORY and directory and not os.path.isdir(directory):
            raise StoreError(f"cannot open SQLite store {self.path!r}: no folder {directory!r}")
        # mode=rw fails on a missing file instead of creating it (a read-only command).
        target = self.path if create or self.path == MEMORY else uri(self.path, "rw")
        conn = sqlite3.connect(
            target,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=target != self.path,
        )
        # Payload matches of a listing compare lists and objects in Python (see .matches).
        matches.register(conn)
        if self.path != MEMORY:
            self._where = os.path.abspath(self.path)
            self.identity = file_identity(self._where)
            lock = os.path.abspath(self.path) + "-writer.lock"
            self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        # Switching a new file to WAL fails at once with "database is locked" when another
        # process switches it too (SQLite's busy handler does not wait there): queue on the
        # writers' lock, as processes started together all do. Setting auto_vacuum can fail
        # the same way, so it queues too.
        with self._writer_lock():
            if create:
                # Retention frees pages that incremental vacuum gives back (0013). The mode
                # sticks only if set before the first table: on a file with tables it does
                # nothing.
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if self.path != MEMORY:
            # Checkpoints fsync the database: they run on a thread of their own (see
            # _maybe_checkpoint), never inside the transaction that happened to fill the WAL.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._conn = conn

    def _migrate(self) -> migrations.Migrated:
        conn = self.conn
        # The write lock serialises concurrent openers: the version is read under it.
        with self.write():
            conn.execute(
                "CREATE TABLE IF NOT EXISTS cronbus_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            row = conn.execute("SELECT coalesce(max(version), 0) FROM cronbus_migrations")
            current = int(row.fetchone()[0])
            todo = migrations.pending(store_name(self.path), migrations.load("sqlite"), current)
            for done, migration in enumerate(todo):
                if self.on_migration is not None:
                    self.on_migration(done, len(todo))
                for statement in statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO cronbus_migrations VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )
            if self.on_migration is not None and todo:
                self.on_migration(len(todo), len(todo))
        return migrations.Migrated(
            store=store_name(self.path),
            before=current,
            after=todo[-1].version if todo else current,
            applied=tuple(f"{m.version:04d}_{m.name}" for m in todo),
        )

    # -- calls ---------------------------------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any, inline: Inline = "") -> T:
        """Run ``fn`` on the connection: on the store's thread, or here when it is quick.

        A thread hop costs a fifth of a millisecond or more on a small machine, more than a
        short transaction itself, so ``inline="read"`` and ``inline="write"`` calls run on the
        event loop's thread when the connection and (for writes) the writers' lock are free at
        once; otherwise, and for anything that may take long, they wait on the store's thread.
        """
        if self._executor is None:
            raise StoreError("the store is not open; use `async with app:` or `with app:`")
        try:
            if inline and self._enter_inline(write=inline == "write"):
                try:
                    return fn(*args)
                finally:
                    self._leave_inline()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, partial(self._locked, fn, *args))
        except sqlite3.Error as exc:
            if files.is_not_a_database(exc):
                # No retry can help: the file is the fault, the same one check() reports.
                raise StoreFaultError(files.not_a_database(self.path)) from exc
            raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._conn_lock:
            return fn(*args)

    def _enter_inline(self, *, write: bool) -> bool:
        if not self._conn_lock.acquire(blocking=False):
            return False
        if write and self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._conn_lock.release()
                return False
            self._flock_held = True
        return True

    def _leave_inline(self) -> None:
        if self._flock_held:
            self._flock_held = False
            assert self._lock_fd is not None
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        self._conn_lock.release()

    # -- transactions --------------------------------------------------------------------------
    @contextlib.contextmanager
    def write(
        self,
        *,
        durable: bool = True,
        before_commit: Callable[[sqlite3.Connection], None] | None = None,
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the database lock from its first statement.

        ``durable`` transactions (defers and commands, which users are told have happened) are
        synced to disk at the store's ``synchronous`` level; the others (claims, completions,
        heartbeats) at most at ``normal``: losing one in a power cut only repeats an attempt,
        which at-least-once execution allows, and the next durable commit syncs them anyway.
        """
        conn = self.conn
        level = self.synchronous if durable else self._relaxed
        if level != self._level:
            conn.execute(f"PRAGMA synchronous = {level}")
            self._level = level
        with self._writer_lock():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                if before_commit is not None:
                    before_commit(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        self._writes += 1
        if self._writes % _CHECKPOINT_EVERY == 0:
            self._maybe_checkpoint()

    @contextlib.contextmanager
    def _writer_lock(self) -> Iterator[None]:
        """Queue for the write lock in the kernel rather than in SQLite's busy handler.

        SQLite's busy handler sleeps in growing steps while another process takes the lock
        straight back, which starves one worker of two; an ``flock`` waiter is woken as soon
        as the lock is free. SQLite's own locking still guards everything.
        """
        if self._lock_fd is None or self._flock_held:
            yield
            return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- checkpoints ---------------------------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        """Copy the WAL back into the database, off the hot path, once it has grown."""
        if self._checkpointing or self._checkpointer is None or self.path == MEMORY:
            return
        try:
            size = os.stat(self.path + "-wal").st_size
        except OSError:
            return
        if size >= _CHECKPOINT_BYTES:
            self._checkpointing = True
            self._checkpointer.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        try:
            if self._checkpoint_conn is None:
                self._checkpoint_conn = sqlite3.connect(
                    self.path, timeout=self.busy_timeout, isolation_level=None
                )
            # PASSIVE never waits for readers or writers; what it cannot copy now, a later
            # checkpoint will.
            self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint of %s failed: %s", self.path, exc)
        finally:
            self._checkpointing = False

    def _close_checkpointer(self) -> None:
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
            self._checkpoint_conn = None


class Connected:
    """What the SQLite store's role mixins share: the connection, its calls and transactions,
    and the registry of other processes' wake-up sockets."""

    _database: Database
    _hub: WakeHub
    _registered: frozenset[str]
    _wakeups: list[tuple[str, frozenset[str]]]
    _wakeups_read: float
    observer: StoreObserver | None = None
    """Told how long each write transaction took, and what was published (the app's
    metrics, when its roles run; see :mod:`cronbus.observability.hooks`)."""

    if TYPE_CHECKING:
        # Provided by the wake-up mixin (.wake.SqliteWakeUps).
        async def notify(self, channels: Sequence[str]) -> None: ...

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

    async def _transact(
        self,
        fn: Callable[..., T],
        *args: Any,
        durable: bool = True,
        wake: bool | set[str] = False,
        inline: Inline = "",
    ) -> T:
        """``fn(conn, *args)`` in one write transaction (see :meth:`_write`), on the
        connection's thread (see :meth:`Database.call`)."""
        observer = self.observer
        if observer is None:
            return await self._call(self._in_transaction, fn, args, durable, wake, inline=inline)
        # Named after the store method that called: a bounded label (caller() must run before
        # the first await, while that method's frame is the one below).
        op, start = caller(1), time.perf_counter()
        try:
            return await self._call(self._in_transaction, fn, args, durable, wake, inline=inline)
        finally:
            observer.transaction(op, time.perf_counter() - start)

    def _in_transaction(
        self, fn: Callable[..., T], args: Sequence[Any], durable: bool, wake: bool | set[str]
    ) -> T:
        with self._write(durable=durable, wake=wake) as conn:
            return fn(conn, *args)

    async def _rows(self, sql: str, params: Any = (), *, inline: Inline = "") -> list[Row]:
        """The rows of one read statement."""
        return await self._call(fetch_all, self._db, sql, params, inline=inline)

    async def _one(self, sql: str, params: Any = (), *, inline: Inline = "") -> Row | None:
        """The first row of one read statement, if any."""
        return await self._call(fetch_one, self._db, sql, params, inline=inline)

    async def _nudge(self, channels: set[str]) -> None:
        if channels:
            await self.notify(sorted(channels))

    def _read_wakeups(self, conn: sqlite3.Connection) -> None:
        self._wakeups = read_wakeups(conn)
        self._wakeups_read = time.monotonic()


def read_wakeups(conn: sqlite3.Connection) -> list[tuple[str, frozenset[str]]]:
    """The registered wake-up sockets and the channels each listens to."""
    return [(a, frozenset(c.split(","))) for a, c in conn.execute(q.LIST_WAKEUPS)]
