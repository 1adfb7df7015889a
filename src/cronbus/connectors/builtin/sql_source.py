"""``sql-source``: a table's new rows, in the order of an increasing key column, into a topic.

Config (``validate`` fills in the defaults)::

    url           sqlite:///path.db or postgresql://…: the table's database, one the operator
                  allows (CRONBUS_CONNECTOR_DATABASES), never the cronbus store (SQLite is
                  opened read-only)
    table         the table, optionally schema-qualified (sales.orders)
    key           a unique column whose values only grow (a serial id, an insert timestamp)
    topic         the topic to append to
    poll_seconds  1.0
    batch         1000 rows per poll at most
    type          "<table>.row", the events' type

One task reads ``SELECT <key>, * FROM <table> WHERE <key> > <last> ORDER BY <key> LIMIT
<batch>``. Its one partition is ``table:<table>``; a record's position is its key value as
JSON, so a task restarted with the committed positions reads on from the row after it.

A row becomes an event whose ``data`` is the row as a JSON object (column → value), with
``key`` and ``subject`` the key value as text and a deterministic ``id``: ``<table>:<key>``
(or ``<table>:sha256:<hex>`` of the key when that is not a valid event id), so a row read
twice, by a restart or by a second connector on the same table and topic, is stored once.
Values JSON lacks are converted: ``Decimal`` → string (exact: a float would round money and
large numerics), date and time → ISO 8601 string, bytes → base64 string, interval → seconds,
NaN and infinities → string, anything else (UUID, inet, …) → its text.

Limits, as for any read by an increasing column: rows whose key is NULL are never read, and a
row committed *after* a row with a greater key was read (two writers taking sequence values
and committing out of order) is skipped; keys should be numbers, text or timestamps.
"""

from __future__ import annotations

import abc
import base64
import dataclasses
import hashlib
import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, ClassVar
from urllib.parse import quote as url_quote
from urllib.parse import urlsplit

import psycopg

from ...errors import ConnectorConfigError, InvalidArgumentError
from ...validation import check_event_id
from ..allow import NOWHERE, Reach, Reaching, allowed_database
from ..api import JSON, Config, RetriableError, SourceConnector, SourceRecord, SourceTask
from .config import POSTGRES_SCHEMES, SQLITE_SCHEMES, Fields, quote

_CONNECT_TIMEOUT = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class SqlSourceConfig:
    """A validated ``sql-source`` config."""

    url: str
    table: str
    key: str
    topic: str
    poll_seconds: float
    batch: int
    type: str

    @classmethod
    def read(cls, config: Config) -> SqlSourceConfig:
        """Check ``config``; :class:`~cronbus.errors.ConnectorConfigError` names the field."""
        fields = Fields(config)
        table = fields.identifier("table", qualified=True)
        settings = cls(
            url=fields.url("url", SQLITE_SCHEMES + POSTGRES_SCHEMES),
            table=table,
            key=fields.identifier("key", qualified=False),
            topic=fields.topic(publish=True),
            poll_seconds=fields.number("poll_seconds", 1.0),
            batch=fields.integer("batch", 1000, high=100_000),
            type=fields.event_type("type", f"{table}.row"),
        )
        fields.done()
        return settings

    @property
    def partition(self) -> str:
        """The one partition the task's positions are kept under."""
        return f"table:{self.table}"


class SqlSourceConnector(Reaching, SourceConnector):
    """Reads a table's new rows by an increasing key column (one task)."""

    kind = "sql-source"

    def validate(self, config: Config) -> dict[str, JSON]:
        """The config checked (its database one the operator allows), defaults filled in."""
        settings = SqlSourceConfig.read(config)
        allowed_database(settings.url, self.reach)
        return dataclasses.asdict(settings)

    def task_configs(self, config: Config, max_tasks: int) -> list[dict[str, JSON]]:
        """One task: rows must be read in key order, which one reader alone keeps."""
        return [dict(config)]

    def task(self) -> SqlSourceTask:
        """A new, unstarted task."""
        return SqlSourceTask(self.reach)


class SqlSourceTask(SourceTask):
    """Polls one table for rows past the last key it read."""

    def __init__(self, reach: Reach = NOWHERE) -> None:
        self._reach = reach
        self._settings: SqlSourceConfig | None = None
        self._db: _Database | None = None
        self._last: Any = None
        self._started = False
        """False until a row was read or a position given: then ``_last`` holds a key."""

    def start(self, config: Config, positions: Mapping[str, JSON]) -> None:
        """Connect and check the table and key can be read; resume after the committed key."""
        settings = self._settings = SqlSourceConfig.read(config)
        self._started = settings.partition in positions
        self._last = positions.get(settings.partition)
        try:
            self._connect().probe()
        except BaseException:
            self.stop()
            raise

    def poll(self) -> list[SourceRecord]:
        """The next rows after the last key read, at most ``batch`` of them."""
        settings = self._config()
        db = self._db or self._connect()
        try:
            rows = db.rows(self._last, first=not self._started)
        except RetriableError:
            self.stop()  # a broken connection stays broken: the next poll opens another
            raise
        if rows:
            self._last, self._started = rows[-1][0], True
        return [_record(settings, key, columns) for key, columns in rows]

    def stop(self) -> None:
        """Close the connection."""
        if self._db is not None:
            db, self._db = self._db, None
            db.close()

    def _config(self) -> SqlSourceConfig:
        if self._settings is None:
            raise RuntimeError("sql-source task polled before start()")
        return self._settings

    def _connect(self) -> _Database:
        settings = self._config()
        # Checked at each connection: an SQLite file's symlinks may have moved since the create.
        key = allowed_database(settings.url, self._reach)
        if urlsplit(settings.url).scheme.lower() == "sqlite":
            self._db = _Sqlite(settings, key.where)
        else:
            self._db = _Postgres(settings)
        return self._db


def _record(settings: SqlSourceConfig, key: Any, row: dict[str, JSON]) -> SourceRecord:
    position = to_json(key)
    text = position if isinstance(position, str) else json.dumps(position)
    return SourceRecord(
        partition=settings.partition,
        position=position,
        data=row,
        type=settings.type,
        id=record_id(settings.table, text),
        subject=text,
        key=text,
    )


def record_id(table: str, key: str) -> str:
    """The event id of ``table``'s row with ``key``: ``<table>:<key>``, or a digest of the key
    when that is not a valid event id (spaces, non-ASCII, over 200 characters)."""
    try:
        return check_event_id(f"{table}:{key}")
    except InvalidArgumentError:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{table}:sha256:{digest}"


def to_json(value: Any) -> JSON:
    """A database value as JSON (see the module docstring for each conversion)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)  # exact, where a float would round money and large numerics
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return str(value)  # UUID, inet, ranges: their text form


class _Database(abc.ABC):
    """The table's database, behind the two drivers; errors worth a retry become
    :class:`RetriableError`."""

    placeholder: ClassVar[str]
    quote_mark: ClassVar[str] = '"'

    def __init__(self, settings: SqlSourceConfig) -> None:
        table, key = quote(settings.table, self.quote_mark), quote(settings.key, self.quote_mark)
        self._settings = settings
        self._probe = f"SELECT {key}, * FROM {table} WHERE 1 = 0"
        order = f"ORDER BY {key} LIMIT {settings.batch}"
        self._first = f"SELECT {key}, * FROM {table} WHERE {key} IS NOT NULL {order}"
        self._next = f"SELECT {key}, * FROM {table} WHERE {key} > {self.placeholder} {order}"

    def probe(self) -> None:
        """Check the table and its key column can be read (a clear error at start)."""
        try:
            self._fetch(self._probe, ())
        except RetriableError:
            raise
        except Exception as exc:
            where = self._settings
            raise ConnectorConfigError(
                f"config.table: cannot read column {where.key!r} of table {where.table!r}: {exc}",
                field="config.table",
            ) from exc

    def rows(self, last: Any, *, first: bool) -> list[tuple[Any, dict[str, JSON]]]:
        """The next batch as (key value, row as JSON) pairs, in key order."""
        names, rows = self._fetch(self._first, ()) if first else self._fetch(self._next, (last,))
        columns = names[1:]
        return [(row[0], dict(zip(columns, map(to_json, row[1:]), strict=True))) for row in rows]

    @abc.abstractmethod
    def _fetch(self, query: str, params: Sequence[Any]) -> tuple[list[str], list[Any]]:
        """The column names and rows of ``query``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection."""


class _Sqlite(_Database):
    placeholder = "?"
    quote_mark = "`"

    def __init__(self, settings: SqlSourceConfig, path: str) -> None:
        super().__init__(settings)
        uri = f"file:{url_quote(path)}?mode=ro"
        try:
            # check_same_thread=False: the runtime calls each method from a worker thread,
            # not always the same one (calls never overlap). isolation_level=None: no
            # transaction stays open between polls, so each poll sees the latest rows.
            self._conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ConnectorConfigError(
                f"config.url: cannot open {settings.url!r} to read: {exc}", field="config.url"
            ) from exc

    def _fetch(self, query: str, params: Sequence[Any]) -> tuple[list[str], list[Any]]:
        try:
            cursor = self._conn.execute(query, params)
            return [d[0] for d in cursor.description], cursor.fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise RetriableError(f"SQLite: {exc}") from exc
            raise

    def close(self) -> None:
        self._conn.close()


class _Postgres(_Database):
    placeholder = "%s"

    def __init__(self, settings: SqlSourceConfig) -> None:
        super().__init__(settings)
        try:
            # autocommit: no transaction stays open (and holds back vacuum) between polls.
            self._conn = psycopg.connect(
                settings.url, autocommit=True, connect_timeout=_CONNECT_TIMEOUT
            )
        except psycopg.OperationalError as exc:
            raise RetriableError(f"PostgreSQL: cannot connect: {exc}") from exc

    def _fetch(self, query: str, params: Sequence[Any]) -> tuple[list[str], list[Any]]:
        try:
            cursor = self._conn.execute(query, params)
            return [column.name for column in cursor.description or ()], cursor.fetchall()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise RetriableError(f"PostgreSQL: {exc}") from exc

    def close(self) -> None:
        self._conn.close()
