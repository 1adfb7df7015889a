"""Defers per second: one at a time (async and sync API) and in bulk with ``defer_many``.

Figures (runs/s = runs made durable per second of wall time, app already open):

* ``one-at-a-time async``: ``await noop.defer_async()`` in a loop; one transaction per run.
* ``bulk async``: ``await noop.defer_many_async(batch)`` with batches of ``--batch`` calls.
* ``one-at-a-time sync``: ``noop.defer()`` inside ``with app:`` (through the app's portal loop).

Example: ``.venv/bin/python bench/defer.py --single 2000 --bulk 50000 --batch 1000``
"""

from __future__ import annotations

import argparse
import asyncio
import time

from _app import app, noop
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
    unique_queue,
)
from cronbus import Call

BENCH = "defer"
BULK_TARGET = 20_000.0


async def _single_async(url: str, n: int) -> float:
    queue = unique_queue("defer-single")
    app.use_store(url)
    async with app:
        start = time.perf_counter()
        for _ in range(n):
            await noop.defer_async(queue=queue)
        elapsed = time.perf_counter() - start
    return n / elapsed


async def _bulk_async(url: str, total: int, batch: int) -> float:
    queue = unique_queue("defer-bulk")
    app.use_store(url)
    async with app:
        done = 0
        start = time.perf_counter()
        while done < total:
            size = min(batch, total - done)
            calls = [Call() for _ in range(size)]
            await noop.defer_many_async(calls, queue=queue)
            done += size
        elapsed = time.perf_counter() - start
    return total / elapsed


def _single_sync(url: str, n: int) -> float:
    queue = unique_queue("defer-sync")
    app.use_store(url)
    with app:
        start = time.perf_counter()
        for _ in range(n):
            noop.defer(queue=queue)
        elapsed = time.perf_counter() - start
    return n / elapsed


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--single", type=int, default=2000, help="runs deferred one at a time (default 2000)"
    )
    parser.add_argument(
        "--bulk", type=int, default=50_000, help="runs deferred in bulk (default 50000)"
    )
    parser.add_argument(
        "--batch", type=int, default=1000, help="calls per defer_many batch (default 1000)"
    )
    parser.add_argument(
        "--sync", type=int, default=2000, help="runs deferred one at a time with the sync API"
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["single", "bulk", "sync"],
        help="leave out a measurement (repeatable)",
    )
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    figures: list[Figure] = []
    heading("defer: runs deferred per second")
    with Stores(args.store) as stores:
        for rep in range(1, args.repeat + 1):
            if "single" not in args.skip:
                url = stores.fresh("defer-single")
                rate = asyncio.run(_single_async(url, args.single))
                settings = {"n": args.single, "store": describe_store(url), "repetition": rep}
                figures.append(
                    report(Figure(BENCH, "one-at-a-time async", rate, "runs/s", settings))
                )
            if "bulk" not in args.skip:
                url = stores.fresh("defer-bulk")
                rate = asyncio.run(_bulk_async(url, args.bulk, args.batch))
                settings = {
                    "total": args.bulk,
                    "batch": args.batch,
                    "store": describe_store(url),
                    "repetition": rep,
                }
                figures.append(
                    report(
                        Figure(BENCH, "bulk async", rate, "runs/s", settings, target=BULK_TARGET)
                    )
                )
            if "sync" not in args.skip:
                url = stores.fresh("defer-sync")
                rate = _single_sync(url, args.sync)
                settings = {"n": args.sync, "store": describe_store(url), "repetition": rep}
                figures.append(
                    report(Figure(BENCH, "one-at-a-time sync", rate, "runs/s", settings))
                )
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
