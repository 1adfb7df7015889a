"""The scheduler with many jobs: creating them, starting up, idling, and firing.

Parts (``--parts``, all by default):

``create``
    ``--jobs`` daily cron jobs (5-field ``M H * * *`` in UTC, spread evenly over the minutes of
    the day except the ``--quiet-minutes`` from now, so none is due while the benchmark runs),
    defined as *code* jobs (``source="code"``), plus ``--every-second`` jobs ``* * * * * *``.
    Neither the API nor the store has a bulk form, and one job per transaction costs a
    millisecond or more, so the jobs are put in place like this, each part timed and printed
    on its own:

    * ``define``: ``@app.job(cron=...)`` on a throwaway app, for ``--define-sample`` jobs
      (validation and cron compilation; what importing an app with that many jobs costs);
    * ``bulk load``: all but ``--put-sample`` jobs in one SQLite transaction, with the store's
      own ``UPSERT_JOB`` statement and parameters (other stores: ``put_job``, one by one);
    * ``put_job``: the last ``--put-sample`` jobs through ``store.put_job``, one transaction
      each (what ``app.jobs.sync()`` does for every new or changed job);
    * ``Jobs.add``: ``--add-sample`` API jobs with ``await app.jobs.add(...)`` on top of the
      others (then removed).

``startup`` (the store from ``create``)
    * ``jobs.sync, no changes``: ``await app.jobs.sync()`` on an app whose code defines the same
      jobs as the store holds (the spec objects ``@app.job`` would build): what a scheduler
      restart costs before it fires anything;
    * ``scheduler start-up``: from ``Scheduler.run()`` to the end of its first pass over the
      store, with ``sync=False`` and (``--startup-sync``) with ``sync=True``.

``idle`` (the store from ``create``)
    A scheduler process (``bench/_roles.py --role scheduler``, no sync) on the store: after its
    first pass and a second to settle, its CPU time (``/proc/<pid>/stat``: user + system) over
    ``--idle-seconds``, as a percentage of one core. Target: under 2 % when no job is due
    (``--every-second 0``). Also printed: the process's time from launch to the end of its first
    pass (interpreter start-up included).

``fires`` (a store of its own)
    ``--fire-jobs`` jobs with ``every=1`` (all due on every whole second), no workers; a
    scheduler runs on this process's loop for ``--fire-warmup`` seconds, then for
    ``--fire-seconds`` whole seconds, from just before one of its once-a-second bursts:
    fires per second = runs it created in that window / its length (``Scheduler.fired``).
    Target: at least 2,000 runs/s (when at least that many jobs are due each second: the rate
    cannot exceed the load). The settings also show the process's CPU share over the window
    (store thread included), the misfire warnings logged in it (counted, not printed), and,
    for SQLite, how many runs with a fire time in the window were created after it (``late``)
    and how many of the fires due in it have a run (``runs``: created / jobs x seconds; a
    saturated scheduler collapses missed fires into one, per the misfire policy).

Example: ``.venv/bin/python bench/scale.py --jobs 100000 --fire-jobs 5000``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import resource
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

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
    sqlite_path,
)
from _roles import ReadyScheduler, RoleProcess
from cronbus import App
from cronbus.jobs import JobOptions, build_spec
from cronbus.model import JobSpec
from cronbus.scheduler import DEFAULT_LOOKAHEAD, Scheduler
from cronbus.store.rows import job_params
from cronbus.store.sqlite import jobs_sql
from cronbus.triggers import trigger_from_spec

BENCH = "scale"
PARTS = ("create", "startup", "idle", "fires")
TARGET_IDLE_CPU_PCT = 2.0
TARGET_FIRES_PER_S = 2000.0
EVERY_SECOND = "* * * * * *"
_BEFORE_BURST = 0.05

# The jobs' own app: its code jobs are this benchmark's, kept apart from bench/_app.py's app.
# Its task has the name of the bench app's no-op, so bench workers could run these jobs.
scale_app = App()


@scale_app.task(name="bench.noop")
def scale_noop() -> None:
    """Do nothing (the task of every job here)."""


# -- the jobs ------------------------------------------------------------------------------------
def daily_minutes(count: int, quiet_from: int, quiet_minutes: int) -> list[int]:
    """``count`` minutes of the day (0-1439), spread evenly over all but the quiet ones."""
    allowed = [m for m in range(1440) if (m - quiet_from) % 1440 >= quiet_minutes]
    return [allowed[i * len(allowed) // count] for i in range(count)] if count else []


def job_specs(
    count: int, every_second: int, *, quiet_minutes: int, prefix: str = "scale"
) -> list[JobSpec]:
    """Code-job specs: ``count`` daily crons (none in the quiet window), then every-second ones.

    Each distinct schedule is validated once with ``build_spec`` (what ``@app.job`` does); the
    jobs sharing it are copies under their own names, identical to what ``@app.job`` would
    build for them.
    """
    now = time.gmtime()
    quiet_from = now.tm_hour * 60 + now.tm_min
    protos: dict[str, JobSpec] = {}
    specs = []

    def spec(name: str, expr: str) -> JobSpec:
        proto = protos.get(expr)
        if proto is None:
            options = JobOptions(cron=expr, tz="UTC")
            proto = protos[expr] = build_spec(name, scale_noop, options, source="code")
        return replace(proto, name=name)

    for i, minute in enumerate(daily_minutes(count, quiet_from, quiet_minutes)):
        specs.append(spec(f"{prefix}-daily-{i:06d}", f"{minute % 60} {minute // 60} * * *"))
    for i in range(every_second):
        specs.append(spec(f"{prefix}-every-second-{i:06d}", EVERY_SECOND))
    return specs


def every_specs(count: int, seconds: float = 1.0) -> list[JobSpec]:
    """``count`` jobs firing every ``seconds`` (all on the same instants)."""
    proto = build_spec("proto", scale_noop, JobOptions(every=seconds), source="api")
    return [replace(proto, name=f"scale-every-{i:06d}") for i in range(count)]


def first_fires(specs: Sequence[JobSpec], now: float) -> list[float | None]:
    """Each job's first fire after ``now`` (one trigger per distinct schedule)."""
    cache: dict[str, float | None] = {}
    out = []
    for spec in specs:
        key = json.dumps(spec.trigger, sort_keys=True)
        if key not in cache:
            cache[key] = trigger_from_spec(spec.trigger).next_fire(now)
        out.append(cache[key])
    return out


async def _open_schema(app: App, url: str) -> None:
    """Open and close the store once (applying migrations)."""
    app.use_store(url)
    async with app:
        pass


async def bulk_load(url: str, specs: Sequence[JobSpec], now: float) -> str:
    """Put ``specs`` in the store, as fast as the store allows; return how it was done.

    SQLite: one transaction with the store's own statement (nothing else may use the store
    meanwhile). Other stores: ``put_job`` one by one.
    """
    fires = first_fires(specs, now)
    path = sqlite_path(url)
    if path is not None:
        await _open_schema(scale_app, url)
        with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                jobs_sql.UPSERT_JOB,
                (job_params(s, f, now) for s, f in zip(specs, fires, strict=True)),
            )
            conn.execute("COMMIT")
        return "one SQLite transaction"
    scale_app.use_store(url)
    async with scale_app:
        for spec, fire in zip(specs, fires, strict=True):
            await scale_app.store.put_job(spec, fire, now)
    return "put_job one by one"


async def remove_jobs(url: str, prefix: str) -> None:
    """Delete the jobs whose names start with ``prefix`` (so a shared store is left as found).

    SQLite: one statement; other stores: ``app.jobs.remove`` one by one.
    """
    path = sqlite_path(url)
    if path is not None:
        with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as conn:
            conn.execute("DELETE FROM jobs WHERE substr(name, 1, ?) = ?", (len(prefix), prefix))
        return
    scale_app.use_store(url)
    async with scale_app:
        for job in await scale_app.jobs.list():
            if job.spec.name.startswith(prefix):
                await scale_app.jobs.remove(job.spec.name)


# -- create --------------------------------------------------------------------------------------
def measure_define(sample: int, quiet_minutes: int) -> float:
    """Seconds per ``@app.job(cron=...)`` definition, over ``sample`` jobs on a throwaway app."""
    throwaway = App()
    task = throwaway.task(name="bench.noop")(lambda: None)
    now = time.gmtime()
    minutes = daily_minutes(sample, now.tm_hour * 60 + now.tm_min, quiet_minutes)
    start = time.perf_counter()
    for i, minute in enumerate(minutes):
        throwaway.job(name=f"define-{i}", cron=f"{minute % 60} {minute // 60} * * *", tz="UTC")(
            task
        )
    return (time.perf_counter() - start) / max(1, sample)


async def measure_put_and_add(
    url: str, specs: Sequence[JobSpec], add_sample: int, quiet_minutes: int
) -> tuple[float, float]:
    """Seconds per ``store.put_job`` (over ``specs``) and per ``app.jobs.add`` call."""
    scale_app.use_store(url)
    async with scale_app:
        store = scale_app.store
        fires = first_fires(specs, time.time())
        start = time.perf_counter()
        for spec, fire in zip(specs, fires, strict=True):
            await store.put_job(spec, fire, time.time())
        put = (time.perf_counter() - start) / max(1, len(specs))
        add = math.nan
        if add_sample > 0:
            names = [f"scale-api-{i}" for i in range(add_sample)]
            (minute,) = daily_minutes(1, time.gmtime().tm_hour * 60, quiet_minutes)
            cron = f"{minute % 60} {minute // 60} * * *"
            start = time.perf_counter()
            for name in names:
                await scale_app.jobs.add(name, scale_noop, cron=cron, tz="UTC")
            add = (time.perf_counter() - start) / add_sample
            for name in names:
                await scale_app.jobs.remove(name)
        return put, add


def part_create(url: str, specs: list[JobSpec], args: argparse.Namespace) -> list[Figure]:
    """Define a sample, bulk-load the jobs, put a sample one by one, add a few through the API."""
    base = {
        "jobs": len(specs),
        "every_second": args.every_second,
        "store": describe_store(url),
    }
    figures = []
    if args.define_sample > 0:
        per_job = measure_define(args.define_sample, args.quiet_minutes)
        settings = {
            **base,
            "sample": args.define_sample,
            f"projected_s_for_{len(specs)}": round(per_job * len(specs), 1),
        }
        figures.append(
            report(
                Figure(
                    BENCH,
                    "define (@app.job)",
                    1e6 * per_job,
                    "µs/job",
                    settings,
                    higher_is_better=False,
                )
            )
        )
    put_sample = min(args.put_sample, len(specs))
    bulk = specs[: len(specs) - put_sample]
    start = time.perf_counter()
    how = asyncio.run(bulk_load(url, bulk, time.time()))
    elapsed = time.perf_counter() - start
    settings = {**base, "loaded": len(bulk), "how": how, "seconds": round(elapsed, 2)}
    figures.append(
        report(Figure(BENCH, "bulk load (fixture)", len(bulk) / elapsed, "jobs/s", settings))
    )
    put, add = asyncio.run(
        measure_put_and_add(url, specs[len(bulk) :], args.add_sample, args.quiet_minutes)
    )
    if put_sample:
        settings = {
            **base,
            "sample": put_sample,
            "ms_per_job": round(1000 * put, 3),
            f"projected_s_for_{len(specs)}": round(put * len(specs), 1),
        }
        figures.append(
            report(Figure(BENCH, "put_job, one transaction each", 1 / put, "jobs/s", settings))
        )
    if args.add_sample > 0:
        settings = {**base, "sample": args.add_sample}
        figures.append(
            report(
                Figure(
                    BENCH,
                    f"Jobs.add with {len(specs)} jobs",
                    1000 * add,
                    "ms/call",
                    settings,
                    higher_is_better=False,
                )
            )
        )
    return figures


# -- startup -------------------------------------------------------------------------------------
async def _startup(url: str, specs: list[JobSpec], with_sync: bool) -> dict[str, Any]:
    """Time ``jobs.sync()`` with nothing to change, and the scheduler's start-up."""
    scale_app.code_jobs = {spec.name: spec for spec in specs}
    scale_app.use_store(url)
    out: dict[str, Any] = {}
    try:
        async with scale_app:
            start = time.perf_counter()
            result = await scale_app.jobs.sync()
            out["sync"] = time.perf_counter() - start
            out["changes"] = len(result.added) + len(result.updated) + len(result.disabled)
            for sync in (False, True) if with_sync else (False,):
                scheduler = ReadyScheduler(scale_app, sync=sync)
                start = time.perf_counter()
                running = asyncio.create_task(scheduler.run())
                passed = asyncio.create_task(scheduler.first_pass.wait())
                try:
                    await asyncio.wait([running, passed], return_when=asyncio.FIRST_COMPLETED)
                    if running.done():
                        running.result()
                    out[f"start sync={sync}"] = time.perf_counter() - start
                finally:
                    passed.cancel()
                    scheduler.request_stop()
                    await running
    finally:
        scale_app.code_jobs = {}
    return out


def part_startup(url: str, specs: list[JobSpec], args: argparse.Namespace) -> list[Figure]:
    """A restart's cost with ``len(specs)`` code jobs already in the store."""
    timings = asyncio.run(_startup(url, specs, args.startup_sync))
    base = {"jobs": len(specs), "every_second": args.every_second, "store": describe_store(url)}
    figures = [
        report(
            Figure(
                BENCH,
                f"jobs.sync, {len(specs)} code jobs, no changes",
                timings["sync"],
                "s",
                {**base, "changes": timings["changes"]},
                higher_is_better=False,
            )
        )
    ]
    for sync in (False, True):
        key = f"start sync={sync}"
        if key in timings:
            name = f"scheduler start-up to first pass, sync={sync}"
            figures.append(
                report(Figure(BENCH, name, timings[key], "s", base, higher_is_better=False))
            )
    return figures


# -- idle ----------------------------------------------------------------------------------------
def part_idle(url: str, jobs: int, args: argparse.Namespace) -> list[Figure]:
    """CPU share of a scheduler process with ``jobs`` jobs in the store."""
    with RoleProcess(url, "scheduler", sync=False) as proc:
        time.sleep(args.idle_settle)
        proc.check_alive()
        cpu0, t0 = proc.cpu_seconds(), time.perf_counter()
        time.sleep(args.idle_seconds)
        proc.check_alive()
        cpu1, t1 = proc.cpu_seconds(), time.perf_counter()
        started = proc.ready_after
    share = 100 * (cpu1 - cpu0) / (t1 - t0)
    idle = args.every_second == 0
    name = "scheduler process CPU, no job due" if idle else "scheduler process CPU"
    settings = {
        "jobs": jobs,
        "every_second": args.every_second,
        "seconds": round(t1 - t0, 1),
        "cpu_s": round(cpu1 - cpu0, 3),
        "clock_tick_s": round(1 / os.sysconf("SC_CLK_TCK"), 3),
        "store": describe_store(url),
        "load1": round(os.getloadavg()[0], 1),
    }
    figures = [
        report(
            Figure(
                BENCH,
                name,
                share,
                "% of a core",
                settings,
                higher_is_better=False,
                target=TARGET_IDLE_CPU_PCT if idle else None,
            )
        )
    ]
    settings = {"jobs": jobs, "sync": False, "store": describe_store(url)}
    name = "scheduler process launch to first pass"
    figures.append(report(Figure(BENCH, name, started, "s", settings, higher_is_better=False)))
    return figures


# -- fires ---------------------------------------------------------------------------------------
class _Counter(logging.Handler):
    """Counts the records it receives (instead of printing them)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Count one record."""
        self.count += 1


@contextlib.contextmanager
def _counting(logger_name: str) -> Iterator[_Counter]:
    """Count a logger's records rather than print them (a saturated scheduler logs a
    warning per missed fire, thousands a second); they are still created, so still paid for."""
    logger = logging.getLogger(logger_name)
    counter = _Counter()
    logger.addHandler(counter)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield counter
    finally:
        logger.removeHandler(counter)
        logger.propagate = propagate


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _fire(url: str, args: argparse.Namespace, warnings: _Counter) -> dict[str, float]:
    """Run a scheduler on this loop; count the runs it creates in the measured window."""

    def snapshot(scheduler: Scheduler) -> tuple[float, ...]:
        return (
            scheduler.fired,
            time.perf_counter(),
            _cpu_seconds(),
            time.time(),
            warnings.count,
        )

    scale_app.use_store(url)
    async with scale_app:
        scheduler = ReadyScheduler(
            scale_app, lookahead=args.lookahead, batch=args.batch, sync=False
        )
        running = asyncio.create_task(scheduler.run())
        try:
            await asyncio.sleep(args.fire_warmup)
            if running.done():
                running.result()
            # Jobs due every whole second are fired in one burst a second, starting
            # ``lookahead`` before it: count whole seconds from just before a burst starts
            # (when the previous one is long done, unless the scheduler is saturated), so
            # every window holds the same number of bursts.
            phase = (-args.lookahead - _BEFORE_BURST) % 1.0
            await asyncio.sleep((phase - time.time()) % 1.0)
            before = snapshot(scheduler)
            await asyncio.sleep(max(1, round(args.fire_seconds)))
            after = snapshot(scheduler)
        finally:
            scheduler.request_stop()
            await running
    fired, seconds, cpu, _, warned = (b - a for a, b in zip(before, after, strict=True))
    return {
        "fired": fired,
        "seconds": seconds,
        "cpu": cpu,
        "from": before[3],
        "to": after[3],
        "warnings": warned,
    }


def _window(url: str, start: float, end: float) -> dict[str, Any]:
    """Runs with a fire time in [start, end): how many, and how many were created late."""
    path = sqlite_path(url)
    if path is None:
        return {}
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        count, late, worst = conn.execute(
            "SELECT count(*), sum(created_at > fire_at), max(created_at - fire_at) FROM runs "
            "WHERE job_id IS NOT NULL AND fire_at >= ? AND fire_at < ?",
            (start, end),
        ).fetchone()
    return {"count": count, "late": late or 0, "worst_s": worst}


def part_fires(url: str, args: argparse.Namespace) -> list[Figure]:
    """Fires per second with ``--fire-jobs`` jobs due every second and no workers."""
    specs = every_specs(args.fire_jobs)
    asyncio.run(bulk_load(url, specs, time.time()))
    try:
        with _counting("cronbus.jobs") as warnings:
            out = asyncio.run(_fire(url, args, warnings))
    finally:
        asyncio.run(remove_jobs(url, "scale-every-"))
    start, end = math.ceil(out["from"]), math.ceil(out["to"])
    window = _window(url, start, end)
    settings: dict[str, Any] = {
        "jobs": args.fire_jobs,
        "trigger": "every=1",
        "seconds": round(out["seconds"], 1),
        "warmup_s": args.fire_warmup,
        "lookahead_s": args.lookahead,
        "batch": args.batch,
        "cpu_pct": round(100 * out["cpu"] / out["seconds"], 1),
    }
    if window:
        expected = args.fire_jobs * (end - start)
        settings["runs"] = f"{window['count']}/{expected}"
        settings["late"] = window["late"]
        if window["worst_s"] is not None and window["late"]:
            settings["latest_s"] = round(window["worst_s"], 3)
    settings["misfire_warnings"] = int(out["warnings"])
    settings["store"] = describe_store(url)
    settings["load1"] = round(os.getloadavg()[0], 1)
    rate = out["fired"] / out["seconds"]
    name = f"fires/s, {args.fire_jobs} jobs due every second"
    # The rate cannot exceed the jobs due per second: the target applies when they reach it.
    target = TARGET_FIRES_PER_S if args.fire_jobs >= TARGET_FIRES_PER_S else None
    return [report(Figure(BENCH, name, rate, "runs/s", settings, target=target))]


# -- the command ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}"
    )
    parser.add_argument(
        "--jobs", type=int, default=100_000, help="daily cron jobs (default 100000)"
    )
    parser.add_argument(
        "--every-second",
        type=int,
        default=0,
        help="every-second cron jobs added to them (default 0; >0 means the scheduler is busy)",
    )
    parser.add_argument(
        "--quiet-minutes",
        type=int,
        default=30,
        help="no daily job fires in this many minutes from now (default 30)",
    )
    parser.add_argument(
        "--define-sample", type=int, default=1000, help="@app.job definitions timed (1000)"
    )
    parser.add_argument(
        "--put-sample", type=int, default=500, help="jobs put one by one, timed (500)"
    )
    parser.add_argument(
        "--add-sample", type=int, default=3, help="Jobs.add calls timed at full size (3)"
    )
    parser.add_argument(
        "--startup-sync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time a scheduler start-up with sync=True (default on)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="CPU measured this long (default 10)"
    )
    parser.add_argument(
        "--idle-settle",
        type=float,
        default=1.0,
        help="seconds after the scheduler's first pass before measuring (default 1)",
    )
    parser.add_argument(
        "--fire-jobs", type=int, default=5000, help="jobs due every second (default 5000)"
    )
    parser.add_argument(
        "--fire-seconds", type=float, default=10.0, help="whole seconds counted (default 10)"
    )
    parser.add_argument(
        "--fire-warmup", type=float, default=2.0, help="seconds before counting (default 2)"
    )
    parser.add_argument(
        "--lookahead",
        type=float,
        default=DEFAULT_LOOKAHEAD,
        help=f"the scheduler's look-ahead, s (default {DEFAULT_LOOKAHEAD}, the scheduler's own)",
    )
    parser.add_argument(
        "--batch", type=int, default=500, help="jobs per scheduler pass (default 500)"
    )
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the chosen parts, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    parts = [p for p in args.parts.split(",") if p]
    for part in parts:
        if part not in PARTS:
            raise SystemExit(f"unknown part {part!r}; use {', '.join(PARTS)}")
    if {"startup", "idle"} & set(parts) and "create" not in parts:
        raise SystemExit("the startup and idle parts need the create part (its store)")
    figures: list[Figure] = []
    with Stores(args.store) as stores:
        for rep in range(1, args.repeat + 1):
            if "create" in parts:
                url = stores.fresh("scale-jobs")
                total = args.jobs + args.every_second
                heading(f"scale: {total} jobs ({args.every_second} every second)")
                specs = job_specs(args.jobs, args.every_second, quiet_minutes=args.quiet_minutes)
                figures.extend(_tag(part_create(url, specs, args), rep))
                if "startup" in parts:
                    figures.extend(_tag(part_startup(url, specs, args), rep))
                if "idle" in parts:
                    figures.extend(_tag(part_idle(url, len(specs), args), rep))
                asyncio.run(remove_jobs(url, "scale-"))
            if "fires" in parts:
                heading(f"scale: fires per second, {args.fire_jobs} jobs every second")
                url = stores.fresh("scale-fires")
                figures.extend(_tag(part_fires(url, args), rep))
    return figures


def _tag(figures: list[Figure], rep: int) -> list[Figure]:
    """The figures with their repetition in the settings (for the summary's medians)."""
    return [replace(f, settings={**f.settings, "repetition": rep}) for f in figures]


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
