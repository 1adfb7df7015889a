"""Built-in connectors against real databases: ``sql-source`` on SQLite and PostgreSQL, and
``postgres-sink``, driven as the runtime drives them (start, poll / put, flush, stop).

PostgreSQL is ``CRONBUS_TEST_PG`` with a fresh schema per test: skipped locally when it is
unreachable, failed when ``CI=true``.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from contract.pg import _unavailable as unavailable
from contract.pg import drop_schema, server_url, with_options
from cronbus.connectors.allow import Reach
from cronbus.connectors.api import JSON, RetriableError, SourceRecord
from cronbus.connectors.builtin import connector_for
from cronbus.connectors.builtin.postgres_sink import PostgresSinkTask
from cronbus.connectors.builtin.sql_source import SqlSourceTask
from cronbus.errors import ConnectorConfigError
from cronbus.events.event import Event, make_event

T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh schema on the test server, dropped after the test."""
    server = server_url()
    schema = f"t_conn_{uuid.uuid4().hex}"
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.OperationalError as exc:
        unavailable(server, exc)
    yield schema
    drop_schema(server, schema)


def pg(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on its own connection (committed) and return its rows."""
    with psycopg.connect(server_url(), autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


# -- sql-source -----------------------------------------------------------------------------------


@dataclass
class TableDb:
    """A database holding the ``orders`` table a source reads, on one backend."""

    url: str
    table: str
    placeholder: str

    def run(self, statement: str, params: Sequence[Any] = ()) -> None:
        statement = statement.replace("orders", self.table).replace("?", self.placeholder)
        if self.url.startswith("sqlite"):
            with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn, conn:
                conn.execute(statement, params)
        else:
            pg(statement, params)

    def insert(self, *ids: int) -> None:
        for n in ids:
            self.run("INSERT INTO orders (id, name) VALUES (?, ?)", (n, f"order {n}"))


@pytest.fixture(params=["sqlite", "postgres"])
def table_db(request: pytest.FixtureRequest, tmp_path: Path) -> TableDb:
    if request.param == "sqlite":
        db = TableDb(f"sqlite:///{tmp_path / 'shop.db'}", "orders", "?")
    else:
        schema = request.getfixturevalue("pg_schema")
        db = TableDb(server_url(), f"{schema}.orders", "%s")
    db.run("CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    return db


def reach(url: str) -> Reach:
    """What the operator allows a connector on ``url``: that database (no store here)."""
    return Reach(databases=(url,))


def source(db: TableDb, positions: dict[str, JSON] | None = None, **extra: Any) -> SqlSourceTask:
    connector = connector_for("sql-source", reach(db.url))
    config = connector.validate(
        {"url": db.url, "table": db.table, "key": "id", "topic": "orders", **extra}
    )
    task = SqlSourceTask(reach(db.url))
    task.start(config, positions or {})
    return task


def keys(records: Sequence[SourceRecord]) -> list[JSON]:
    return [r.position for r in records]


def as_event(record: SourceRecord) -> Event:
    """The event the runtime makes of a record: proves the record is one it accepts."""
    return make_event(
        record.type, record.data, subject=record.subject, id=record.id, key=record.key
    )


def test_sql_source_reads_rows_in_key_order_in_batches(table_db: TableDb) -> None:
    table_db.insert(3, 1, 5, 2, 4)
    task = source(table_db, batch=2)
    try:
        first = task.poll()
        assert [keys(first), keys(task.poll()), keys(task.poll()), task.poll()] == [
            [1, 2],
            [3, 4],
            [5],
            [],
        ]
        table_db.insert(6)
        assert keys(task.poll()) == [6]
    finally:
        task.stop()
    one = first[0]
    table = table_db.table
    assert one == SourceRecord(
        partition=f"table:{table}",
        position=1,
        data={"id": 1, "name": "order 1"},
        type=f"{table}.row",
        id=f"{table}:1",
        subject="1",
        key="1",
    )
    as_event(one)


def test_sql_source_resumes_after_a_position_without_duplicates(table_db: TableDb) -> None:
    table_db.insert(1, 2, 3, 4, 5)
    task = source(table_db, batch=2)
    read = task.poll()
    task.stop()
    partition = read[-1].partition

    resumed = source(table_db, {partition: read[-1].position})
    rest = resumed.poll()
    resumed.stop()
    assert keys(read) + keys(rest) == [1, 2, 3, 4, 5]

    fresh = source(table_db)
    everything = fresh.poll()
    fresh.stop()
    assert [r.id for r in read + rest] == [r.id for r in everything]  # ids are stable


def test_sql_source_start_names_a_table_or_key_it_cannot_read(table_db: TableDb) -> None:
    with pytest.raises(ConnectorConfigError) as info:
        source(table_db, key="missing")
    assert info.value.field == "config.table"
    assert "cannot read column 'missing'" in str(info.value)


def test_sql_source_converts_postgres_types_and_resumes_on_a_timestamp(pg_schema: str) -> None:
    table = f"{pg_schema}.payments"
    pg(
        f"CREATE TABLE {table} (at timestamptz PRIMARY KEY, amount numeric(20, 2), "
        "receipt bytea, meta jsonb, ref uuid, note text)"
    )
    ref = uuid.UUID(int=7)
    for hour in (12, 13):
        pg(
            f"INSERT INTO {table} VALUES (%s, 12345678901234567.5, '\\x00ff', "
            """'{"a": [1]}', %s, 'a b')""",
            (f"2024-05-01T{hour}:00:00.123456Z", ref),
        )
    config = {"url": server_url(), "table": table, "key": "at", "topic": "payments", "batch": 1}
    task = SqlSourceTask(reach(server_url()))
    task.start(connector_for("sql-source", reach(server_url())).validate(config), {})
    (first,) = task.poll()
    task.stop()
    assert first.data == {
        "at": "2024-05-01T12:00:00.123456+00:00",
        "amount": "12345678901234567.50",
        "receipt": "AP8=",
        "meta": {"a": [1]},
        "ref": str(ref),
        "note": "a b",
    }
    assert first.position == first.key == "2024-05-01T12:00:00.123456+00:00"
    as_event(first)

    again = SqlSourceTask(reach(server_url()))
    checked = connector_for("sql-source", reach(server_url())).validate(config)
    again.start(checked, {first.partition: first.position})
    assert [r.data["at"] for r in again.poll()] == ["2024-05-01T13:00:00.123456+00:00"]
    again.stop()


def test_sql_source_reads_sqlite_blobs_and_text_keys(tmp_path: Path) -> None:
    path = tmp_path / "people.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE people (name TEXT PRIMARY KEY, photo BLOB, height REAL)")
        conn.execute("INSERT INTO people VALUES ('Ada Lovelace', x'00ff', 1.65)")
    config = {"url": f"sqlite:///{path}", "table": "people", "key": "name", "topic": "people"}
    task = SqlSourceTask(reach(config["url"]))
    task.start(connector_for("sql-source", reach(config["url"])).validate(config), {})
    (record,) = task.poll()
    task.stop()
    assert record.data == {"name": "Ada Lovelace", "photo": "AP8=", "height": 1.65}
    assert (record.key, record.subject, record.position) == ("Ada Lovelace",) * 3
    assert record.id is not None
    assert record.id.startswith("people:sha256:")  # a space is not allowed in an event id
    as_event(record)


# -- postgres-sink --------------------------------------------------------------------------------


@pytest.fixture
def sink_table(pg_schema: str) -> str:
    table = f"{pg_schema}.latest"
    pg(f"CREATE TABLE {table} (key text PRIMARY KEY, data jsonb NOT NULL)")
    return table


def sink(table: str, url: str | None = None) -> PostgresSinkTask:
    url = url or server_url()
    connector = connector_for("postgres-sink", reach(url))
    config = connector.validate({"url": url, "table": table, "topic": "orders"})
    task = PostgresSinkTask(reach(url))
    task.start(config)
    return task


def event(n: int, data: JSON, *, key: str | None = None, subject: str | None = None) -> Event:
    made = make_event("order.paid", data, id=f"ev-{n}", key=key, subject=subject, time=T0)
    return made.appended(topic="orders", offset=n, published_at=T0)


def stored(table: str) -> dict[str, JSON]:
    return dict(pg(f"SELECT key, data FROM {table} ORDER BY key"))


def test_postgres_sink_upserts_by_key_and_shows_nothing_before_flush(sink_table: str) -> None:
    task = sink(sink_table)
    try:
        assert task.put([event(1, {"v": 1}, key="a"), event(2, {"v": 2}, key="b")]) == [None, None]
        assert stored(sink_table) == {}
        task.flush({"orders": 2})
        assert stored(sink_table) == {"a": {"v": 1}, "b": {"v": 2}}

        assert task.put([event(3, {"v": 3}, key="a"), event(4, [4], key="a")]) == [None, None]
        assert stored(sink_table) == {"a": {"v": 1}, "b": {"v": 2}}
        task.flush({"orders": 4})
        assert stored(sink_table) == {"a": [4], "b": {"v": 2}}
    finally:
        task.stop()


def test_postgres_sink_keys_by_key_else_subject_else_id_and_fails_bad_records_alone(
    sink_table: str,
) -> None:
    no_key = Event(id="", source="cronbus", type="t", time=T0, data=1)  # as no store would keep
    nul_key = Event(id="ev-5", source="cronbus", type="t", time=T0, data=5, key="x\x00")
    task = sink(sink_table)
    outcomes = task.put(
        [
            event(1, 1, key="k1", subject="s1"),
            no_key,
            event(2, 2, subject="s2"),
            nul_key,
            event(3, 3),
        ]
    )
    task.flush({})
    task.stop()
    assert [outcomes[0], outcomes[2], outcomes[4]] == [None, None, None]
    assert isinstance(outcomes[1], ValueError)
    assert "no key, subject or id" in str(outcomes[1])
    assert isinstance(outcomes[3], psycopg.DataError)
    assert stored(sink_table) == {"ev-3": 3, "k1": 1, "s2": 2}


def test_postgres_sink_writes_again_what_a_lost_connection_rolled_back(sink_table: str) -> None:
    name = f"cronbus-test-{uuid.uuid4().hex[:12]}"
    task = sink(sink_table, with_options(server_url(), application_name=name))

    def kill() -> None:
        pg(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [name],
        )

    try:
        assert task.put([event(1, 1, key="a")]) == [None]
        kill()
        lost = task.put([event(2, 2, key="b")])
        assert [type(e) for e in lost] == [RetriableError]
        assert task.put([event(2, 2, key="b")]) == [None]  # the runtime puts it again
        kill()
        with pytest.raises(RetriableError):
            task.flush({})
        task.flush({})  # the runtime retries the flush
        assert stored(sink_table) == {"a": 1, "b": 2}
    finally:
        task.stop()


def test_postgres_sink_start_names_a_table_it_cannot_upsert_into(pg_schema: str) -> None:
    table = f"{pg_schema}.plain"
    pg(f"CREATE TABLE {table} (key text, data jsonb)")  # no unique index for ON CONFLICT
    with pytest.raises(ConnectorConfigError) as info:
        sink(table)
    assert info.value.field == "config.table"
    assert "no unique or exclusion constraint" in str(info.value)
    with pytest.raises(ConnectorConfigError, match="does not exist"):
        sink(f"{pg_schema}.missing")
