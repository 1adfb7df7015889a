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

Distribution (routes, limits, fan-out) costs nothing on the plain path: a run without a route,
limit or parent is inserted, claimed and completed by the same statements as before it existed.
Otherwise, in the same transactions: :mod:`.inserts` routes (:mod:`.routing`) and expands
(:mod:`.fanout`) new runs, the claim admits limited runs under advisory locks per key
(:mod:`.limits`), every path that ends a run counts it at its parent (:mod:`.fanout`, lock order
in :mod:`.fanout_sql`), and :mod:`.children` and :mod:`.requeue` keep families whole.

:class:`PostgresStore` is its roles put together (one mixin per role of :mod:`cronbus.store.ports`,
each in the module of that name) over the pool of :mod:`.connection`; this module opens and closes
it. The SQL is named in :mod:`.sql`, :mod:`.insert_sql`, :mod:`.fanout_sql`, :mod:`.jobs_sql` and
:mod:`.events_sql` (and in the modules that alone use it); the pure builders of parameters are in
:mod:`.rows`, the URL in :mod:`.url`, the listening connection in :mod:`.wake`.
"""

from __future__ import annotations

import uuid

from ..migrations import Migrated, SchemaVersions, Step
from . import sql as q
from .admin import PostgresAdmin
from .alerts import PostgresAlerts
from .children import PostgresChildren
from .connection import Database
from .connectors import PostgresConnectors
from .events import PostgresEvents
from .jobs import PostgresJobs
from .leases import PostgresLeases
from .overview import PostgresOverview
from .retention import PostgresRetention
from .role_leases import PostgresRoleLeases
from .routing import PostgresRouting
from .runs import PostgresRuns
from .subscriptions import PostgresSubscriptions
from .url import parse_url
from .wake import Listening, LocalHub, PostgresWakeUps
from .workers import PostgresWorkers


class PostgresStore(
    PostgresRuns,
    PostgresOverview,
    PostgresLeases,
    PostgresChildren,
    PostgresRouting,
    PostgresJobs,
    PostgresWorkers,
    PostgresWakeUps,
    PostgresEvents,
    PostgresSubscriptions,
    PostgresConnectors,
    PostgresAdmin,
    PostgresRetention,
    PostgresRoleLeases,
    PostgresAlerts,
):
    """A :class:`~cronbus.store.ports.Store` on PostgreSQL (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.options = parse_url(url)
        self._hub = LocalHub()
        self._token = uuid.uuid4().hex
        self._db = Database(self.options, hub=self._hub, token=self._token, url=url)
        self._listening: Listening | None = None

    @property
    def schema(self) -> str:
        """The schema that holds the store's tables."""
        return self.options.schema

    async def open(self, *, create: bool = True) -> None:
        """Apply pending migrations (under an advisory lock), then open the connection pool.

        With ``migrate=false`` in the URL, a schema that is behind raises
        :class:`~cronbus.errors.SchemaError` instead (``cronbus migrate`` applies them). With
        ``create`` false (commands that only read) the schema must hold a cronbus store
        already: :class:`~cronbus.store.presence.StoreNotFoundError` otherwise, and nothing is
        created or migrated.
        """
        if self._db.is_open:
            return
        await self._db.open(create=create)

    async def check(self) -> None:
        """Nothing to check: a PostgreSQL server cannot be swapped under its connections, and
        a lost connection is a fault that every role already retries and logs."""

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

    async def migrate(self, progress: Step | None = None) -> Migrated:
        """Apply pending migrations, whatever the URL's ``migrate``; works on a closed store
        (``progress``: see :class:`~cronbus.store.migrations.Migrator`)."""
        return await self._db.migrate(progress)
