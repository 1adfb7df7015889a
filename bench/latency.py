"""Defer-to-start latency with an idle worker, and the lateness of delayed runs.

Each sample: sleep a random 5-20 ms (so the worker is idle again), note ``time.time()``, defer a
run of a task that returns ``time.time()`` at its start, wait for the run with
``handle.wait_async`` and take ``start - before_defer``. ``wait_async`` polls, so the time it
returns is never used: only the start time the task reported. Samples are sequential.

Modes:

* ``process``: the worker is another process (``bench/_worker.py``): the figure includes the
  cross-process wake-up (a datagram to the worker's socket), its claim and the task start.
* ``inprocess``: a :class:`cronbus.worker.engine.Worker` runs on the same event loop as the code
  that defers, sharing the app and its store.

Delayed runs: defer with ``delay=--delay`` and take ``start - eta`` (the run's due time as
stored), i.e. how late after its due time the run started.

Figures are in milliseconds: p50, p99 (linear interpolation) and max.

Example: ``.venv/bin/python bench/latency.py --samples 500 --modes process,inprocess``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

from _app import app, stamp, stamp_sync
from _common import (
    Figure,
    Stores,
    WorkerPool,
    add_common_arguments,
    describe_store,
    exit_on_sigterm,
    heading,
    percentile,
    print_environment,
    print_table,
    report_group,
    unique_queue,
    wait_for_workers,
)
from cronbus.states import RunState
from cronbus.task import Task
from cronbus.worker.engine import Worker

BENCH = "latency"
TARGETS_MS = {"process": 10.0, "inprocess": 2.0}
MODES = ("process", "inprocess")
_SETTLE_SECONDS = 0.3


async def _sample(
    task: Task[Any, Any], queue: str, delay: float | None, wait_timeout: float
) -> float:
    """One sample in seconds: start - before-defer, or start - eta for a delayed run."""
    before = time.time()
    handle = await task.defer_async(queue=queue, delay=delay)
    run = await handle.wait_async(timeout=wait_timeout)
    if run.state is not RunState.SUCCEEDED:
        raise RuntimeError(f"run {run.id} ended {run.state.value}: {run.error}")
    started = float(run.result)
    return started - (run.eta if delay is not None else before)


async def _series(
    task: Task[Any, Any],
    queue: str,
    *,
    count: int,
    delay: float | None,
    pause: tuple[float, float],
    rng: random.Random,
    wait_timeout: float,
) -> list[float]:
    """``count`` sequential samples in milliseconds, each after a random pause."""
    out = []
    for _ in range(count):
        await asyncio.sleep(rng.uniform(*pause))
        out.append(1000 * await _sample(task, queue, delay, wait_timeout))
    return out


Measure = Callable[[Task[Any, Any], str], Coroutine[Any, Any, dict[str, list[float]]]]


def _plan(args: argparse.Namespace) -> Measure:
    """The samples one mode takes once its worker is up: warm-up, immediate, delayed."""
    rng = random.Random(args.seed)
    pause = (args.pause_min, args.pause_max)

    async def measure(task: Task[Any, Any], queue: str) -> dict[str, list[float]]:
        await _series(
            task,
            queue,
            count=args.warmup,
            delay=None,
            pause=pause,
            rng=rng,
            wait_timeout=args.wait_timeout,
        )
        results = {
            "defer-to-start": await _series(
                task,
                queue,
                count=args.samples,
                delay=None,
                pause=pause,
                rng=rng,
                wait_timeout=args.wait_timeout,
            )
        }
        if args.delayed_samples > 0:
            results[f"delayed {args.delay:g}s lateness"] = await _series(
                task,
                queue,
                count=args.delayed_samples,
                delay=args.delay,
                pause=pause,
                rng=rng,
                wait_timeout=args.wait_timeout + args.delay,
            )
        return results

    return measure


async def _in_process(
    url: str, task: Task[Any, Any], queue: str, concurrency: int, measure: Measure
) -> dict[str, list[float]]:
    app.use_store(url)
    async with app:
        worker = Worker(app, queues=[queue], concurrency=concurrency)
        running = asyncio.create_task(worker.run(), name="bench-worker")
        try:
            await asyncio.sleep(_SETTLE_SECONDS)
            if running.done():
                running.result()
            return await measure(task, queue)
        finally:
            worker.request_stop(hurry=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, 30)


async def _cross_process(
    url: str, pool: WorkerPool, task: Task[Any, Any], queue: str, measure: Measure
) -> dict[str, list[float]]:
    app.use_store(url)
    async with app:
        await wait_for_workers(app.store, pool.pids)
        # The worker listens for wake-ups just after it registers; give it a moment.
        await asyncio.sleep(_SETTLE_SECONDS)
        return await measure(task, queue)


def measure_mode(
    url: str, mode: str, args: argparse.Namespace
) -> tuple[dict[str, list[float]], str]:
    """All samples of one mode; returns them by figure name, and the task used."""
    task = stamp if args.task == "async" else stamp_sync
    queue = unique_queue(f"lat-{mode}")
    plan = _plan(args)
    if mode == "inprocess":
        return asyncio.run(_in_process(url, task, queue, args.concurrency, plan)), task.name
    with WorkerPool(url, count=1, queues=queue, concurrency=args.concurrency) as pool:
        return asyncio.run(_cross_process(url, pool, task, queue, plan)), task.name


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--samples", type=int, default=500, help="samples per mode (default 500)")
    parser.add_argument(
        "--warmup", type=int, default=20, help="samples taken first and left out (default 20)"
    )
    parser.add_argument(
        "--modes", default="process,inprocess", help="comma-separated: process, inprocess"
    )
    parser.add_argument(
        "--task",
        choices=["async", "sync"],
        default="async",
        help="the stamping task: async (on the loop, default) or sync (in a thread)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="the worker's concurrency (default 8)"
    )
    parser.add_argument(
        "--pause-min", type=float, default=0.005, help="shortest pause between samples, s"
    )
    parser.add_argument(
        "--pause-max", type=float, default=0.020, help="longest pause between samples, s"
    )
    parser.add_argument(
        "--delayed-samples",
        type=int,
        default=50,
        help="delayed-run samples per mode (default 50; 0 leaves them out)",
    )
    parser.add_argument(
        "--delay", type=float, default=0.2, help="delay of the delayed runs, s (default 0.2)"
    )
    parser.add_argument(
        "--wait-timeout", type=float, default=10.0, help="give up one sample after this, s"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the random pauses")
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}; use {', '.join(MODES)}")
    figures: list[Figure] = []
    heading("latency: defer-to-start with an idle worker (ms)")
    with Stores(args.store) as stores:
        for rep in range(1, args.repeat + 1):
            for mode in modes:
                url = stores.fresh(f"lat-{mode}")
                series, task_name = measure_mode(url, mode, args)
                for label, values in series.items():
                    settings = {
                        "mode": mode,
                        "samples": len(values),
                        "warmup": args.warmup,
                        "task": task_name,
                        "concurrency": args.concurrency,
                        "pause_ms": f"{args.pause_min * 1000:g}-{args.pause_max * 1000:g}",
                        "store": describe_store(url),
                        "repetition": rep,
                        "min_ms": round(min(values), 3),
                        "mean_ms": round(sum(values) / len(values), 3),
                    }
                    immediate = label == "defer-to-start"
                    group = []
                    for stat, pct in (("p50", 50.0), ("p99", 99.0), ("max", 100.0)):
                        target = TARGETS_MS[mode] if immediate and stat == "p99" else None
                        group.append(
                            Figure(
                                BENCH,
                                f"{mode}: {label} {stat}",
                                percentile(values, pct),
                                "ms",
                                settings,
                                higher_is_better=False,
                                target=target,
                            )
                        )
                    figures.extend(report_group(f"{mode}: {label}", group))
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
