"""Connector figures: rows per second through ``sql-source`` → topic → ``file-sink``, and the
time a dead worker's connector task takes to move to another worker.

For each store (``--store sqlite|postgres|both``; each measurement gets a fresh SQLite file or
a fresh PostgreSQL schema, dropped after), with real ``cronbus worker --app connectors:app``
processes (connectors on, the default):

1. ``pipeline``: a source table ``orders (id, customer, amount)`` of ``--rows`` rows (100,000;
   SQLite: a file ``rows.db`` beside the store; PostgreSQL: a schema of its own on the same
   server) is seeded first, untimed. One worker starts and registers; then, with the clock
   started just before, a ``sql-source`` (key ``id``, ``--batch`` rows a poll, 1000 by
   default as in the connector) and a ``file-sink`` (a file in the temporary folder) are
   created through the services, as ``cronbus connectors add`` does. The worker is woken by
   the store's notification, takes both tasks and runs them. Times are the store's own,
   not this process's polling: ``source`` ends at the ``published_at`` of the topic's last
   event (the topic holds every row), ``pipeline`` at the sink task's last commit (its
   ``updated_at`` once its committed offset is the topic's end: the file holds every row,
   flushed and fsynced). Figures: rows / seconds for each (``first_event_s``: from the
   creation to the first event, i.e. waking the worker and starting the tasks). Checked
   after: the topic holds each row once, in key order, and the sink file every row.
2. ``failover``: the same table, ``--trickle`` rows (200) inserted every 0.1 s so the source
   always has new rows, and only the ``sql-source``. A worker takes the source task (read
   from the store as ``cronbus connectors show --json`` shows it: holder and position), a
   second worker registers, and after a random delay of up to a third of the lease (so the
   kill falls anywhere in the survivor's cycle; ``kill_delay_s``) the first is SIGKILLed.
   Figures: seconds from the kill until the survivor holds the task (the store polled every
   20 ms), and until its position moves again (its first commit). The lease is ``--lease``
   seconds (``CRONBUS_CONNECTOR_LEASE_SECONDS``: default 15 s, the setting's default;
   ``--quick``: 3 s). A holder renews it every lease / 3 and a worker looks for free tasks as
   often, so expect between 2/3 and 4/3 of the lease, about the lease on average: the lease
   the dead worker had left at the kill (``lease_left_s``) is printed with it; ``--repeat``
   gives the median and range. Checked after: the topic holds every inserted row once, in
   key order.

Nothing asserts on timing; a failed check (a row missing or twice) is reported and the
script exits with code 1.

Example: ``.venv/bin/python bench/connectors.py --store both`` (``--quick``: 10,000 rows and
a 3 s lease)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from _common import (
    BENCH_DIR,
    Figure,
    check_alive,
    exit_on_sigterm,
    heading,
    measurement_parser,
    print_environment,
    print_table,
    report_group,
    stop_processes,
    store_choices,
    wait_for_workers,
    worker_env,
)
from cronbus import App
from cronbus.connectors.records import ConnectorTask
from cronbus.services import Services

BENCH = "connectors"
TOPIC = "orders"
SOURCE = "orders-in"
SINK = "orders-out"
PARTITION = "table:orders"
TRICKLE_SECONDS = 0.1
POLL_SECONDS = 0.05
HELD_POLL_SECONDS = 0.02
READ = 10_000

# The app the worker processes serve: the built-in connector kinds are every app's.
app = App()


@app.task(name="bench.connectors.noop")
def noop() -> None:
    """Never deferred: a worker whose app has no task warns that it claims nothing."""


# -- stores and the source table -------------------------------------------------------------------
@dataclass(frozen=True)
class Rig:
    """One measurement's store, source table and sink file."""

    kind: str
    store: str
    source: str
    """The ``sql-source``'s ``url``: the database holding ``orders``."""
    folder: Path


def _url(server: str, **options: str) -> str:
    parts = urlsplit(server)
    query = {**dict(parse_qsl(parts.query, keep_blank_values=True)), **options}
    # quote, not quote_plus: libpq reads "+" as itself (in options=-c search_path=...).
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


@contextlib.contextmanager
def fresh_rig(kind: str, server: str) -> Iterator[Rig]:
    """A new store with an empty ``orders`` table beside it (SQLite: ``rows.db`` in the same
    temporary folder; PostgreSQL: a new schema on ``server`` for the store and a new database
    for the table, since connectors refuse the store's own database); all removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="cronbus-bench-conn-") as name:
        folder = Path(name)
        if kind == "sqlite":
            rows = folder / "rows.db"
            with contextlib.closing(sqlite3.connect(rows)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")  # the trickle writes while it is read
                conn.execute(_CREATE)
            yield Rig(kind, f"sqlite:///{folder / 'store.db'}", f"sqlite:///{rows}", folder)
            return
        with _schemas(server, 1) as (store,), _database(server) as source:
            with _pg(source) as conn:
                conn.execute(_CREATE)
            yield Rig(kind, _url(server, schema=store), source, folder)


_CREATE = "CREATE TABLE orders (id integer PRIMARY KEY, customer text, amount integer)"


@contextlib.contextmanager
def _schemas(server: str, count: int) -> Iterator[list[str]]:
    names = [f"bench_conn_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    with _pg(server) as conn:
        for schema in names:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield names
    finally:
        with _pg(server) as conn:
            for schema in names:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def _database(server: str) -> Iterator[str]:
    """A new database on ``server`` (its URL), dropped afterwards."""
    name = f"bench_conn_{uuid.uuid4().hex[:10]}"
    with _pg(server) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        with _pg(server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def allow(rig: Rig) -> dict[str, str]:
    """The settings that let the connectors use the rig's folder and table database, as an
    operator gives them (applied to this process's app too)."""
    app.settings = app.settings.with_overrides(
        connector_files=(str(rig.folder),), connector_databases=(rig.source,)
    )
    return {"CRONBUS_CONNECTOR_FILES": str(rig.folder), "CRONBUS_CONNECTOR_DATABASES": rig.source}


def _pg(server: str) -> Any:
    import psycopg  # only PostgreSQL measurements need it

    base = urlunsplit(urlsplit(server)._replace(query=""))
    return psycopg.connect(base, autocommit=True)


def row(n: int) -> tuple[int, str, int]:
    """Row ``n`` of the source table: (id, customer, amount)."""
    return n, f"customer-{n % 997}", (n * 7919) % 100_000


class Table:
    """Inserts rows into the rig's ``orders`` table, ids counting up from 1."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.last = 0

    def insert(self, count: int) -> None:
        """Insert the next ``count`` rows in one transaction."""
        rows = [row(n) for n in range(self.last + 1, self.last + count + 1)]
        if self.rig.kind == "sqlite":
            path = urlsplit(self.rig.source).path[1:]
            with contextlib.closing(sqlite3.connect(path, timeout=30)) as db, db:
                db.executemany("INSERT INTO orders VALUES (?, ?, ?)", rows)
        else:
            import psycopg

            with (
                psycopg.connect(self.rig.source) as conn,
                conn.cursor() as cursor,
                cursor.copy("COPY orders FROM STDIN") as copy,
            ):
                for values in rows:
                    copy.write_row(values)
        self.last += count


# -- worker processes ------------------------------------------------------------------------------
class Workers:
    """``cronbus worker --app connectors:app`` subprocesses; on exit every one still running is
    stopped (SIGTERM, then SIGKILL after ``stop_timeout``)."""

    def __init__(
        self,
        url: str,
        *,
        lease: float | None = None,
        stop_timeout: float = 30.0,
        extra: dict[str, str] | None = None,
    ):
        self.url = url
        self.extra = dict(extra or {})
        """More environment for each worker (the connectors' allow lists)."""
        self.lease = lease
        self.stop_timeout = stop_timeout
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> subprocess.Popen[bytes]:
        """Launch one more worker."""
        env = {**worker_env(), **self.extra}
        if self.lease is not None:
            env["CRONBUS_CONNECTOR_LEASE_SECONDS"] = str(self.lease)
        command = [
            *(sys.executable, "-m", "cronbus", "worker", "--app", "connectors:app"),
            *("--store", self.url, "--concurrency", "1", "--log-level", "warning"),
        ]
        proc = subprocess.Popen(command, env=env, cwd=BENCH_DIR, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    async def ready(self, *procs: subprocess.Popen[bytes]) -> dict[int, str]:
        """Wait until the processes are registered and alive; their worker ids by pid."""
        self.check_alive()
        pids = [p.pid for p in procs]
        await wait_for_workers(app.store, pids, 60.0)
        return {w.pid: w.id for w in await app.store.list_workers(time.time())}

    def kill(self, proc: subprocess.Popen[bytes]) -> float:
        """SIGKILL ``proc`` and reap it; the time the signal was sent."""
        proc.send_signal(signal.SIGKILL)
        killed = time.time()
        proc.wait(10)
        self.procs.remove(proc)
        return killed

    def check_alive(self) -> None:
        """Raise if a worker process has exited."""
        check_alive(self.procs)

    def stop(self) -> None:
        """SIGTERM every worker, wait, and SIGKILL those still there."""
        stop_processes(self.procs, self.stop_timeout)
        self.procs = []


async def _until(
    what: str,
    check: Callable[[], Awaitable[bool]],
    timeout: float,
    workers: Workers,
    every: float = POLL_SECONDS,
) -> None:
    """Poll the async ``check()`` until it is true; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout}s")
        workers.check_alive()
        await asyncio.sleep(every)


# -- reading the store -----------------------------------------------------------------------------
async def _task(name: str) -> ConnectorTask:
    """A connector's one task, as ``cronbus connectors show --json`` shows it."""
    return (await Services(app).connectors.get(name)).tasks[0].task


async def _source_position() -> int:
    return int((await _task(SOURCE)).positions.get(PARTITION, 0))


async def _sink_position() -> int:
    return int((await _task(SINK)).positions.get(TOPIC, 0))


async def _topic_end() -> int:
    return (await app.store.get_topic(TOPIC)).last_offset


async def _topic_ids() -> list[str]:
    """Every event id of the topic, in offset order."""
    ids: list[str] = []
    after = 0
    while chunk := await app.store.read_events(TOPIC, after, READ):
        ids.extend(e.id for e in chunk)
        after = chunk[-1].offset
    return ids


def _check_topic(ids: list[str], rows: int, label: str, problems: list[str]) -> None:
    expected = [f"orders:{n}" for n in range(1, rows + 1)]
    if ids != expected:
        twice = len(ids) - len(set(ids))
        problems.append(
            f"{label}: the topic holds {len(ids)} events ({twice} repeated ids) for {rows} rows,"
            " or not in key order"
        )


def _sink_ids(path: Path) -> tuple[int, set[str]]:
    """Lines and distinct event ids of the sink file."""
    lines = path.read_bytes().splitlines()
    return len(lines), {json.loads(line)["id"] for line in lines}


# -- the measurements ------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one measurement gives: figures, and the checks that failed."""

    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


async def pipeline(rig: Rig, args: argparse.Namespace) -> Outcome:
    """Measurement 1: ``--rows`` rows through sql-source → topic → file-sink, one worker."""
    out = Outcome()
    seeded = time.perf_counter()
    Table(rig).insert(args.rows)
    seed_s = time.perf_counter() - seeded
    sink = rig.folder / "orders.jsonl"
    source = {
        "url": rig.source,
        "table": "orders",
        "key": "id",
        "topic": TOPIC,
        "batch": args.batch,
    }
    app.use_store(rig.store)
    async with app:
        with Workers(rig.store, extra=allow(rig)) as workers:
            await workers.ready(workers.start())
            begin = time.time()
            await Services(app).connectors.create(SOURCE, "sql-source", source)
            await Services(app).connectors.create(
                SINK, "file-sink", {"path": str(sink), "topic": TOPIC}
            )

            async def source_done() -> bool:
                return await _source_position() >= int(args.rows)

            async def sink_done() -> bool:
                return await _sink_position() == await _topic_end()

            await _until("the source read every row", source_done, args.timeout, workers)
            await _until("the sink wrote every event", sink_done, args.timeout, workers)
            sink_end = (await _task(SINK)).updated_at
            ids = await _topic_ids()
            (first,) = await app.store.read_events(TOPIC, 0, 1)
            (last,) = await app.store.read_events(TOPIC, await _topic_end() - 1, 1)
    label = f"{rig.kind} pipeline"
    _check_topic(ids, args.rows, label, out.problems)
    lines, written = _sink_ids(sink)
    if written != set(ids):
        out.problems.append(f"{label}: the sink file holds {len(written)} of {len(ids)} events")
    source_s = last.published_at - begin
    pipeline_s = sink_end - begin
    settings = {
        "rows": args.rows,
        "batch": args.batch,
        "source_s": round(source_s, 2),
        "pipeline_s": round(pipeline_s, 2),
        "first_event_s": round(first.published_at - begin, 2),
        "sink_lines": lines,
        "seed_s": round(seed_s, 1),
        "workers": 1,
        "store": rig.kind,
    }
    group = [
        Figure(BENCH, f"{label} source -> topic", args.rows / source_s, "rows/s", settings),
        Figure(
            BENCH, f"{label} source -> topic -> file", args.rows / pipeline_s, "rows/s", settings
        ),
    ]
    out.figures.extend(report_group(label, group))
    return out


async def failover(rig: Rig, args: argparse.Namespace) -> Outcome:
    """Measurement 2: SIGKILL the worker holding the source task; time until it moves."""
    out = Outcome()
    table = Table(rig)
    table.insert(args.trickle)
    source = {"url": rig.source, "table": "orders", "key": "id", "topic": TOPIC}
    app.use_store(rig.store)
    async with app:
        with Workers(rig.store, lease=args.lease, extra=allow(rig)) as workers:
            first = workers.start()
            ids = await workers.ready(first)
            await Services(app).connectors.create(SOURCE, "sql-source", source)
            stop = asyncio.Event()
            trickle = asyncio.create_task(_trickle(table, args.trickle, stop))
            try:
                timing = await _kill_holder(workers, first, ids[first.pid], args)
            finally:
                # Not cancelled: an insert in its thread would go on after the topic was read,
                # and its rows be counted as lost.
                stop.set()
                await trickle

            async def caught_up() -> bool:
                return await _source_position() >= table.last

            await _until("the source caught up", caught_up, args.timeout, workers)
            topic = await _topic_ids()
    label = f"{rig.kind} failover"
    _check_topic(topic, table.last, label, out.problems)
    settings = {
        "lease_s": args.lease,
        "renew_every_s": round(args.lease / 3, 2),
        "lease_left_s": round(timing.lease_left, 2),
        "kill_delay_s": round(timing.delay, 2),
        "rows": table.last,
        "trickle": f"{args.trickle}/{TRICKLE_SECONDS}s",
        "workers": 2,
        "store": rig.kind,
    }
    name = f"{label} after SIGKILL (lease {args.lease:g} s)"
    group = [
        Figure(BENCH, f"{name} until held by the other", timing.held, "s", settings, False),
        Figure(BENCH, f"{name} until its position moves", timing.moving, "s", settings, False),
    ]
    out.figures.extend(report_group(name, group))
    return out


async def _trickle(table: Table, count: int, stop: asyncio.Event) -> None:
    """Insert ``count`` rows every TRICKLE_SECONDS until ``stop`` is set."""
    while not stop.is_set():
        await asyncio.to_thread(table.insert, count)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), TRICKLE_SECONDS)


@dataclass(frozen=True)
class Failover:
    """The kill's delay after the survivor registered; seconds after the kill: the lease left
    then, until the task was held elsewhere, until its position moved."""

    delay: float
    lease_left: float
    held: float
    moving: float


async def _kill_holder(
    workers: Workers, first: subprocess.Popen[bytes], first_id: str, args: argparse.Namespace
) -> Failover:
    async def first_moving() -> bool:
        task = await _task(SOURCE)
        return task.holder == first_id and bool(task.positions)

    await _until("the first worker runs the source", first_moving, args.timeout, workers)
    second = workers.start()
    second_id = (await workers.ready(second))[second.pid]
    # The survivor looks for free tasks every lease / 3 from its start: a kill at once would
    # always fall at the same point of its cycle. A random point samples every case.
    delay = random.uniform(0.0, args.lease / 3)
    await asyncio.sleep(delay)
    killed = workers.kill(first)
    # The dead worker's last lease: nobody else can take the task before it runs out.
    dead = await _task(SOURCE)
    at_kill = int(dead.positions[PARTITION])

    async def held() -> bool:
        return (await _task(SOURCE)).holder == second_id

    async def moving() -> bool:
        task = await _task(SOURCE)
        return task.holder == second_id and int(task.positions[PARTITION]) > at_kill

    timeout = args.lease * 3 + args.timeout
    await _until("the survivor holds the task", held, timeout, workers, HELD_POLL_SECONDS)
    held_at = time.time()
    await _until("the position moves again", moving, timeout, workers, HELD_POLL_SECONDS)
    moving_at = time.time()
    left = (dead.lease_expires_at or killed) - killed
    return Failover(delay, left, held_at - killed, moving_at - killed)


# -- main ------------------------------------------------------------------------------------------
MEASUREMENTS = {"pipeline": pipeline, "failover": failover}
QUICK = {"rows": 10_000, "lease": 3.0}


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = measurement_parser(__doc__, list(MEASUREMENTS))
    parser.add_argument("--rows", type=int, default=100_000, help="source rows (100,000)")
    parser.add_argument("--batch", type=int, default=1000, help="sql-source batch (1000)")
    parser.add_argument(
        "--lease",
        type=float,
        default=15.0,
        help="connector lease seconds in the failover (15, CRONBUS_CONNECTOR_LEASE_SECONDS' "
        "default)",
    )
    parser.add_argument(
        "--trickle", type=int, default=200, help="rows inserted every 0.1 s in the failover"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per wait")
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them (exit 1 if a check failed)."""
    args = build_parser().parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == build_parser().get_default(name):
                setattr(args, name, value)
    if environment:
        print_environment()
    heading("connectors: sql-source -> topic -> file-sink, and a dead worker's task moving")
    figures: list[Figure] = []
    problems: list[str] = []
    for _ in range(args.repeat):
        for kind, server in store_choices(args.store, keep_query=False):
            for name in args.only or list(MEASUREMENTS):
                with fresh_rig(kind, server) as rig:
                    outcome = asyncio.run(MEASUREMENTS[name](rig, args))
                figures.extend(outcome.figures)
                problems.extend(outcome.problems)
    for problem in problems:
        print(f"CHECK FAILED: {problem}", file=sys.stderr, flush=True)
    if problems and environment:
        print_table(figures)
        raise SystemExit(1)
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
