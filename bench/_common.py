"""Helpers shared by the benchmarks: stores, figures, statistics and worker subprocesses.

Nothing here asserts on timing: benchmarks print figures, with the settings that produced them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from cronbus import __version__
from cronbus.store import Store, open_store

BENCH_DIR = Path(__file__).resolve().parent
WORKER_SCRIPT = BENCH_DIR / "_worker.py"
PG_SERVER = os.environ.get("CRONBUS_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
"""The PostgreSQL server of the benchmarks that make schemas of their own."""


# -- figures -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number, with the settings that produced it."""

    bench: str
    name: str
    value: float
    unit: str
    settings: dict[str, Any] = field(default_factory=dict)
    higher_is_better: bool = True
    target: float | None = None
    """The goal for this figure, if there is one (a minimum or maximum, see higher_is_better)."""

    @property
    def meets_target(self) -> bool | None:
        """Whether the value reaches the target; None without a target."""
        if self.target is None:
            return None
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def describe_target(self) -> str:
        """The target as text, e.g. ``>= 3000``."""
        if self.target is None:
            return ""
        return f"{'>=' if self.higher_is_better else '<'} {format_value(self.target)}"


def format_value(value: float) -> str:
    """A number rounded for people: thousands separated, a few significant digits."""
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_settings(settings: dict[str, Any]) -> str:
    """``key=value`` pairs in insertion order."""
    return " ".join(f"{key}={value}" for key, value in settings.items())


def report(figure: Figure) -> Figure:
    """Print one figure with its settings on one line, and return it."""
    target = figure.describe_target()
    verdict = ""
    if target:
        verdict = f"  [target {target}: {'met' if figure.meets_target else 'NOT met'}]"
    print(
        f"[{figure.bench}] {figure.name}: {format_value(figure.value)} {figure.unit}{verdict}\n"
        f"    settings: {format_settings(figure.settings)}",
        flush=True,
    )
    return figure


def report_group(title: str, figures: Sequence[Figure]) -> list[Figure]:
    """Print several figures measured together (same settings) on one line, and return them."""
    parts = []
    for figure in figures:
        name = figure.name.removeprefix(title).strip() or figure.name
        part = f"{name} {format_value(figure.value)} {figure.unit}"
        if figure.target is not None:
            verdict = "met" if figure.meets_target else "NOT met"
            part += f" [target {figure.describe_target()}: {verdict}]"
        parts.append(part)
    settings = figures[0].settings if figures else {}
    print(
        f"[{figures[0].bench if figures else '?'}] {title}: {' | '.join(parts)}\n"
        f"    settings: {format_settings(settings)}",
        flush=True,
    )
    return list(figures)


def print_environment() -> None:
    """One line about the machine and versions the figures come from."""
    print(
        f"environment: python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"cronbus {__version__}, {os.cpu_count()} CPUs, {platform.system()} "
        f"{platform.release()}, temp dir {tempfile.gettempdir()}",
        flush=True,
    )


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so ``finally`` blocks stop the worker processes."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def heading(text: str) -> None:
    """Print a section heading."""
    print(f"\n=== {text} ===", flush=True)


def combine(figures: Sequence[Figure]) -> list[Figure]:
    """One figure per (bench, name): the median over repetitions, noting their range."""
    groups: dict[tuple[str, str], list[Figure]] = {}
    for figure in figures:
        groups.setdefault((figure.bench, figure.name), []).append(figure)
    combined = []
    for group in groups.values():
        first = group[0]
        values = [f.value for f in group]
        settings = dict(first.settings)
        settings.pop("repetition", None)
        if len(group) > 1:
            settings["repetitions"] = len(group)
            settings["range"] = f"{format_value(min(values))}..{format_value(max(values))}"
        combined.append(
            Figure(
                first.bench,
                first.name,
                statistics.median(values),
                first.unit,
                settings,
                first.higher_is_better,
                first.target,
            )
        )
    return combined


def print_table(figures: Sequence[Figure]) -> None:
    """A summary table: one row per figure (medians and ranges when there were repetitions)."""
    combined = combine(figures)
    ranges = any("range" in f.settings for f in combined)
    header = ["benchmark", "figure", "value", "unit", "target", "status"]
    if ranges:
        header.insert(4, "range")
    rows = [header]
    for f in combined:
        status = {None: "", True: "met", False: "NOT met"}[f.meets_target]
        row = [f.bench, f.name, format_value(f.value), f.unit, f.describe_target(), status]
        if ranges:
            row.insert(4, str(f.settings.get("range", "")))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for index, row in enumerate(rows):
        cells = [
            cell.rjust(widths[i]) if i == 2 else cell.ljust(widths[i]) for i, cell in enumerate(row)
        ]
        print("  ".join(cells).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


# -- statistics ----------------------------------------------------------------------------------
def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# -- stores --------------------------------------------------------------------------------------
def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store`` and ``--repeat``, shared by every benchmark."""
    parser.add_argument(
        "--store",
        default=None,
        help="store URL (default: a fresh SQLite file in a temporary folder for each "
        "repetition, removed at exit). Each measurement uses its own queue, so a shared "
        "store is fine, but nothing else should be using it.",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="repetitions of each measurement (default 1)"
    )


class Stores:
    """Hands out store URLs: the one given, or a fresh SQLite file per call in a temp folder."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Stores:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def fresh(self, tag: str) -> str:
        """A store URL for one measurement."""
        if self.url is not None:
            return self.url
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="cronbus-bench-")
        path = Path(self._tmp.name) / f"{tag}-{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{path}"


def describe_store(url: str) -> str:
    """The store URL, shortened for printing when it is a temporary file."""
    tmp = tempfile.gettempdir()
    return url.replace(f"sqlite:///{tmp}", "sqlite:///$TMP")


def unique_queue(prefix: str) -> str:
    """A queue name nobody else uses, so measurements sharing a store stay apart."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sqlite_path(url: str) -> str | None:
    """The file of an SQLite store URL, or None for other stores."""
    store = open_store(url)
    path = getattr(store, "path", None)
    return path if isinstance(path, str) else None


def attempt_window(url: str, queue: str) -> dict[str, Any] | None:
    """Exact timing of a queue's attempts, read from the store's tables (SQLite or PostgreSQL).

    Returns the first start, the last finish, the number of attempts and the attempts per
    worker, or None when the store cannot be read this way. This reads the schema directly,
    so a benchmark can time the work itself instead of its own polling.
    """
    if url.startswith(("postgresql://", "postgres://")):
        return _pg_attempt_window(url, queue)
    path = sqlite_path(url)
    if path is None:
        return None
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
            first, last, count = conn.execute(_WINDOW.replace("%s", "?"), (queue,)).fetchone()
            per_worker = conn.execute(_PER_WORKER.replace("%s", "?"), (queue,)).fetchall()
    except sqlite3.Error:
        return None
    return {"first": first, "last": last, "count": count, "per_worker": per_worker}


_WINDOW = (
    "SELECT min(a.started_at), max(a.finished_at), count(*) FROM attempts a "
    "JOIN runs r ON r.id = a.run_id WHERE r.queue = %s"
)
_PER_WORKER = (
    "SELECT a.worker_id, count(*) FROM attempts a JOIN runs r ON r.id = a.run_id "
    "WHERE r.queue = %s GROUP BY a.worker_id ORDER BY 2 DESC"
)


def _pg_server(url: str) -> tuple[str, str]:
    """The server's connection string and the store's schema, from a PostgreSQL store URL."""
    parts = urlsplit(url)
    schema = dict(parse_qsl(parts.query)).get("schema", "cronbus")
    return urlunsplit(parts._replace(query="")), schema


def pg_commits(url: str) -> int | None:
    """Transactions committed so far in a PostgreSQL store's database (None for other stores).

    The server's statistics lag by up to a second (each backend reports when idle), so read
    this after the processes being measured have stopped.
    """
    if not url.startswith(("postgresql://", "postgres://")):
        return None
    import psycopg  # only PostgreSQL benchmarks need it

    server, _ = _pg_server(url)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else None


def _pg_attempt_window(url: str, queue: str) -> dict[str, Any] | None:
    import psycopg  # only PostgreSQL benchmarks need it
    from psycopg import sql

    server, schema = _pg_server(url)
    try:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            row = conn.execute(_WINDOW, (queue,)).fetchone()
            per_worker = conn.execute(_PER_WORKER, (queue,)).fetchall()
    except psycopg.Error:
        return None
    if row is None:
        return None
    first, last, count = row
    return {"first": first, "last": last, "count": count, "per_worker": per_worker}


async def wait_for_workers(store: Store, pids: Sequence[int], timeout: float = 30.0) -> None:
    """Poll the worker registry until a worker of each process id is registered and alive."""
    deadline = time.monotonic() + timeout
    wanted = set(pids)
    while True:
        workers = await store.list_workers(time.time())
        alive = {w.pid for w in workers if w.state.value == "alive"}
        if wanted <= alive:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers {sorted(wanted - alive)} did not register in {timeout}s")
        await asyncio.sleep(0.01)


# -- worker processes ----------------------------------------------------------------------------
@contextlib.contextmanager
def fresh_pg_schema(server: str, prefix: str) -> Iterator[str]:
    """A new schema (``<prefix>_<random>``) on the PostgreSQL ``server``, as the server's URL
    with ``schema=`` set; dropped afterwards."""
    import psycopg  # only PostgreSQL measurements need it
    from psycopg import sql

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    base = urlunsplit(urlsplit(server)._replace(query=""))
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        parts = urlsplit(server)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        # quote, not quote_plus: libpq reads "+" as itself (e.g. in options=-c jit=off).
        text = urlencode({**query, "schema": schema}, quote_via=quote)
        yield urlunsplit(parts._replace(query=text))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def worker_env() -> dict[str, str]:
    """The environment of a worker process: ``bench/`` first on ``PYTHONPATH``."""
    env = dict(os.environ)
    parts = [str(BENCH_DIR)]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


class WorkerPool:
    """Worker subprocesses (``bench/_worker.py``), stopped with SIGTERM and killed if need be.

    Use as a context manager: leaving it stops every process, even on error.
    """

    def __init__(
        self,
        store: str,
        *,
        count: int,
        queues: str,
        concurrency: int,
        wait_go: bool = False,
        extra: Sequence[str] = (),
        stop_timeout: float = 30.0,
    ) -> None:
        self.store = store
        self.count = count
        self.queues = queues
        self.concurrency = concurrency
        self.wait_go = wait_go
        self.extra = list(extra)
        self.stop_timeout = stop_timeout
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers."""
        return [p.pid for p in self.procs]

    def __enter__(self) -> WorkerPool:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the processes (with ``wait_go``, wait until each has printed ``ready``)."""
        for index in range(self.count):
            command = [
                sys.executable,
                str(WORKER_SCRIPT),
                "--store",
                self.store,
                "--queues",
                self.queues,
                "--concurrency",
                str(self.concurrency),
                "--parent",
                str(os.getpid()),
                *[arg.replace("{index}", str(index)) for arg in self.extra],
            ]
            if self.wait_go:
                command.append("--wait-go")
            self.procs.append(
                subprocess.Popen(
                    command,
                    env=worker_env(),
                    stdin=subprocess.PIPE if self.wait_go else subprocess.DEVNULL,
                    stdout=subprocess.PIPE if self.wait_go else subprocess.DEVNULL,
                )
            )
        if self.wait_go:
            for proc in self.procs:
                self._await_ready(proc, timeout=60.0)

    @staticmethod
    def _await_ready(proc: subprocess.Popen[bytes], timeout: float) -> None:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            raise RuntimeError(
                f"worker process {proc.pid} did not get ready (exit code {proc.poll()})"
            )

    def go(self) -> None:
        """Release workers started with ``wait_go``."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            proc.stdin.close()

    def check_alive(self) -> None:
        """Raise if a worker process has exited."""
        check_alive(self.procs)

    def stop(self) -> None:
        """SIGTERM every process, wait for it to drain, and SIGKILL what is still there."""
        stop_processes(self.procs, self.stop_timeout)
        self.procs = []


def check_alive(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Raise if one of the worker processes has exited."""
    for proc in procs:
        code = proc.poll()
        if code is not None:
            raise RuntimeError(f"worker process {proc.pid} exited early with code {code}")


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM every process, wait up to ``timeout`` for them to drain, SIGKILL the rest."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"worker {proc.pid} ignored SIGTERM; killing it", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def measurement_parser(
    description: str | None, measurements: Sequence[str]
) -> argparse.ArgumentParser:
    """The options every benchmark that makes its own stores shares: ``--store``,
    ``--repeat``, ``--only`` (one of ``measurements``) and ``--quick``."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store",
        default="both",
        help="sqlite, postgres or both (default); a postgresql:// URL means postgres on that "
        f"server, a sqlite:// URL means sqlite (fresh files anyway). Server: {PG_SERVER} "
        "(CRONBUS_TEST_PG)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="repetitions (default 1)")
    parser.add_argument(
        "--only", action="append", choices=list(measurements), help="this measurement only"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    return parser


def store_choices(option: str, *, keep_query: bool = True) -> list[tuple[str, str]]:
    """``--store`` of the benchmarks that make their own stores: (kind, PostgreSQL server) per
    store to measure (``sqlite``, ``postgres``, ``both`` or a store URL)."""
    if option.startswith(("postgresql://", "postgres://")):
        server = option if keep_query else urlunsplit(urlsplit(option)._replace(query=""))
        return [("postgres", server)]
    if option.startswith("sqlite:") or option == "sqlite":
        return [("sqlite", "")]
    if option == "postgres":
        return [("postgres", PG_SERVER)]
    if option == "both":
        return [("sqlite", ""), ("postgres", PG_SERVER)]
    raise SystemExit(f"--store: use sqlite, postgres, both or a store URL, not {option!r}")


@contextlib.contextmanager
def timer() -> Iterator[list[float]]:
    """Measure a block: the list holds the elapsed seconds once the block ends."""
    out: list[float] = []
    start = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - start)
