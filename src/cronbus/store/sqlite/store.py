"""The embedded store: one SQLite file in WAL mode, shared by the processes of one machine.

:class:`SQLiteStore` is its roles put together (one mixin per role of :mod:`cronbus.store.ports`,
each in the module of that name) over the connection of :mod:`.connection`; this module opens and
closes it. The SQL is named in :mod:`.sql`, :mod:`.jobs_sql` and :mod:`.events_sql`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3

from ...errors import StoreError
from ..migrations import Migrated, SchemaVersions, Step
from ..presence import check_readable, not_found
from ..wake import WakeHub
from .admin import SqliteAdmin
from .alerts import SqliteAlerts
from .connection import Database
from .connectors import SqliteConnectors
from .events import SqliteEvents
from .files import MEMORY, read_versions
from .jobs import SqliteJobs
from .leases import SqliteLeases
from .overview import SqliteOverview
from .retention import SqliteRetention, convert_to_incremental
from .role_leases import SqliteRoleLeases
from .runs import SqliteRuns
from .subscriptions import SqliteSubscriptions
from .wake import SqliteWakeUps
from .workers import SqliteWorkers


class SQLiteStore(
    SqliteRuns,
    SqliteOverview,
    SqliteLeases,
    SqliteJobs,
    SqliteWorkers,
    SqliteWakeUps,
    SqliteEvents,
    SqliteSubscriptions,
    SqliteConnectors,
    SqliteAdmin,
    SqliteRetention,
    SqliteRoleLeases,
    SqliteAlerts,
):
    """A :class:`~cronbus.store.ports.Store` on one SQLite file."""

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

    async def open(self, *, create: bool = True) -> None:
        """Open the file (creating it), switch to WAL and apply pending migrations.

        With ``migrate=false`` in the URL, a schema that is behind (or a missing file) raises
        :class:`~cronbus.errors.SchemaError` instead (``cronbus migrate`` applies them). With
        ``create`` false (commands that only read) the file must hold a cronbus store already:
        :class:`~cronbus.store.presence.StoreNotFoundError` otherwise, and nothing is created,
        migrated or left behind.
        """
        if self._database.is_open:
            return
        self._registered = frozenset()
        try:
            if not create:
                await self._check_present()
            await self._database.open(create=create)
        except sqlite3.Error as exc:
            self._hub.close()
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        except BaseException:
            self._hub.close()
            raise

    async def _check_present(self) -> None:
        if self.path == MEMORY:
            return
        if not await asyncio.to_thread(os.path.exists, self.path):
            folder = os.path.dirname(self.path)
            missing = folder and not await asyncio.to_thread(os.path.isdir, folder)
            raise not_found(self.url, f"no folder {folder!r}" if missing else "")
        versions = await self.schema_versions()
        if versions.current == 0:
            raise not_found(self.url, "the file holds no cronbus tables")
        check_readable(versions)

    async def check(self) -> None:
        """Raise :class:`~cronbus.store.presence.StoreFaultError` if the file was deleted or
        replaced since it was opened, or is no longer a readable database (a busy file is no
        fault: that is a plain :class:`~cronbus.errors.StoreError`)."""
        await self._database.check()

    async def close(self) -> None:
        """Unregister wake-ups and close the connection."""
        if not self._database.is_open:
            return
        if self._hub.bound:
            with contextlib.suppress(Exception):
                await self._forget_wakeup()
        self._hub.close()
        await self._database.close()

    async def schema_version(self) -> int:
        """The newest migration applied."""
        row = await self._one("SELECT max(version) FROM cronbus_migrations")
        return int(row[0] or 0) if row is not None else 0

    async def schema_versions(self) -> SchemaVersions:
        """The schema's version and the newest this cronbus knows; works on a closed store."""
        return await asyncio.to_thread(read_versions, self.path, self.busy_timeout)

    async def migrate(self, progress: Step | None = None) -> Migrated:
        """Apply pending migrations, whatever the URL's ``migrate``; works on a closed store
        (``progress``: see :class:`~cronbus.store.migrations.Migrator`)."""
        # A connection of its own, which migrates as it opens: the store may be open or not.
        database = Database(self.path, synchronous=self.synchronous, busy_timeout=self.busy_timeout)
        database.on_migration = progress
        await database.open()
        try:
            assert database.migrated is not None
            # Retention (0013): an older file gives freed pages back only once converted.
            await convert_to_incremental(database)
            return database.migrated
        finally:
            await database.close()
