"""``postgres-sink``: the latest event data per key, upserted into a PostgreSQL table.

Config (``validate`` fills in the defaults)::

    url     postgresql://…: the table's database, one the operator allows
            (CRONBUS_CONNECTOR_DATABASES), never the cronbus store
    table   the table, optionally schema-qualified (sales.customers)
    key     "key": a text column with a unique index (ON CONFLICT needs one)
    data    "data": a jsonb column
    topic   the topic to read

Each record writes ``INSERT INTO table (key, data) VALUES (…) ON CONFLICT (key) DO UPDATE SET
data = EXCLUDED.data`` where the key is the event's ``key``, else its ``subject``, else its
``id``, and the data is the event's ``data``. ``put`` writes into one open transaction (a
savepoint per batch, so a bad record fails alone) and ``flush`` commits it: nothing is visible
before the flush.

Connection failures, serialization failures and deadlocks raise :class:`RetriableError`. The
task keeps every row written since the last commit and, on a new connection, writes them again
before the next batch or the commit, so a retried flush never commits a transaction that lost
rows. Upserts in topic order are idempotent, so writing them twice (a commit whose answer was
lost, records put again after a crash) leaves the same table.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from ...errors import ConnectorConfigError
from ..allow import NOWHERE, Reach, Reaching, allowed_database
from ..api import JSON, Config, RetriableError, SinkConnector, SinkRecord, SinkTask
from .config import POSTGRES_SCHEMES, Fields, quote

_CONNECT_TIMEOUT = 10
_RETRIABLE = (psycopg.OperationalError, psycopg.InterfaceError)
"""Lost connections, admin shutdowns, serialization failures, deadlocks, lock timeouts."""

_Connection = psycopg.Connection[TupleRow]

_Row = tuple[str, str]
"""A key and its data as JSON text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresSinkConfig:
    """A validated ``postgres-sink`` config."""

    url: str
    table: str
    key: str
    data: str
    topic: str

    @classmethod
    def read(cls, config: Config) -> PostgresSinkConfig:
        """Check ``config``; :class:`~cronbus.errors.ConnectorConfigError` names the field."""
        fields = Fields(config)
        settings = cls(
            url=fields.url("url", POSTGRES_SCHEMES),
            table=fields.identifier("table", qualified=True),
            key=fields.identifier("key", "key", qualified=False),
            data=fields.identifier("data", "data", qualified=False),
            topic=fields.topic(publish=False),
        )
        fields.done()
        return settings

    def upsert(self) -> str:
        """The statement that writes one row."""
        table, key, data = quote(self.table), quote(self.key), quote(self.data)
        return (
            f"INSERT INTO {table} ({key}, {data}) VALUES (%s, %s::jsonb) "
            f"ON CONFLICT ({key}) DO UPDATE SET {data} = EXCLUDED.{data}"
        )


class PostgresSinkConnector(Reaching, SinkConnector):
    """Upserts each event's data by its key into a PostgreSQL table (one task)."""

    kind = "postgres-sink"

    def validate(self, config: Config) -> dict[str, JSON]:
        """The config checked (its database one the operator allows), defaults filled in."""
        settings = PostgresSinkConfig.read(config)
        allowed_database(settings.url, self.reach)
        return dataclasses.asdict(settings)

    def task_configs(self, config: Config, max_tasks: int) -> list[dict[str, JSON]]:
        """One task: the last write of a key must be the last event of that key."""
        return [dict(config)]

    def task(self) -> PostgresSinkTask:
        """A new, unstarted task."""
        return PostgresSinkTask(self.reach)


class PostgresSinkTask(SinkTask):
    """Upserts records into an open transaction that :meth:`flush` commits."""

    def __init__(self, reach: Reach = NOWHERE) -> None:
        self._reach = reach
        self._writer: _Writer | None = None

    def start(self, config: Config) -> None:
        """Check the database is one the operator allows (again: the allow list may have
        changed since the create), connect, and check the table, its columns and the key's
        unique index."""
        settings = PostgresSinkConfig.read(config)
        allowed_database(settings.url, self._reach)
        self._writer = _Writer(settings)
        try:
            self._writer.probe()
        except BaseException:
            self.stop()
            raise

    def put(self, records: Sequence[SinkRecord]) -> list[BaseException | None]:
        """Upsert ``records`` in order; one without a usable key or JSON data fails alone."""
        outcomes: list[BaseException | None] = [None] * len(records)
        rows: dict[int, _Row] = {}
        for index, record in enumerate(records):
            try:
                rows[index] = _row(record)
            except (TypeError, ValueError) as exc:
                outcomes[index] = exc
        try:
            written = self._open_writer().write(list(rows.values()))
        except RetriableError as exc:
            written = [exc] * len(rows)
        for index, outcome in zip(rows, written, strict=True):
            outcomes[index] = outcome
        return outcomes

    def flush(self, positions: Mapping[str, int]) -> None:
        """Commit what was put since the last flush."""
        self._open_writer().commit()

    def stop(self) -> None:
        """Close the connection; an uncommitted transaction is rolled back (put again later)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()

    def _open_writer(self) -> _Writer:
        if self._writer is None:
            raise RuntimeError("postgres-sink task used before start() or after stop()")
        return self._writer


def _row(record: SinkRecord) -> _Row:
    key = record.key or record.subject or record.id
    if not key:
        raise ValueError(f"event {record.id!r} has no key, subject or id to write as the key")
    return key, json.dumps(record.data, separators=(",", ":"), allow_nan=False)


class _Writer:
    """One transaction of upserts on a connection that may break.

    Every row written since the last commit is kept in ``_pending``: a new connection writes
    them again before anything else, so what is finally committed never misses a row.
    """

    def __init__(self, settings: PostgresSinkConfig) -> None:
        self._settings = settings
        self._sql = settings.upsert()
        self._conn: _Connection | None = None
        self._pending: list[_Row] = []

    def probe(self) -> None:
        """Plan (not run) an upsert: a missing table, column or unique index fails here."""
        try:
            self._connection().execute(f"EXPLAIN {self._sql}", (None, None))
        except _RETRIABLE as exc:
            self.close()
            raise RetriableError(f"PostgreSQL: {exc}") from exc
        except psycopg.Error as exc:
            s = self._settings
            raise ConnectorConfigError(
                f"config.table: cannot upsert into {s.table}({s.key}, {s.data}) on conflict "
                f"({s.key}): {exc}",
                field="config.table",
            ) from exc

    def write(self, rows: list[_Row]) -> list[BaseException | None]:
        """Upsert ``rows``: one outcome per row. Raises :class:`RetriableError` (the rows not
        kept) when the connection or transaction is lost."""
        if not rows:
            return []
        try:
            outcomes = self._upsert(self._transaction(), rows)
        except _RETRIABLE as exc:
            self.close()
            raise RetriableError(f"PostgreSQL: {exc}") from exc
        self._pending.extend(
            row for row, outcome in zip(rows, outcomes, strict=True) if outcome is None
        )
        return outcomes

    def commit(self) -> None:
        """Commit every row written since the last commit (written again first if the
        connection was lost); :class:`RetriableError` when it cannot be done now."""
        if not self._pending and (self._conn is None or self._idle(self._conn)):
            return
        try:
            self._transaction().execute("COMMIT")
        except _RETRIABLE as exc:
            self.close()
            raise RetriableError(f"PostgreSQL: {exc}") from exc
        except psycopg.Error:
            # Not worth a retry: the runtime fails every record since the last flush, so
            # they are no longer this transaction's to write.
            self._pending.clear()
            self.close()
            raise
        self._pending.clear()

    def close(self) -> None:
        """Close the connection (rolling back its transaction); pending rows are kept."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def _connection(self) -> _Connection:
        if self._conn is None or self._conn.closed:
            try:
                # autocommit, with explicit BEGIN and COMMIT: the transaction spans puts, and
                # psycopg's transaction() blocks then only ever open savepoints inside it.
                self._conn = psycopg.connect(
                    self._settings.url, autocommit=True, connect_timeout=_CONNECT_TIMEOUT
                )
            except psycopg.OperationalError as exc:
                raise RetriableError(f"PostgreSQL: cannot connect: {exc}") from exc
        return self._conn

    def _transaction(self) -> _Connection:
        """The connection inside the open transaction, begun (and the pending rows written
        again) if there is none."""
        conn = self._connection()
        if conn.info.transaction_status == TransactionStatus.INERROR:
            conn.execute("ROLLBACK")
        if self._idle(conn):
            conn.execute("BEGIN")
            if self._pending:
                conn.cursor().executemany(self._sql, self._pending)
        return conn

    @staticmethod
    def _idle(conn: _Connection) -> bool:
        return conn.info.transaction_status == TransactionStatus.IDLE

    def _upsert(self, conn: _Connection, rows: list[_Row]) -> list[BaseException | None]:
        try:
            with conn.transaction():
                conn.cursor().executemany(self._sql, rows)
        except _RETRIABLE:
            raise
        except psycopg.Error:
            # Some row is refused (a NUL in a key, a check constraint): find which, each in
            # its own savepoint, so the others are still written.
            return [self._upsert_one(conn, row) for row in rows]
        return [None] * len(rows)

    def _upsert_one(self, conn: _Connection, row: _Row) -> BaseException | None:
        try:
            with conn.transaction():
                conn.execute(self._sql, row)
        except _RETRIABLE:
            raise
        except psycopg.Error as exc:
            return exc
        return None
