"""Issue 13's acceptance test: a ``sql-source`` over a 100,000-row table into a topic and a
``file-sink`` out of it, with the ``cronbus worker`` holding their tasks SIGKILLed twice in the
middle. On an SQLite store (the rows in a separate SQLite file) and on a PostgreSQL store (the
rows in a schema of their own on the same server).

Three workers run one after another, each with a 2 s connector lease so the next takes the
dead one's tasks quickly: the first is killed once the topic holds a sixth of the rows, the
second once it has moved both tasks on (the topic past half the rows, the sink past where it
was at the first kill), and the third runs to the end and is stopped with SIGTERM.

What must hold:

* the topic holds every row exactly once: 100,000 events whose ids are ``orders:<id>``, each
  row's data intact, and in key order (offsets increase with the id: the task has one
  partition);
* the sink file holds every row at least once: every line a complete CloudEvent, the set of
  ids the set of rows, nothing else after deduplication by id, each line's offset the one
  its event has in the topic, and the first occurrence of each id in file order in increasing
  offset (topic order kept across the kills: a replacement sink rewrites only from the
  committed offset on).

A kill can also land inside the sink's ``write``: Linux stops a write to a file at a page
boundary when SIGKILL arrives, so the file can end in a line cut short (1 kill in about 400 of
a process doing nothing but ``put``, far rarer here). The last two tests recreate such a file
and check that the next sink task cuts the tail off instead of gluing its first line to it,
and that a file ending in someone else's unterminated line keeps it, ended.

Nothing here is timed: the speed of the pipeline is ``bench/connectors.py``'s business.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from contract.pg import pg_database, pg_store_url, with_options
from cronbus import App
from cronbus.connectors.allow import Reach
from cronbus.connectors.builtin.files import FileSinkConnector
from cronbus.events.event import Event, make_event
from cronbus.events.records import EventRecord
from cronbus.services import Services

from .conftest import Workers, until, wait_exit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

ROWS = 100_000
BATCH = 500
TOPIC = "orders"
SOURCE = "orders-in"
SINK = "orders-out"
PARTITION = "table:orders"
LEASE = "2"
FIRST_KILL = ROWS // 6
SECOND_KILL = ROWS // 2
STEP_SECONDS = 120.0
"""Each wait's deadline: generous, for a busy machine; the test takes far less."""
READ = 10_000


def row(n: int) -> tuple[int, str, int]:
    """Row ``n`` of the source table: (id, customer, amount)."""
    return n, f"customer-{n % 997}", (n * 7919) % 100_000


@dataclass(frozen=True)
class Rig:
    """One store with its source table: where everything of a run lives."""

    store: str
    """The cronbus store URL."""
    source: str
    """The ``sql-source``'s ``url``: the database holding the ``orders`` table."""
    sink: Path
    """The ``file-sink``'s file."""
    logs: Path


@pytest.fixture(params=["sqlite", "postgres"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    """A fresh store and a source table of ``ROWS`` rows, on each kind of store."""
    if request.param == "postgres":
        store = with_options(await pg_store_url(request), pool_max="4")
        source = seed_postgres(request)
    else:
        store = f"sqlite:///{tmp_path / 'bus.db'}"
        source = seed_sqlite(tmp_path / "rows.db")
    return Rig(store=store, source=source, sink=tmp_path / "orders.jsonl", logs=tmp_path)


def seed_sqlite(path: Path) -> str:
    """The rows in an SQLite file of their own; its URL."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount INTEGER)")
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", map(row, range(1, ROWS + 1)))
    conn.close()
    return f"sqlite:///{path}"


def seed_postgres(request: pytest.FixtureRequest) -> str:
    """The rows in a fresh database of their own (dropped after the test: connectors refuse
    the store's own database); its URL."""
    source = pg_database(request)
    with psycopg.connect(source, autocommit=True) as conn:
        table = sql.Identifier("orders")
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id integer PRIMARY KEY, customer text, amount integer)"
            ).format(table)
        )
        with conn.cursor() as cursor, cursor.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as c:
            for values in map(row, range(1, ROWS + 1)):
                c.write_row(values)
    return source


@pytest.fixture
async def bus(rig: Rig) -> AsyncIterator[App]:
    """An app open on the rig's store, for creating the connectors and reading the topic."""
    app = App(store=rig.store)
    app.settings = app.settings.with_overrides(
        connector_files=(str(rig.sink.parent),), connector_databases=(rig.source,)
    )
    async with app:
        yield app


@pytest.fixture
def workers(rig: Rig) -> Iterator[Workers]:
    """Worker processes on the rig's store, all killed at the end."""
    pool = Workers(rig.store, rig.logs)
    try:
        yield pool
    finally:
        pool.stop_all()


class Progress:
    """What the store says the connectors have done so far."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def topic_end(self) -> int:
        """The topic's last offset (0 before its first event)."""
        return (await self.app.store.get_topic(TOPIC)).last_offset

    async def source_position(self) -> int:
        """The last row id the source committed (0 before its first commit)."""
        task = (await self.app.store.get_connector(SOURCE)).tasks[0]
        return int(task.positions.get(PARTITION, 0))

    async def sink_position(self) -> int:
        """The last topic offset the sink committed (0 before its first commit)."""
        task = (await self.app.store.get_connector(SINK)).tasks[0]
        return int(task.positions.get(TOPIC, 0))


def start_worker(workers: Workers, rig: Rig) -> subprocess.Popen[bytes]:
    """A ``cronbus worker`` (connectors on) with the short connector lease, allowed the rig's
    sink folder and source database."""
    return workers.start(
        args=["--log-level", "info"],
        CRONBUS_CONNECTOR_LEASE_SECONDS=LEASE,
        CRONBUS_POLL_SECONDS="0.5",
        CRONBUS_CONNECTOR_FILES=str(rig.sink.parent),
        CRONBUS_CONNECTOR_DATABASES=rig.source,
    )


def logs(rig: Rig) -> str:
    """Every worker's log tail, for failure messages."""
    return "\n".join(
        f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(rig.logs.glob("worker-*.log"))
    )


async def read_topic(app: App) -> list[EventRecord]:
    """Every event of the topic, in offset order."""
    events: list[EventRecord] = []
    while True:
        after = events[-1].offset if events else 0
        chunk = await app.store.read_events(TOPIC, after, READ)
        if not chunk:
            return events
        events.extend(chunk)


def read_sink(path: Path) -> list[dict[str, Any]]:
    """Every line of the sink file as a CloudEvent (a line that is not one fails the test)."""
    docs = []
    with path.open("rb") as file:
        for number, line in enumerate(file, 1):
            assert line.endswith(b"\n"), f"line {number} of the sink file is incomplete: {line!r}"
            doc = json.loads(line)
            assert doc.get("specversion") == "1.0", f"line {number} is no CloudEvent: {doc}"
            docs.append(doc)
    return docs


async def test_two_sigkills_lose_nothing_and_duplicate_nothing_in_the_topic(
    rig: Rig, bus: App, workers: Workers
) -> None:
    services = Services(bus).connectors
    source = {"url": rig.source, "table": "orders", "key": "id", "topic": TOPIC, "batch": BATCH}
    await services.create(SOURCE, "sql-source", source)
    await services.create(SINK, "file-sink", {"path": str(rig.sink), "topic": TOPIC})
    progress = Progress(bus)

    def reached(offset: int, sink_past: int) -> Callable[[], Awaitable[bool]]:
        """Whether the worker took the topic to ``offset`` and the sink past ``sink_past``."""

        async def check() -> bool:
            if workers.procs[-1].poll() is not None:
                raise AssertionError("the worker exited early\n" + logs(rig))
            topic, sink = await progress.topic_end(), await progress.sink_position()
            return topic >= offset and sink > sink_past

        return check

    kills: list[tuple[int, int]] = []
    sink_at_kill = 0
    for threshold in (FIRST_KILL, SECOND_KILL):
        victim = start_worker(workers, rig)
        try:
            await until(reached(threshold, sink_at_kill), STEP_SECONDS)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs(rig)}") from None
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        sink_at_kill = await progress.sink_position()
        kills.append((await progress.topic_end(), sink_at_kill))
    print(f"\nkilled at (topic end, sink position): {kills}")
    # The premise: each kill landed with rows still to read and events still to write.
    assert all(topic < ROWS and sink < ROWS for topic, sink in kills), kills

    last = start_worker(workers, rig)

    async def finished() -> bool:
        if last.poll() is not None:
            raise AssertionError("the last worker exited early\n" + logs(rig))
        if await progress.source_position() < ROWS:
            return False
        return await progress.sink_position() == await progress.topic_end()

    try:
        await until(finished, STEP_SECONDS)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs(rig)}") from None
    last.send_signal(signal.SIGTERM)
    assert await wait_exit(last, 30) == 0, logs(rig)

    events = await read_topic(bus)
    check_topic(events)
    check_sink(read_sink(rig.sink), {e.id: e.offset for e in events})


def check_topic(events: list[EventRecord]) -> None:
    """Every row exactly once, intact, in key order."""
    assert len(events) == ROWS, f"{len(events)} events for {ROWS} rows"
    ids = [e.id for e in events]
    assert len(set(ids)) == ROWS, "an event id appears twice"
    # In offset order (read_events' order), the ids are the rows' in key order.
    assert ids == [f"orders:{n}" for n in range(1, ROWS + 1)]
    offsets = [e.offset for e in events]
    assert offsets == sorted(offsets)
    for n, event in enumerate(events, 1):
        identifier, customer, amount = row(n)
        assert event.data == {"id": identifier, "customer": customer, "amount": amount}, event


def check_sink(docs: list[dict[str, Any]], offsets: dict[str, int]) -> None:
    """Every row at least once, nothing else, at its topic offset, first occurrences in order."""
    first: dict[str, int] = {}
    for doc in docs:
        assert doc["topic"] == TOPIC
        assert doc["offset"] == offsets.get(doc["id"]), f"{doc['id']} at a wrong offset: {doc}"
        first.setdefault(doc["id"], doc["offset"])
    assert set(first) == set(offsets), (
        f"{len(set(offsets) - set(first))} rows missing from the file, "
        f"{len(set(first) - set(offsets))} ids not in the topic"
    )
    order = list(first.values())
    assert order == sorted(order), "the file's first occurrences are out of topic order"
    print(f"sink file: {len(docs)} lines for {len(first)} events")


def order(n: int) -> Event:
    """An event as the sink receives it (with its topic and offset)."""
    event = make_event("orders.row", {"id": n}, id=f"orders:{n}")
    return event.appended(topic=TOPIC, offset=n, published_at=1_700_000_000.0 + n)


def sink_writes(path: Path, events: list[Event]) -> None:
    """A new sink task on ``path`` puts and flushes ``events``."""
    connector = FileSinkConnector(Reach(files=(str(path.parent),)))
    task = connector.task()
    task.start(connector.validate({"path": str(path), "topic": TOPIC}))
    try:
        assert task.put(events) == [None] * len(events)
        task.flush({TOPIC: len(events)})
    finally:
        task.stop()


def test_a_sink_line_cut_short_by_a_kill_is_cut_off_before_the_next_append(
    tmp_path: Path,
) -> None:
    path = tmp_path / "orders.jsonl"
    sink_writes(path, [order(1), order(2)])
    whole = path.read_bytes()
    cut = json.dumps(order(3).to_cloudevent(), separators=(",", ":")).encode()[:37]
    path.write_bytes(whole + cut)  # as a SIGKILL at a page boundary leaves it
    sink_writes(path, [order(3), order(4)])
    assert path.read_bytes().startswith(whole)
    assert [doc["id"] for doc in read_sink(path)] == [f"orders:{n}" for n in (1, 2, 3, 4)]


def test_a_sink_ends_a_foreign_unterminated_line_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "orders.jsonl"
    path.write_bytes(b"a line that is not the sink's")
    sink_writes(path, [order(1)])
    first, second = path.read_bytes().splitlines()
    assert first == b"a line that is not the sink's"
    assert json.loads(second)["id"] == "orders:1"
