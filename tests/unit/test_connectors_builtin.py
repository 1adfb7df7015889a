"""Built-in connectors without a database server: the registry, config errors that name the
field, the row conversions of ``sql-source``, and the file source and sink on real files."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cronbus.connectors.allow import Reach
from cronbus.connectors.api import JSON, SourceRecord
from cronbus.connectors.builtin import BUILTIN, connector_for
from cronbus.connectors.builtin.files import (
    INVALID_TYPE,
    FileSinkConnector,
    FileSinkTask,
    FileSourceConnector,
    FileSourceTask,
)
from cronbus.connectors.builtin.sql_source import record_id, to_json
from cronbus.errors import ConnectorConfigError
from cronbus.events.event import Event, make_event

T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z
SQL = {"url": "sqlite:///rows.db", "table": "orders", "key": "id", "topic": "orders"}
REACH = Reach(files=("/",), databases=(SQL["url"], "postgresql://db/x"))
"""Every file, and the databases these tests name: the allow lists are tested elsewhere."""


def as_event(record: SourceRecord) -> Event:
    """The event the runtime makes of a record: proves the record is one it accepts."""
    return make_event(
        record.type,
        record.data,
        subject=record.subject,
        id=record.id,
        key=record.key,
        time=record.time,
    )


# -- the registry ---------------------------------------------------------------------------------


def test_each_kind_gives_a_new_connector_of_its_class() -> None:
    assert sorted(BUILTIN) == [
        "file-sink",
        "file-source",
        "http-sink",
        "postgres-sink",
        "sql-source",
    ]
    for kind, cls in BUILTIN.items():
        connector = connector_for(kind)
        assert type(connector) is cls
        assert connector.kind == kind
        assert connector is not connector_for(kind)


def test_an_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(ConnectorConfigError) as info:
        connector_for("kafka-source")
    assert str(info.value) == (
        "kind: unknown connector kind 'kafka-source' "
        "(known: file-sink, file-source, http-sink, postgres-sink, sql-source)"
    )
    assert info.value.field == "kind"


# -- configs --------------------------------------------------------------------------------------


def test_validate_fills_in_the_defaults() -> None:
    sql = connector_for("sql-source", REACH).validate({**SQL, "table": "sales.orders"})
    assert sql == {
        **SQL,
        "table": "sales.orders",
        "poll_seconds": 1.0,
        "batch": 1000,
        "type": "sales.orders.row",
    }
    assert connector_for("sql-source", REACH).task_configs(sql, max_tasks=4) == [sql]
    source = connector_for("file-source", REACH).validate({"path": "/in.jsonl", "topic": "t"})
    assert source == {
        "path": "/in.jsonl",
        "topic": "t",
        "type": "file.line",
        "poll_seconds": 1.0,
        "batch": 1000,
    }
    sink = {"url": "postgresql://db/x", "table": "latest", "topic": "t"}
    assert connector_for("postgres-sink", REACH).validate(sink) == {
        **sink,
        "key": "key",
        "data": "data",
    }
    assert connector_for("file-sink", REACH).validate({"path": "/out", "topic": "t"}) == {
        "path": "/out",
        "topic": "t",
    }


BAD_CONFIGS = [
    ("sql-source", {**SQL, "table": None}, "config.table: required"),
    (
        "sql-source",
        {**SQL, "poll_seconds": "x"},
        "config.poll_seconds: must be a number > 0, not 'x'",
    ),
    ("sql-source", {**SQL, "poll_seconds": 0}, "config.poll_seconds: must be a number > 0, not 0"),
    (
        "sql-source",
        {**SQL, "poll_seconds": True},
        "config.poll_seconds: must be a number > 0, not True",
    ),
    (
        "sql-source",
        {**SQL, "table": "orders; DROP TABLE x"},
        "config.table: must be an SQL name or schema.name of letters, digits and _, "
        "not 'orders; DROP TABLE x'",
    ),
    ("sql-source", {**SQL, "table": "a.b.c"}, "config.table: must be an SQL name or schema.name"),
    ("sql-source", {**SQL, "key": "o.id"}, "config.key: must be an SQL name of letters"),
    ("sql-source", {**SQL, "key": ""}, "config.key: must be a non-empty string, not ''"),
    (
        "sql-source",
        {**SQL, "url": "mysql://db/x"},
        "config.url: must be a sqlite://… or postgresql://… or postgres://… URL, not 'mysql://db/x'",
    ),
    (
        "sql-source",
        {**SQL, "url": "sqlite://host/x.db"},
        "config.url: must be sqlite:///relative.db",
    ),
    (
        "sql-source",
        {**SQL, "batch": 0},
        "config.batch: must be a whole number from 1 to 100000, not 0",
    ),
    ("sql-source", {**SQL, "type": "a b"}, "config.type: must not hold whitespace, not 'a b'"),
    (
        "sql-source",
        {**SQL, "topic": "cronbus.runs"},
        "config.topic: must not start with 'cronbus.'",
    ),
    ("sql-source", {**SQL, "topic": "a topic"}, "config.topic: must be 1 to 200 letters, digits"),
    (
        "sql-source",
        {**SQL, "tabel": "x"},
        "config.tabel: unknown field (this kind reads batch, key,",
    ),
    ("file-source", {"topic": "t"}, "config.path: required"),
    ("file-source", {"path": 7, "topic": "t"}, "config.path: must be a non-empty string, not 7"),
    ("file-sink", {"path": "/out"}, "config.topic: required"),
    (
        "postgres-sink",
        {"url": "sqlite:///x.db", "table": "t", "topic": "t"},
        "config.url: must be a postgresql://… or postgres://… URL, not 'sqlite:///x.db'",
    ),
    (
        "postgres-sink",
        {"url": "postgres://db", "table": "t", "topic": "t", "data": "1d"},
        "config.data: ",
    ),
]


@pytest.mark.parametrize(("kind", "config", "message"), BAD_CONFIGS)
def test_a_bad_config_names_the_field(kind: str, config: dict[str, JSON], message: str) -> None:
    with pytest.raises(ConnectorConfigError) as info:
        connector_for(kind).validate({k: v for k, v in config.items() if v is not None})
    assert str(info.value).startswith(message)
    assert info.value.field == message.partition(":")[0]


def test_a_config_must_be_an_object() -> None:
    with pytest.raises(ConnectorConfigError, match=r"^config: must be a JSON object, not list$"):
        connector_for("file-sink", REACH).validate([])  # type: ignore[arg-type]


# -- sql-source rows as events --------------------------------------------------------------------


def test_rows_become_json() -> None:
    row = {
        "price": Decimal("12345678901234567890.01"),
        "at": datetime(2024, 5, 1, 12, tzinfo=UTC),
        "blob": b"\x00\xff",
        "ratio": float("nan"),
        "tags": ["a", Decimal("1.5")],
        "doc": {"n": 1},
        "none": None,
    }
    assert to_json(row) == {
        "price": "12345678901234567890.01",
        "at": "2024-05-01T12:00:00+00:00",
        "blob": "AP8=",
        "ratio": "nan",
        "tags": ["a", "1.5"],
        "doc": {"n": 1},
        "none": None,
    }


def test_ids_derive_from_table_and_key() -> None:
    assert record_id("sales.orders", "42") == "sales.orders:42"
    spaced = record_id("people", "Ada Lovelace")
    assert spaced.startswith("people:sha256:")
    assert spaced == record_id("people", "Ada Lovelace") != record_id("people", "Ada  Lovelace")
    make_event("t", id=record_id("t", "é" * 300))  # still a valid event id


# -- file-source ----------------------------------------------------------------------------------


@pytest.fixture
def lines(tmp_path: Path) -> Path:
    return tmp_path / "in.jsonl"


def started_source(
    path: Path, positions: Mapping[str, JSON] | None = None, **extra: Any
) -> FileSourceTask:
    config = FileSourceConnector(REACH).validate({"path": str(path), "topic": "lines", **extra})
    task = FileSourceConnector(REACH).task()
    task.start(config, positions or {})
    return task


def test_file_source_reads_complete_lines_and_resumes_at_a_byte_offset(lines: Path) -> None:
    lines.write_bytes(b'{"n":1}\n{"n":2}\n{"n":')
    task = started_source(lines)
    first = task.poll()
    partition = f"file:{lines}"
    assert [(r.data, r.position, r.partition, r.type) for r in first] == [
        ({"n": 1}, 8, partition, "file.line"),
        ({"n": 2}, 16, partition, "file.line"),
    ]
    assert all(r.id is None for r in first)  # derived by the runtime from partition and position
    assert task.poll() == []  # the partial line waits
    with lines.open("ab") as file:
        file.write(b'3}\n{"n":4}\n')
    assert [(r.data, r.position) for r in task.poll()] == [({"n": 3}, 24), ({"n": 4}, 32)]
    task.stop()

    again = started_source(lines, {partition: first[-1].position})
    assert [r.data for r in again.poll()] == [{"n": 3}, {"n": 4}]
    assert again.poll() == []


def test_file_source_reads_at_most_a_batch_per_poll(lines: Path) -> None:
    lines.write_text("".join(f"{n}\n" for n in range(5)))
    task = started_source(lines, batch=2)
    assert [[r.data for r in task.poll()] for _ in range(4)] == [[0, 1], [2, 3], [4], []]


def test_file_source_keeps_a_cloudevents_attributes(lines: Path) -> None:
    event = make_event("order.paid", {"id": 7}, subject="7", key="c1", time=T0, id="ev-1")
    untimed = {k: v for k, v in make_event("x.y", id="ev-2").to_cloudevent().items() if k != "time"}
    lines.write_text(json.dumps(event.to_cloudevent()) + "\n" + json.dumps(untimed) + "\n")
    timed, plain = started_source(lines).poll()
    assert (timed.id, timed.type, timed.subject, timed.key, timed.time, timed.data) == (
        "ev-1",
        "order.paid",
        "7",
        "c1",
        T0,
        {"id": 7},
    )
    assert (plain.id, plain.type, plain.time) == ("ev-2", "x.y", None)


def test_file_source_marks_bad_lines_as_bad_records_and_goes_on(lines: Path) -> None:
    lines.write_bytes(
        b'not json\n\n  \n\xff{"a"}\n{"n": NaN}\n{"specversion":"1.0","type":"t"}\n{"a\\u0000":1}\n'
        b'{"ok":true}\n'
    )
    records = started_source(lines).poll()
    for record in records:
        if record.error is None:
            as_event(record)  # every good one is an event the runtime can append
    invalid = [{**r.data, "error": r.error} for r in records if r.type == INVALID_TYPE]
    assert all(r.error is not None for r in records if r.type == INVALID_TYPE)
    assert [(d["offset"], d["line"]) for d in invalid] == [
        (0, "not json"),
        (13, '\\xff{"a"}'),
        (20, '{"n": NaN}'),
        (31, '{"specversion":"1.0","type":"t"}'),
        (64, '{"a\\u0000":1}'),
    ]
    assert all(d["path"] == str(lines) and d["error"] for d in invalid)
    assert invalid[3]["error"].startswith("line at byte 31: CloudEvent source must be")
    assert "holds a NUL character" in invalid[4]["error"]
    assert [r.data for r in records if r.type != INVALID_TYPE] == [{"ok": True}]
    assert records[-1].position == lines.stat().st_size


def test_file_source_refuses_a_file_shorter_than_its_position(lines: Path) -> None:
    lines.write_text("1\n")
    task = started_source(lines, {f"file:{lines}": 100})
    with pytest.raises(ValueError, match="fewer than the committed position 100"):
        task.poll()
    with pytest.raises(FileNotFoundError):
        started_source(lines.with_name("missing.jsonl")).poll()


# -- file-sink ------------------------------------------------------------------------------------


def appended(n: int, data: JSON = None) -> Event:
    event = make_event("order.paid", data, subject=str(n), id=f"ev-{n}", time=T0)
    return event.appended(topic="orders", offset=n, published_at=T0 + 1)


def unjson(n: int, data: object) -> Event:
    """An event whose data is not JSON (stores refuse those; a plugin must cope anyway)."""
    return dataclasses.replace(appended(n), data=data)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The inodes ``os.fsync`` was called on."""
    calls: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        calls.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def test_file_sink_writes_one_cloudevent_per_line_and_fsyncs_on_flush(
    tmp_path: Path, fsynced: list[int]
) -> None:
    path = tmp_path / "out.jsonl"
    task = FileSinkConnector(REACH).task()
    task.start(FileSinkConnector(REACH).validate({"path": str(path), "topic": "orders"}))
    assert fsynced == [tmp_path.stat().st_ino]  # the new file's directory entry
    events = [appended(n, {"n": n, "é": "ü"}) for n in range(3)]
    assert task.put(events) == [None, None, None]
    assert path.stat().st_ino not in fsynced
    task.flush({"orders": 2})
    assert fsynced[-1] == path.stat().st_ino
    assert path.read_text("utf-8").splitlines() == [
        json.dumps(e.to_cloudevent(), separators=(",", ":"), ensure_ascii=False) for e in events
    ]
    written = [Event.from_cloudevent(json.loads(line)) for line in path.read_bytes().splitlines()]
    assert written == events
    task.stop()


def test_file_sink_fails_only_the_records_that_are_not_json(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"earlier":1}\n')
    task: FileSinkTask = FileSinkConnector(REACH).task()
    task.start({"path": str(path), "topic": "orders"})
    outcomes = task.put([appended(1), unjson(2, object()), unjson(3, float("inf")), appended(4)])
    task.flush({})
    task.stop()
    assert outcomes[0] is None
    assert outcomes[3] is None
    assert isinstance(outcomes[1], TypeError)
    assert isinstance(outcomes[2], ValueError)
    assert [json.loads(line).get("id") for line in path.read_text().splitlines()] == [
        None,
        "ev-1",
        "ev-4",
    ]


def test_what_a_file_sink_writes_a_file_source_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "bus.jsonl"
    sink = FileSinkConnector(REACH).task()
    sink.start({"path": str(path), "topic": "orders"})
    sink.put([appended(1, {"n": 1}), appended(2, [1, 2])])
    sink.flush({})
    sink.stop()
    records = started_source(path).poll()
    assert [(r.id, r.type, r.subject, r.data, r.time) for r in records] == [
        ("ev-1", "order.paid", "1", {"n": 1}, T0),
        ("ev-2", "order.paid", "2", [1, 2], T0),
    ]
