"""What metrics cost: throughput with metrics on and off, and the time of one scrape.

1. ``throughput``: ``bench/throughput.py``'s measurement (no-op runs pre-loaded, worker
   processes released together, runs/s from the attempts table), with the workers' metrics on
   (the default: every attempt counted, timed and its start delay observed; every store
   transaction timed) and off (``CRONBUS_METRICS=0`` in the workers' environment), alternated
   ``--repeat`` times so that a machine that slows down mid-way weighs on both alike. The figure
   is the cost: (off - on) / off of the medians (target: under 5 %).
2. ``scrape``: ``--queues`` queues (1,000) holding ``--per-queue`` queued runs each, and one
   ``GET /metrics`` on a real metrics port (:class:`cronbus.observability.exposition
   .MetricsServer`) of an app on that store. ``cold``: the store-wide figures are computed for
   that scrape (the process cache cleared and the stored snapshot made stale first: the
   overview's queries, the subscriptions and topics, the rendering); ``warm``: the figures are
   fresh (a scrape within 2 s of another, in this process or any other of the cluster): the
   rendering alone. Figures: the median and the worst of ``--scrapes`` scrapes, in ms.
3. ``cpu``: the same no-op runs executed by a worker in this process (``App(metrics=True)`` or
   ``App(metrics=False)``, alternated), and the process's CPU time per run (every thread: the
   event loop, the task threads, SQLite's) from the release of the worker to the last run's
   end. CPU time, unlike runs/s, hardly moves when other processes load the machine, so this is
   the figure to trust there; the cost is (on - off) / off of the medians.
4. ``hotpath``: the CPU time (``time.process_time``, so other processes' load weighs less than on
   wall-clock figures) of the metrics calls a worker makes per run: the start delay and the
   duration observed, and its share of a batch of 16 recorded outcomes and of the batch's
   store transaction. Times this figure by a worker process's runs/s for the share of a core.

Example: ``.venv/bin/python bench/metrics.py --repeat 3``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import timeit
from typing import Any

import aiohttp

import throughput
from _common import (
    Figure,
    Stores,
    add_common_arguments,
    describe_store,
    exit_on_sigterm,
    heading,
    print_environment,
    print_table,
    report,
)
from cronbus import App, Worker
from cronbus.model import ClaimedRun, NewRun, Outcome
from cronbus.observability.exposition import MetricsServer, listen_metrics
from cronbus.observability.figures import Figures
from cronbus.observability.metrics import Metrics
from cronbus.services.stats import CACHE
from cronbus.states import AttemptOutcome, RunState

BENCH = "metrics"
COST_TARGET = 5.0
"""Percent of throughput that metrics may cost."""


def measure_throughput(args: argparse.Namespace, stores: Stores) -> list[Figure]:
    """Runs/s with metrics on and off, alternated; the cost in percent."""
    rates: dict[str, list[float]] = {"on": [], "off": []}
    before = os.environ.get("CRONBUS_METRICS")
    try:
        for rep in range(1, args.repeat + 1):
            for mode in ("on", "off") if rep % 2 else ("off", "on"):
                os.environ["CRONBUS_METRICS"] = "1" if mode == "on" else "0"
                url = stores.fresh(f"metrics-{mode}")
                rate, details = throughput.measure(
                    url,
                    "sync",
                    runs=args.runs,
                    processes=args.processes,
                    concurrency=args.concurrency,
                    poll=0.1,
                    timeout=300.0,
                    worker_args=[],
                )
                rates[mode].append(rate)
                print(
                    f"  repetition {rep}, metrics {mode}: {rate:,.0f} runs/s "
                    f"({details.get('per_worker', '')})",
                    flush=True,
                )
    finally:
        if before is None:
            os.environ.pop("CRONBUS_METRICS", None)
        else:
            os.environ["CRONBUS_METRICS"] = before
    settings = {
        "runs": args.runs,
        "processes": args.processes,
        "concurrency": args.concurrency,
        "task": "sync no-op",
        "repetitions": args.repeat,
        "store": describe_store(stores.fresh("shown")) if args.store else "fresh SQLite files",
    }
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    cost = 100.0 * (off - on) / off
    return [
        report(Figure(BENCH, "throughput, metrics on", on, "runs/s", {**settings, "all": rates})),
        report(Figure(BENCH, "throughput, metrics off", off, "runs/s", settings)),
        report(Figure(BENCH, "cost of metrics", cost, "%", settings, False, COST_TARGET)),
    ]


async def _fill(app: App, queues: int, per_queue: int) -> None:
    """``per_queue`` queued runs in each of ``queues`` queues, in batches of 5,000."""
    now = app.clock.now()
    news = [
        NewRun(task="bench.noop", queue=f"q{n:05d}", eta=now)
        for n in range(queues)
        for _ in range(per_queue)
    ]
    for start in range(0, len(news), 5000):
        await app.store.defer(news[start : start + 5000], now)


async def _scrapes(url: str, queues: int, per_queue: int, scrapes: int) -> dict[str, Any]:
    """Scrape an app on a store holding ``queues`` queues: cold and warm timings, in ms."""
    app = App(store=url)
    async with app:
        await _fill(app, queues, per_queue)
        server = MetricsServer(app, listen_metrics("127.0.0.1", 0))
        await server.start()
        cold: list[float] = []
        warm: list[float] = []
        size = series = 0
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(scrapes):
                    await _make_stale(app)
                    cold.append(await _get(session, server.url))
                    warm.append(await _get(session, server.url))
                async with session.get(server.url) as response:
                    body = await response.read()
            size = len(body)
            series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        finally:
            await server.stop()
        return {"cold": cold, "warm": warm, "bytes": size, "series": series}


async def _make_stale(app: App) -> None:
    """Make the next scrape compute the figures: forget this process's cached figures (and
    the overview under them), and age the stored snapshot past its time to live."""
    CACHE.clear()
    key = f"metrics:{app.namespace}"
    row = await app.store.get_snapshot(key)
    if row is not None:
        stale = Figures.from_json(row[1])
        await app.store.put_snapshot(key, stale.to_json(), 0.0)


async def _get(session: aiohttp.ClientSession, url: str) -> float:
    start = time.perf_counter()
    async with session.get(url) as response:
        await response.read()
        assert response.status == 200, response.status
    return (time.perf_counter() - start) * 1000.0


def measure_scrape(args: argparse.Namespace, stores: Stores) -> list[Figure]:
    """The time of one scrape with ``--queues`` queues holding queued runs."""
    url = stores.fresh("scrape")
    got = asyncio.run(_scrapes(url, args.queues, args.per_queue, args.scrapes))
    settings = {
        "queues": args.queues,
        "queued_runs": args.queues * args.per_queue,
        "scrapes": args.scrapes,
        "bytes": got["bytes"],
        "series": got["series"],
        "store": describe_store(url),
    }
    figures = []
    for kind in ("cold", "warm"):
        values = got[kind]
        shown = {**settings, "worst_ms": round(max(values), 1)}
        name = f"scrape, {args.queues:,} queues, {kind}"
        median = statistics.median(values)
        figures.append(report(Figure(BENCH, name, median, "ms", shown, False)))
    return figures


async def _cpu_per_run(url: str, metrics: bool, runs: int, concurrency: int) -> float:
    """CPU microseconds per run of an in-process worker executing ``runs`` sync no-ops."""
    app = App(store=url, metrics=metrics)
    noop = app.task(name="bench.noop")(lambda: None)
    async with app:
        queue = f"cpu-{'on' if metrics else 'off'}-{time.monotonic_ns()}"
        await _defer_noops(app, queue, runs)
        worker = Worker(app, queues=queue, concurrency=concurrency)
        start = time.process_time()
        running = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 600.0
        while time.monotonic() < deadline:  # polled like throughput.py: the store says when
            if (await app.store.count_runs()).get(RunState.SUCCEEDED, 0) >= runs:
                break
            await asyncio.sleep(0.2)
        else:
            raise TimeoutError(f"{runs} runs did not all succeed within 600 s")
        spent = time.process_time() - start
        worker.request_stop()
        await running
        del noop
    return spent / runs * 1e6


async def _defer_noops(app: App, queue: str, runs: int) -> None:
    now = app.clock.now()
    news = [NewRun(task="bench.noop", queue=queue, eta=now) for _ in range(runs)]
    for start in range(0, runs, 5000):
        await app.store.defer(news[start : start + 5000], now)


def measure_cpu(args: argparse.Namespace, stores: Stores) -> list[Figure]:
    """CPU time per run with metrics on and off (see the module's docstring)."""
    micros: dict[str, list[float]] = {"on": [], "off": []}
    for rep in range(1, args.repeat + 1):
        for mode in ("on", "off") if rep % 2 else ("off", "on"):
            url = stores.fresh(f"cpu-{mode}")
            got = asyncio.run(_cpu_per_run(url, mode == "on", args.runs, args.concurrency))
            micros[mode].append(got)
            print(f"  repetition {rep}, metrics {mode}: {got:.0f} us CPU per run", flush=True)
    on, off = statistics.median(micros["on"]), statistics.median(micros["off"])
    settings = {"runs": args.runs, "concurrency": args.concurrency, "repetitions": args.repeat}
    return [
        report(Figure(BENCH, "CPU per run, metrics on", on, "us", settings, False)),
        report(Figure(BENCH, "CPU per run, metrics off", off, "us", settings, False)),
        report(
            Figure(BENCH, "CPU cost of metrics", 100 * (on - off) / off, "%", settings, False, 5.0)
        ),
    ]


def measure_hotpath(batch: int = 16, loops: int = 200_000) -> list[Figure]:
    """CPU microseconds of the metrics calls per run (see the module's docstring)."""
    metrics = Metrics()
    claimed = ClaimedRun(
        run_id=1, attempt_id=1, attempt=1, number=1, fence=1, task="bench.noop", queue="q",
        args_json="[]", kwargs_json="{}", max_attempts=1, timeout=None, eta=0.0,
    )  # fmt: skip
    outcome = Outcome(run_id=1, attempt_id=1, outcome=AttemptOutcome.SUCCEEDED)
    ended, done = [(claimed, outcome)] * batch, [True] * batch

    def per_run() -> None:
        metrics.run_started("q", 0.002)
        metrics.attempt_ended("bench.noop", "q", 0.0004)

    def per_batch() -> None:
        metrics.runs_recorded(ended, done)
        metrics.transaction("complete_and_claim", 0.001)

    runs = timeit.Timer(per_run, timer=time.process_time).repeat(5, loops)
    batches = timeit.Timer(per_batch, timer=time.process_time).repeat(5, loops // batch)
    micros = (min(runs) / loops + min(batches) / (loops // batch) / batch) * 1e6
    settings = {"batch": batch, "loops": loops, "timer": "process_time, best of 5"}
    return [report(Figure(BENCH, "metrics calls per run", micros, "us CPU", settings, False))]


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--only", choices=("throughput", "cpu", "scrape", "hotpath"), help="one measurement"
    )
    parser.add_argument("--runs", type=int, default=20_000, help="runs per throughput measure")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=16, help="each worker's slots")
    parser.add_argument("--queues", type=int, default=1000, help="queues of the scrape")
    parser.add_argument("--per-queue", type=int, default=10, help="queued runs per queue")
    parser.add_argument("--scrapes", type=int, default=20, help="scrapes of each kind")
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    figures: list[Figure] = []
    with Stores(args.store) as stores:
        if args.only in (None, "throughput"):
            heading("metrics: throughput with metrics on and off")
            figures += measure_throughput(args, stores)
        if args.only in (None, "cpu"):
            heading("metrics: CPU time per run, in process, with metrics on and off")
            figures += measure_cpu(args, stores)
        if args.only in (None, "scrape"):
            heading("metrics: one scrape of /metrics")
            figures += measure_scrape(args, stores)
        if args.only in (None, "hotpath"):
            heading("metrics: the calls a worker makes per run")
            figures += measure_hotpath()
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
