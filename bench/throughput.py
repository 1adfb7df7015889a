"""No-op runs completed per second by worker processes.

For each variant (a sync no-op task, run in the worker's thread pool, and an async no-op task,
run on its event loop) and each number of worker processes:

1. pre-load ``--runs`` runs into a queue of their own with ``defer_many`` (batches of 1,000);
2. start the worker processes (``bench/_worker.py``); each prints ``ready`` once imported and
   waits, then all are released together, so interpreter start-up is not part of the figure;
3. poll ``store.count_runs()`` every ``--poll`` seconds (100 ms) until every run succeeded;
4. stop the workers with SIGTERM and wait for them.

Figure: runs/s = attempts / (last attempt's finish - first attempt's start), read from the
store's attempts table (SQLite or PostgreSQL), with the share of each worker. The polled rate
(runs / (last poll - first poll that saw a run started)) is printed beside it as a cross-check,
and is the figure for stores whose tables the benchmark cannot read.

Example: ``.venv/bin/python bench/throughput.py --runs 20000 --processes 2,1 --concurrency 16``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from _app import anoop, app, noop
from _common import (
    Figure,
    Stores,
    WorkerPool,
    add_common_arguments,
    attempt_window,
    describe_store,
    exit_on_sigterm,
    heading,
    pg_commits,
    print_environment,
    print_table,
    report,
    unique_queue,
)
from cronbus import Call
from cronbus.states import RunState
from cronbus.task import Task

BENCH = "throughput"
TARGET_2_PROCESSES = 3000.0
VARIANTS: dict[str, Task[Any, Any]] = {"sync": noop, "async": anoop}


async def _preload(url: str, task: Task[Any, Any], queue: str, runs: int, batch: int) -> float:
    """Defer ``runs`` runs of ``task`` into ``queue``; return the seconds it took."""
    app.use_store(url)
    async with app:
        start = time.perf_counter()
        done = 0
        while done < runs:
            size = min(batch, runs - done)
            await task.defer_many_async([Call() for _ in range(size)], queue=queue)
            done += size
        return time.perf_counter() - start


async def _watch(
    url: str, pool: WorkerPool, runs: int, poll: float, timeout: float
) -> tuple[float, float]:
    """Release the workers and poll until every run succeeded; return (first, last) times."""
    app.use_store(url)
    async with app:
        store = app.store
        before = await store.count_runs()
        base_done = before.get(RunState.SUCCEEDED, 0)
        base_running = before.get(RunState.RUNNING, 0)
        pool.go()
        deadline = time.monotonic() + timeout
        first: float | None = None
        while True:
            counts = await store.count_runs()
            now = time.perf_counter()
            done = counts.get(RunState.SUCCEEDED, 0) - base_done
            running = counts.get(RunState.RUNNING, 0) - base_running
            if first is None and (done > 0 or running > 0):
                first = now
            if done >= runs:
                assert first is not None
                return first, now
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {done} of {runs} runs succeeded in {timeout}s; counts: "
                    + ", ".join(f"{k.value}={v}" for k, v in counts.items())
                )
            pool.check_alive()
            await asyncio.sleep(poll)


def measure(
    url: str,
    variant: str,
    *,
    runs: int,
    processes: int,
    concurrency: int,
    poll: float,
    timeout: float,
    worker_args: list[str],
) -> tuple[float, dict[str, Any]]:
    """One measurement: runs/s, and extra details for printing."""
    queue = unique_queue(f"tp-{variant}")
    preload = asyncio.run(_preload(url, VARIANTS[variant], queue, runs, 1000))
    commits_before = pg_commits(url)
    with WorkerPool(
        url,
        count=processes,
        queues=queue,
        concurrency=concurrency,
        wait_go=True,
        extra=worker_args,
    ) as pool:
        first, last = asyncio.run(_watch(url, pool, runs, poll, timeout))
    details: dict[str, Any] = {"preload_s": round(preload, 2), "polled_s": round(last - first, 3)}
    if commits_before is not None:
        time.sleep(1.0)  # the server's statistics lag by up to a second
        commits_after = pg_commits(url)
        if commits_after is not None:
            # Every commit in the database while the workers ran, the benchmark's polls too.
            details["commits_per_run"] = round((commits_after - commits_before) / runs, 3)
    window = attempt_window(url, queue)
    if window and window["first"] is not None and window["last"] is not None:
        exact = window["last"] - window["first"]
        details["exact_s"] = round(exact, 3)
        details["exact_runs_per_s"] = round(window["count"] / exact) if exact > 0 else None
        details["per_worker"] = "/".join(str(c) for _, c in window["per_worker"])
        if exact > 0:
            polled = last - first
            # A tiny drain can end between two polls: then only the exact figure is known.
            details["polled_runs_per_s"] = round(runs / polled) if polled > 0 else None
            return window["count"] / exact, details
    # No attempt window: the polls time it, and a drain within one poll took at most a poll.
    return runs / max(last - first, poll), details


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--runs", type=int, default=20_000, help="runs per measurement")
    parser.add_argument(
        "--processes",
        default="2,1",
        help="comma-separated numbers of worker processes to measure (default 2,1)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="concurrency of each worker (default 16)"
    )
    parser.add_argument(
        "--variants",
        default="sync,async",
        help="comma-separated task variants: sync (thread pool) and/or async (default both)",
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=0.1,
        help="seconds between count_runs polls (default 0.1; each poll scans the runs "
        "table, so short polls take CPU from the workers and the database)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="give up a measurement after this long"
    )
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="extra argument for bench/_worker.py, repeatable; '{index}' becomes the "
        "worker's number (e.g. --worker-arg=--cprofile=/tmp/w{index}.prof)",
    )
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    processes = [int(p) for p in args.processes.split(",") if p]
    variants = [v for v in args.variants.split(",") if v]
    for variant in variants:
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; use sync and/or async")
    figures: list[Figure] = []
    heading("throughput: no-op runs completed per second")
    with Stores(args.store) as stores:
        for rep in range(1, args.repeat + 1):
            for variant in variants:
                for count in processes:
                    url = stores.fresh(f"tp-{variant}-{count}")
                    rate, details = measure(
                        url,
                        variant,
                        runs=args.runs,
                        processes=count,
                        concurrency=args.concurrency,
                        poll=args.poll,
                        timeout=args.timeout,
                        worker_args=args.worker_arg,
                    )
                    settings = {
                        "runs": args.runs,
                        "processes": count,
                        "concurrency": args.concurrency,
                        "task": f"{variant} no-op",
                        "poll_s": args.poll,
                        "store": describe_store(url),
                        "repetition": rep,
                        **details,
                    }
                    name = f"{variant} no-op, {count} process{'es' if count > 1 else ''}"
                    target = TARGET_2_PROCESSES if count == 2 and variant == "sync" else None
                    figures.append(
                        report(Figure(BENCH, name, rate, "runs/s", settings, True, target))
                    )
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
