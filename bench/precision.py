"""How late tasks start after their due time: every-second cron jobs and delayed runs.

Idle workers (concurrency well above the load) should start a run within a few milliseconds of
its due time: the scheduler creates a job's runs up to ``--lookahead`` seconds ahead of their
fire time, and a worker sleeps until the earliest due run. This measures how well that works.

For each layout, ``--jobs`` jobs with the 6-field cron ``* * * * * *`` (every second) run for
``--duration`` seconds, each run of a task that returns ``time.time()`` at its start; meanwhile
runs are deferred every ``--delayed-every`` seconds with a random delay of ``--delay-min`` to
``--delay-max`` seconds. Then the jobs are removed, the runs already created are let finish,
and each run's fire time (or due time) and result are read from the store:

* cron lateness = task start - the run's ``fire_at`` (fires of the first ``--warmup`` seconds
  are left out);
* delayed lateness = task start - the run's ``eta`` (the due time stored at defer).

Beside the cron figures, ``fires`` (distinct fires found / jobs x whole seconds in the window)
and ``duplicates``: the runs beyond one per (job, fire time) in the window. cronbus creates one
run per fire however many schedulers run (each job advances by compare-and-set), so that must be
0; it is worth reading with ``--schedulers`` above 1.

Layouts:

* ``inprocess``: a :class:`~cronbus.scheduler.Scheduler` and a
  :class:`~cronbus.worker.engine.Worker` on the benchmark's own event loop, one app and store
  (what ``cronbus server`` does); the benchmark adds jobs and defers on that loop too.
* ``process``: the scheduler and the worker each in a process of their own
  (``bench/_roles.py --role scheduler`` and ``--role worker``); the benchmark only adds the jobs,
  defers and reads the results. ``--schedulers N`` starts N scheduler processes on the one
  store (issue 15's "3 schedulers running"); they race for the same fires.
* ``both`` (not run by default): one ``bench/_roles.py --role both`` process runs the two roles
  on one loop, the benchmark defers from outside.

Figures in milliseconds: p50, p99 (linear interpolation between closest ranks) and max. Targets
for p99: under 5 ms with the roles in one process, under 10 ms across processes.

Examples: ``.venv/bin/python bench/precision.py --jobs 20 --duration 15``;
``.venv/bin/python bench/precision.py --layouts process --schedulers 3``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _app import app, stamp, stamp_sync
from _common import (
    Figure,
    Stores,
    add_common_arguments,
    describe_store,
    exit_on_sigterm,
    heading,
    percentile,
    print_environment,
    print_table,
    report_group,
    unique_queue,
)
from _roles import RoleProcess
from cronbus.model import Run, RunFilter
from cronbus.runner import Roles
from cronbus.scheduler import DEFAULT_LOOKAHEAD, Scheduler
from cronbus.states import RunState
from cronbus.task import Task
from cronbus.worker.engine import Worker

BENCH = "precision"
LAYOUTS = ("inprocess", "process", "both")
TARGETS_MS = {"inprocess": 5.0, "process": 10.0, "both": 5.0}
EVERY_SECOND = "* * * * * *"
_SETTLE_SECONDS = 0.3
_UNFINISHED = (RunState.SCHEDULED, RunState.QUEUED, RunState.RUNNING)


@dataclass(slots=True)
class Samples:
    """What one layout measured: lateness in milliseconds, and how complete the data is."""

    cron: list[float] = field(default_factory=list)
    delayed: list[float] = field(default_factory=list)
    fires: int = 0
    """Distinct (job, fire time) pairs of the cron runs in the measured window."""
    duplicates: int = 0
    """Cron runs in the window beyond one per (job, fire time): a fire run twice. Must be 0."""
    fires_expected: int = 0
    """Jobs x whole seconds in the measured window."""
    failed: int = 0
    """Runs in the window that did not succeed (or did not finish in time)."""
    load: float = math.nan
    """The 1-minute load average at the end."""


# -- one measurement -----------------------------------------------------------------------------
async def _defer_delayed(
    task: Task[Any, Any], queue: str, until: float, args: argparse.Namespace
) -> list[int]:
    """Defer delayed runs at random intervals until ``until``; return their run ids."""
    rng = random.Random(args.seed)
    ids: list[int] = []
    while args.delayed_every > 0:
        pause = args.delayed_every * rng.uniform(0.5, 1.5)
        if time.time() + pause >= until:
            return ids
        await asyncio.sleep(pause)
        delay = rng.uniform(args.delay_min, args.delay_max)
        handle = await task.defer_async(queue=queue, delay=delay)
        ids.append(handle.id)
    return ids


async def _runs_of(queue: str) -> list[Run]:
    """Every run of ``queue``, newest first."""
    runs: list[Run] = []
    before: int | None = None
    while True:
        page = await app.store.list_runs(RunFilter(queue=queue, limit=1000, before_id=before))
        runs.extend(page)
        if len(page) < 1000:
            return runs
        before = page[-1].id


async def _wait_settled(queue: str, timeout: float) -> None:
    """Wait until no run of ``queue`` is waiting or running (or ``timeout`` passes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = await app.store.list_runs(RunFilter(queue=queue, states=_UNFINISHED, limit=1))
        if not left:
            return
        await asyncio.sleep(0.05)


async def _drive(task: Task[Any, Any], queue: str, args: argparse.Namespace) -> Samples:
    """Add the jobs, defer delayed runs for ``--duration``, remove the jobs, read the runs.

    The app must be open and the scheduler and worker (wherever they run) up.
    """
    names = [f"{queue}.every-second-{i}" for i in range(args.jobs)]
    for name in names:
        await app.jobs.add(name, task, cron=EVERY_SECOND, queue=queue)
    begin = time.time()
    until = begin + args.duration
    deferring = asyncio.create_task(_defer_delayed(task, queue, until, args))
    try:
        await asyncio.sleep(max(0.0, until - time.time()))
        delayed_ids = await deferring
    finally:
        deferring.cancel()
        for name in names:
            await app.jobs.remove(name)
    await _wait_settled(queue, timeout=args.lookahead + args.delay_max + 10.0)
    return _samples(await _runs_of(queue), set(delayed_ids), begin + args.warmup, until, args)


def _samples(
    runs: list[Run], delayed_ids: set[int], start: float, end: float, args: argparse.Namespace
) -> Samples:
    """Lateness (ms) of the cron runs fired in [start, end] and of the delayed runs."""
    out = Samples(load=os.getloadavg()[0])
    out.fires_expected = args.jobs * max(0, math.floor(end) - math.ceil(start) + 1)
    per_fire: Counter[tuple[int, float]] = Counter()
    for run in runs:
        if run.id in delayed_ids:
            due = run.eta
            into = out.delayed
        elif run.job_id is not None and run.fire_at is not None and start <= run.fire_at <= end:
            due = run.fire_at
            into = out.cron
            per_fire[run.job_id, run.fire_at] += 1
        else:
            continue
        if run.state is not RunState.SUCCEEDED or not isinstance(run.result, float):
            out.failed += 1
            continue
        into.append(1000 * (run.result - due))
    # Counted per fire, not per run: a fire run twice must show as a duplicate, not make up
    # for a fire that was missed.
    out.fires = len(per_fire)
    out.duplicates = sum(per_fire.values()) - len(per_fire)
    return out


# -- layouts -------------------------------------------------------------------------------------
async def _in_process(
    url: str, task: Task[Any, Any], queue: str, args: argparse.Namespace
) -> Samples:
    """Scheduler, worker and benchmark on one event loop."""
    app.use_store(url)
    async with app:
        roles = Roles(
            scheduler=Scheduler(app, lookahead=args.lookahead, sync=False),
            worker=Worker(app, queues=[queue], concurrency=args.concurrency),
        )
        running = asyncio.create_task(roles.run(), name="bench-roles")
        try:
            await asyncio.sleep(_SETTLE_SECONDS)
            if running.done():
                running.result()
            return await _drive(task, queue, args)
        finally:
            roles.stop(hurry=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, 30)


async def _client(url: str, task: Task[Any, Any], queue: str, args: argparse.Namespace) -> Samples:
    """The benchmark's side when the roles run in other processes."""
    app.use_store(url)
    async with app:
        return await _drive(task, queue, args)


async def _create_schema(url: str) -> None:
    """Open the store once, so the role processes do not race to apply the migrations."""
    app.use_store(url)
    async with app:
        pass


def schedulers_of(layout: str, args: argparse.Namespace) -> int:
    """How many schedulers run in ``layout``: ``--schedulers`` for ``process``, else one."""
    return args.schedulers if layout == "process" else 1


def measure_layout(url: str, layout: str, args: argparse.Namespace) -> Samples:
    """Run one layout on a store and return its samples."""
    task = stamp if args.task == "async" else stamp_sync
    queue = unique_queue(f"prec-{layout}")
    if layout == "inprocess":
        return asyncio.run(_in_process(url, task, queue, args))
    asyncio.run(_create_schema(url))
    options: dict[str, Any] = {"queues": queue, "concurrency": args.concurrency}
    with contextlib.ExitStack() as stack:
        if layout == "process":
            # Every scheduler is ready (its first pass done) before the jobs are added, so
            # they all race for the first fire as they do for the later ones.
            procs = [
                stack.enter_context(RoleProcess(url, "scheduler", lookahead=args.lookahead))
                for _ in range(schedulers_of(layout, args))
            ]
            procs.append(stack.enter_context(RoleProcess(url, "worker", **options)))
        else:
            procs = [
                stack.enter_context(RoleProcess(url, "both", lookahead=args.lookahead, **options))
            ]
        samples = asyncio.run(_client(url, task, queue, args))
        for proc in procs:
            proc.check_alive()
        return samples


# -- the command ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--layouts",
        default="inprocess,process",
        help="comma-separated: inprocess, process, both (default inprocess,process)",
    )
    parser.add_argument("--jobs", type=int, default=20, help="every-second cron jobs (default 20)")
    parser.add_argument(
        "--duration", type=float, default=15.0, help="seconds the jobs fire (default 15)"
    )
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="first seconds of fires left out (default 2)"
    )
    parser.add_argument(
        "--delayed-every",
        type=float,
        default=0.1,
        help="mean seconds between delayed defers (default 0.1; 0 leaves them out)",
    )
    parser.add_argument(
        "--delay-min", type=float, default=0.2, help="shortest delay, s (default 0.2)"
    )
    parser.add_argument(
        "--delay-max", type=float, default=0.8, help="longest delay, s (default 0.8)"
    )
    parser.add_argument(
        "--task",
        choices=["async", "sync"],
        default="async",
        help="the stamping task: async (on the loop, default) or sync (in a thread)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=64, help="the worker's concurrency (default 64)"
    )
    parser.add_argument(
        "--lookahead",
        type=float,
        default=DEFAULT_LOOKAHEAD,
        help=f"the scheduler's look-ahead, s (default {DEFAULT_LOOKAHEAD}, the scheduler's own)",
    )
    parser.add_argument(
        "--schedulers",
        type=int,
        default=1,
        help="scheduler processes of the process layout, on the one store (default 1; "
        "the other layouts run one)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the delays")
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    layouts = [layout for layout in args.layouts.split(",") if layout]
    for layout in layouts:
        if layout not in LAYOUTS:
            raise SystemExit(f"unknown layout {layout!r}; use {', '.join(LAYOUTS)}")
    if args.duration <= args.warmup:
        raise SystemExit("--duration must be longer than --warmup")
    if args.schedulers < 1:
        raise SystemExit("--schedulers must be at least 1")
    figures: list[Figure] = []
    heading("precision: task start - due time, idle workers (ms)")
    with Stores(args.store) as stores:
        for rep in range(1, args.repeat + 1):
            for layout in layouts:
                url = stores.fresh(f"prec-{layout}")
                samples = measure_layout(url, layout, args)
                figures.extend(_report(layout, samples, url, rep, args))
    return figures


def _report(
    layout: str, samples: Samples, url: str, rep: int, args: argparse.Namespace
) -> list[Figure]:
    """Print and return the figures of one layout."""
    figures: list[Figure] = []
    schedulers = schedulers_of(layout, args)
    # The figures of several schedulers are named apart, so that a summary over runs with
    # different counts (or the table of one run) never merges them; one scheduler keeps the
    # names the figures always had.
    where = layout if schedulers == 1 else f"{layout}, {schedulers} schedulers"
    series = {
        f"{args.jobs} every-second cron jobs": (
            samples.cron,
            {
                "fires": f"{samples.fires}/{samples.fires_expected}",
                "duplicates": samples.duplicates,
            },
        ),
        "delayed runs": (
            samples.delayed,
            {"delay_s": f"{args.delay_min:g}-{args.delay_max:g}", "every_s": args.delayed_every},
        ),
    }
    for label, (values, extra) in series.items():
        if not values:
            continue
        settings: dict[str, Any] = {
            "layout": layout,
            "schedulers": schedulers,
            "samples": len(values),
            **extra,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "task": args.task,
            "concurrency": args.concurrency,
            "lookahead_s": args.lookahead,
            "not_succeeded": samples.failed,
            "store": describe_store(url),
            "repetition": rep,
            "min_ms": round(min(values), 3),
            "mean_ms": round(sum(values) / len(values), 3),
            "load1": round(samples.load, 1),
        }
        group = [
            Figure(
                BENCH,
                f"{where}: {label} {stat}",
                percentile(values, pct),
                "ms",
                settings,
                higher_is_better=False,
                target=TARGETS_MS[layout] if stat == "p99" else None,
            )
            for stat, pct in (("p50", 50.0), ("p99", 99.0), ("max", 100.0))
        ]
        figures.extend(report_group(f"{where}: {label}", group))
    if samples.duplicates:
        print(
            f"[{BENCH}] {where}: {samples.duplicates} cron run(s) duplicated a fire "
            "(one run per fire is what cronbus guarantees)",
            flush=True,
        )
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
