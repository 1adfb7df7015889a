"""Distribution figures: map-reduce end to end, keys moved on a join, fast work beside slow.

For each store (``--store sqlite|postgres|both``; each measurement gets a fresh SQLite file or a
fresh PostgreSQL schema, dropped after), with real ``cronbus worker --app distribution:app``
processes (queues ``*``, the default):

1. ``map-reduce``: ``--workers`` (2) processes with ``--concurrency`` (8) slots each; a parent
   run calls ``ctx.map(item, range(--items))`` with a reduce task (10,000 no-op items, each
   giving its index back). Figure: seconds from just before deferring the parent to the
   parent's success (its ``finished_at`` as stored, so polling adds nothing). The reduce's
   result is checked: every index, once, in order.
2. ``keys moved``: ``--keys`` (10,000) runs of a hash-routed task (``route="hash"``, one key
   each) deferred with 3 live workers, then the same keys again once a 4th worker has joined.
   The runs are deferred an hour ahead, so nobody runs them; the store picks their
   ``target_worker`` at insert. Figure: the fraction of keys whose target changed (about
   1/4 expected), checked to have moved to the new worker only.
3. ``fast beside slow``: one worker process, concurrency 8. The fast queue gets ``--fast``
   (200) runs of a task returning ``time.time()`` at its start, deferred ``--gap`` (20 ms)
   apart; latency = that start - the time just before the defer call. Measured first with
   the other queue empty, then with ``--slow`` (100,000) runs queued in a slow queue, each
   sleeping 1 s (once the slow queue holds its slots; ``running_mean``: runs running on
   average during the series, sampled every 0.5 s). Before each series, ``--warmup`` fast
   runs are deferred one at a time and left out: a ``*`` worker keeps a slot only for queues
   it saw work in during the last minute, so a fast queue unseen for longer waits for a slow
   run to end (up to 1 s) before its first run starts (that first warm-up's latency is
   printed as ``first_ms``). Figures: p50 and p99 of both series, and ``p99 ratio`` = p99
   with the slow queue / p99 with it empty (target: at most 2). With 200 samples a p99 is
   about the second worst, so on a busy machine the ratio is noisy: ``--fast 1000``.

Nothing asserts on timing; a wrong reduce result, a key moved elsewhere than to the new
worker or a run that did not succeed is reported as a failed check (exit code 1).

Example: ``.venv/bin/python bench/distribution.py --store both`` (``--quick``: smaller sizes)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from _common import (
    BENCH_DIR,
    Figure,
    exit_on_sigterm,
    fresh_pg_schema,
    heading,
    measurement_parser,
    percentile,
    print_environment,
    print_table,
    report,
    report_group,
    sqlite_path,
    store_choices,
    wait_for_workers,
    worker_env,
)
from cronbus import App, Call
from cronbus.model import Run
from cronbus.run_context import RunContext
from cronbus.states import RunState

BENCH = "distribution"
RATIO_TARGET = 2.0
MOVED_TARGET = 0.30
"""About 1/4 of the keys should move when a 4th worker joins 3; this leaves room for chance."""
SLOW_SECONDS = 1.0
HOLD_SECONDS = 3600.0
"""How far ahead the hash-routed runs are deferred: nobody runs them while they are counted."""
BATCH = 1000
FAST_QUEUE = "fast"
SLOW_QUEUE = "slow"

app = App()


# -- the tasks (imported by the worker processes as ``distribution:app``) -------------------------
@app.task(name="bench.dist.item")
def item(index: int) -> int:
    """A no-op map item: gives its index back, so the reduce can check that every item ran."""
    return index


@app.task(name="bench.dist.total")
def total(results: list[int]) -> dict[str, Any]:
    """The reduce: how many results came, their sum, and whether they came in index order."""
    return {
        "count": len(results),
        "sum": sum(results),
        "in_order": results == list(range(len(results))),
    }


@app.task(name="bench.dist.fan")
def fan(items: int, ctx: RunContext) -> int:
    """The map-reduce parent: one child per index, then the reduce."""
    return ctx.map(item, range(items), reduce=total)


@app.task(name="bench.dist.keyed", route="hash", route_key="key")
def keyed(key: str) -> None:
    """A hash-routed run (deferred far ahead: only its target is looked at)."""


@app.task(name="bench.dist.fast")
async def fast() -> float:
    """The wall time at which the attempt started."""
    return time.time()


@app.task(name="bench.dist.slow")
def slow() -> None:
    """Slow work: holds a slot (a thread of the worker's pool) for a second."""
    time.sleep(SLOW_SECONDS)


# -- stores and worker processes -------------------------------------------------------------------
@contextlib.contextmanager
def fresh_store(kind: str, server: str) -> Iterator[str]:
    """A store URL for one measurement: a new SQLite file in a temporary folder, or a new
    PostgreSQL schema on ``server``; removed afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="cronbus-bench-dist-") as folder:
            yield f"sqlite:///{Path(folder) / 'store.db'}"
        return
    with fresh_pg_schema(server, "bench_dist") as url:
        yield url


class Workers:
    """``cronbus worker --app distribution:app`` subprocesses, all stopped on exit (SIGTERM,
    then SIGKILL after ``stop_timeout``)."""

    def __init__(self, url: str, *, stop_timeout: float = 30.0) -> None:
        self.url = url
        self.stop_timeout = stop_timeout
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers started so far."""
        return [p.pid for p in self.procs]

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, count: int, *, concurrency: int) -> list[int]:
        """Launch ``count`` more workers (every queue, ``*``); returns their process ids."""
        command = [
            *(sys.executable, "-m", "cronbus", "worker", "--app", "distribution:app"),
            *("--store", self.url, "--concurrency", str(concurrency), "--log-level", "warning"),
        ]
        started = [
            subprocess.Popen(command, env=worker_env(), cwd=BENCH_DIR, stdin=subprocess.DEVNULL)
            for _ in range(count)
        ]
        self.procs.extend(started)
        return [p.pid for p in started]

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait until every worker started so far is registered and alive."""
        self.check_alive()
        await wait_for_workers(app.store, self.pids, timeout)

    def check_alive(self) -> None:
        """Raise if a worker process has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {proc.pid} exited early with code {proc.returncode}")

    def stop(self) -> None:
        """SIGTERM every worker (a drain), wait, and SIGKILL those still there."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"worker {proc.pid} ignored SIGTERM; killing it", file=sys.stderr)
                proc.kill()
                proc.wait()
        self.procs = []


async def _runs(ids: Sequence[int]) -> dict[int, Run]:
    """Runs by id, read in chunks."""
    found: dict[int, Run] = {}
    for start in range(0, len(ids), BATCH):
        for run in await app.store.get_runs(ids[start : start + BATCH]):
            found[run.id] = run
    return found


async def _until(
    what: str, check: Callable[[], Awaitable[bool]], timeout: float, workers: Workers
) -> None:
    """Poll the async ``check()`` until it is true; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout}s")
        workers.check_alive()
        await asyncio.sleep(0.05)


# -- the measurements ------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one measurement gives: figures, and the checks that failed."""

    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


async def map_reduce(url: str, kind: str, args: argparse.Namespace) -> Outcome:
    """Measurement 1: a map of ``--items`` no-op children and its reduce, end to end."""
    out = Outcome()
    app.use_store(url)
    async with app:
        with Workers(url) as workers:
            workers.start(args.workers, concurrency=args.concurrency)
            await workers.ready()
            before = time.time()
            handle = await fan.defer_async(args.items)
            parent = await handle.wait_async(timeout=args.timeout, raise_error=False)
            # The parent's result is its reduce's; read the reduce run itself when it is known.
            reduced = parent.result
            if parent.children is not None and parent.children.reduce_run_id is not None:
                reduced = (await app.store.get_run(parent.children.reduce_run_id)).result
    expected = {"count": args.items, "sum": args.items * (args.items - 1) // 2, "in_order": True}
    if parent.state is not RunState.SUCCEEDED or parent.finished_at is None:
        out.problems.append(f"{kind} map-reduce: parent ended {parent.state.value}: {parent.error}")
        return out
    if reduced != expected:
        out.problems.append(f"{kind} map-reduce: reduce gave {reduced!r}, not {expected!r}")
    seconds = parent.finished_at - before
    settings = {
        "items": args.items,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "children": parent.children.total if parent.children else None,
        "items_per_s": round(args.items / seconds),
        **_phases(url, parent.id, before, parent.finished_at),
        "reduce": "ok" if reduced == expected else "WRONG",
        "store": kind,
    }
    name = f"{kind} map-reduce {args.items:,} items"
    out.figures.append(report(Figure(BENCH, name, seconds, "s", settings, False)))
    return out


_RUNNING = "SELECT count(*) FROM runs WHERE state = 'running'"
_PHASES = (
    "SELECT (SELECT min(started_at) FROM attempts WHERE run_id = %s), "
    "(SELECT max(finished_at) FROM attempts WHERE run_id = %s), "
    "min(a.started_at), max(a.finished_at) "
    "FROM attempts a JOIN runs r ON r.id = a.run_id "
    "WHERE r.parent_id = %s AND r.child_index IS NOT NULL"
)


def _phases(url: str, parent: int, deferred: float, ended: float) -> dict[str, float]:
    """Where the time went, from the store's attempts: until the parent's body started
    (``start_s``), its body (``map_s``: spawning the children), the children's attempts from
    the first start to the last end (``children_s``), and from then to the parent's end
    (``reduce_s``: the reduce run's wait and attempt)."""
    row = _read(url, _PHASES, (parent, parent, parent))
    if row is None or None in row:
        return {}
    body_start, body_end, first, last = (float(v) for v in row)
    return {
        "start_s": round(body_start - deferred, 2),
        "map_s": round(body_end - body_start, 2),
        "children_s": round(last - first, 2),
        "reduce_s": round(ended - last, 2),
    }


def _read(url: str, query: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """One row of a query on the store's own tables (SQLite or PostgreSQL)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        import sqlite3

        path = sqlite_path(url)
        assert path is not None
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
            found = conn.execute(query.replace("%s", "?"), params).fetchone()
        return None if found is None else tuple(found)
    import psycopg
    from psycopg import sql

    schema = dict(parse_qsl(parts.query)).get("schema", "cronbus")
    with psycopg.connect(urlunsplit(parts._replace(query="")), autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        row = conn.execute(query.encode(), params).fetchone()
    return None if row is None else tuple(row)


async def keys_moved(url: str, kind: str, args: argparse.Namespace) -> Outcome:
    """Measurement 2: hash-routed keys deferred with 3 live workers, then 4."""
    out = Outcome()
    keys = [f"customer-{i}" for i in range(args.keys)]
    app.use_store(url)
    async with app:
        with Workers(url) as workers:
            workers.start(3, concurrency=args.concurrency)
            await workers.ready()
            before = await _defer_keys(keys)
            (joined_pid,) = workers.start(1, concurrency=args.concurrency)
            await workers.ready()
            after = await _defer_keys(keys)
            registry = await app.store.list_workers(time.time())
            joined = next(w.id for w in registry if w.pid == joined_pid)
            runs = await _runs([*before, *after])
    first = [runs[i].target_worker for i in before]
    second = [runs[i].target_worker for i in after]
    moved = [(a, b) for a, b in zip(first, second, strict=True) if a != b]
    untargeted = sum(t is None for t in [*first, *second])
    elsewhere = sum(b != joined for _, b in moved)
    if untargeted:
        out.problems.append(f"{kind} keys moved: {untargeted} runs got no target")
    if elsewhere:
        out.problems.append(f"{kind} keys moved: {elsewhere} keys moved to an old worker")
    spread = sorted((second.count(w) for w in set(second) if w is not None), reverse=True)
    settings = {
        "keys": args.keys,
        "workers": "3 then 4",
        "moved": len(moved),
        "to_new_worker": len(moved) - elsewhere,
        "spread_after": "/".join(str(n) for n in spread),
        "store": kind,
    }
    name = f"{kind} keys moved, 3 -> 4 workers"
    figure = Figure(BENCH, name, len(moved) / len(keys), "of keys", settings, False, MOVED_TARGET)
    out.figures.append(report(figure))
    return out


async def _defer_keys(keys: Sequence[str]) -> list[int]:
    """One hash-routed run per key, deferred an hour ahead in batches; their ids in key order."""
    ids: list[int] = []
    for start in range(0, len(keys), BATCH):
        calls = [Call.of(key) for key in keys[start : start + BATCH]]
        ids.extend(h.id for h in await keyed.defer_many_async(calls, delay=HOLD_SECONDS))
    return ids


async def fast_beside_slow(url: str, kind: str, args: argparse.Namespace) -> Outcome:
    """Measurement 3: the fast queue's start latency, alone and beside a full slow queue."""
    out = Outcome()
    app.use_store(url)
    async with app:
        with Workers(url) as workers:
            workers.start(1, concurrency=args.concurrency)
            await workers.ready()
            alone = await _fast_series(url, args, out, f"{kind} alone")
            preload = await _preload_slow(args.slow)

            async def slow_holds_slots() -> bool:
                counts = await app.store.count_runs()
                return counts.get(RunState.RUNNING, 0) >= int(args.concurrency) - 1

            await _until("slow runs hold the slots", slow_holds_slots, 60.0, workers)
            beside = await _fast_series(url, args, out, f"{kind} beside slow")
            queued = (await app.store.count_runs()).get(RunState.QUEUED, 0)
    settings = {
        "fast": args.fast,
        "gap_ms": args.gap * 1000,
        "warmup": args.warmup,
        "slow_queued": queued,
        "running_mean": round(beside.running, 1),
        "slow_s": SLOW_SECONDS,
        "concurrency": args.concurrency,
        "first_ms": round(beside.first_ms, 1),
        "preload_s": round(preload, 1),
        "store": kind,
    }
    group = [
        Figure(BENCH, f"{kind} fast {label} {stat}", percentile(values, pct), "ms", settings, False)
        for label, values in (("alone", alone.latencies), ("beside slow", beside.latencies))
        for stat, pct in (("p50", 50.0), ("p99", 99.0))
    ]
    ratio = percentile(beside.latencies, 99.0) / percentile(alone.latencies, 99.0)
    group.append(Figure(BENCH, f"{kind} fast p99 ratio", ratio, "x", settings, False, RATIO_TARGET))
    out.figures.extend(report_group(f"{kind} fast", group))
    return out


async def _preload_slow(count: int) -> float:
    """Defer ``count`` slow runs in batches; the seconds it took."""
    start = time.perf_counter()
    for done in range(0, count, BATCH):
        await slow.defer_many_async([Call()] * min(BATCH, count - done), queue=SLOW_QUEUE)
    return time.perf_counter() - start


@dataclass
class Series:
    """One series of fast runs."""

    latencies: list[float]
    """Start - before-defer of each measured run, in ms."""
    first_ms: float
    """The first warm-up run's latency."""
    running: float
    """Runs running on average while the series was deferred (sampled every 0.5 s)."""


async def _sample_running(url: str, samples: list[int]) -> None:
    """Count running runs every 0.5 s until cancelled (through the lease index: counting
    every state would scan the 100,000 queued runs and slow the worker being measured)."""
    while True:
        row = await asyncio.to_thread(_read, url, _RUNNING, ())
        samples.append(int(row[0]) if row else 0)
        await asyncio.sleep(0.5)


async def _fast_series(url: str, args: argparse.Namespace, out: Outcome, label: str) -> Series:
    """Warm-up runs one at a time, then ``--fast`` runs ``--gap`` apart."""
    warm = []
    for _ in range(args.warmup):
        before = time.time()
        handle = await fast.defer_async(queue=FAST_QUEUE)
        run = await handle.wait_async(timeout=args.timeout, raise_error=False)
        warm.append((float(run.result) - before) * 1000 if run.result is not None else 0.0)
    befores: dict[int, float] = {}
    running: list[int] = []
    sampler = asyncio.create_task(_sample_running(url, running))
    begin = time.monotonic()
    try:
        for index in range(args.fast):
            await asyncio.sleep(max(0.0, begin + index * args.gap - time.monotonic()))
            before = time.time()
            handle = await fast.defer_async(queue=FAST_QUEUE)
            befores[handle.id] = before
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    deadline = time.monotonic() + args.timeout
    while True:
        runs = await _runs(list(befores))
        if all(r.state.terminal for r in runs.values()) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    failed = [r.id for r in runs.values() if r.state is not RunState.SUCCEEDED]
    if failed:
        out.problems.append(f"{label}: {len(failed)} fast runs did not succeed")
    latencies = [
        (float(run.result) - befores[run.id]) * 1000
        for run in runs.values()
        if run.state is RunState.SUCCEEDED
    ]
    mean = sum(running) / len(running) if running else float("nan")
    return Series(latencies, warm[0] if warm else float("nan"), mean)


# -- main ------------------------------------------------------------------------------------------
MEASUREMENTS = {"map-reduce": map_reduce, "keys": keys_moved, "fast": fast_beside_slow}
QUICK = {"items": 1000, "keys": 2000, "slow": 10_000, "fast": 100}


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = measurement_parser(__doc__, list(MEASUREMENTS))
    parser.add_argument("--items", type=int, default=10_000, help="map items (10,000)")
    parser.add_argument("--workers", type=int, default=2, help="map-reduce workers (2)")
    parser.add_argument("--concurrency", type=int, default=8, help="slots per worker (8)")
    parser.add_argument("--keys", type=int, default=10_000, help="hash-routed keys (10,000)")
    parser.add_argument("--slow", type=int, default=100_000, help="queued slow runs (100,000)")
    parser.add_argument("--fast", type=int, default=200, help="fast runs per series (200)")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between fast defers")
    parser.add_argument("--warmup", type=int, default=5, help="fast runs left out first (5)")
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
    heading("distribution: map-reduce, keys moved on a join, a fast queue beside a slow one")
    figures: list[Figure] = []
    problems: list[str] = []
    for _ in range(args.repeat):
        for kind, server in store_choices(args.store):
            for name in args.only or list(MEASUREMENTS):
                with fresh_store(kind, server) as url:
                    outcome = asyncio.run(MEASUREMENTS[name](url, kind, args))
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
