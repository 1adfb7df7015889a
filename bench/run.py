"""Run every benchmark in sequence (defer, throughput, latency, precision, scale, delivery,
cron) and print a summary table.

The sizes are moderate, so the whole run stays under about four minutes on a 2-core machine.
Each benchmark can also be run on its own, with more options: see ``bench/README.md`` or
``.venv/bin/python bench/<name>.py --help``.

Example: ``make bench`` or ``.venv/bin/python bench/run.py --only throughput --repeat 3``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import connectors
import console_tabs
import cron
import defer
import delivery
import distribution
import latency
import precision
import scale
import throughput
from _common import Figure, exit_on_sigterm, heading, print_environment, print_table

Main = Callable[..., list[Figure]]


def _peers(argv: list[str], *, environment: bool = True) -> list[Figure]:
    """``bench/peers.py``, imported only when run: it needs the `bench` extra (redis-py, Huey,
    Dramatiq), which the rest of the benchmarks do without."""
    import peers

    return peers.main(argv, environment=environment)


# name: (module main, arguments with the moderate sizes used here)
PLAN: dict[str, tuple[Main, list[str]]] = {
    "defer": (defer.main, ["--single", "2000", "--bulk", "50000", "--batch", "1000"]),
    "throughput": (
        throughput.main,
        ["--runs", "20000", "--processes", "2,1", "--concurrency", "16"],
    ),
    "latency": (
        latency.main,
        ["--samples", "500", "--delayed-samples", "30", "--modes", "process,inprocess"],
    ),
    "precision": (
        precision.main,
        ["--jobs", "20", "--duration", "15", "--layouts", "inprocess,process"],
    ),
    "scale": (
        scale.main,
        ["--jobs", "100000", "--idle-seconds", "5", "--fire-jobs", "5000", "--fire-seconds", "5"],
    ),
    "delivery": (
        delivery.main,
        ["--single", "2000", "--bulk", "50000", "--deliveries", "20000", "--samples", "500"],
    ),
    "cron": (cron.main, ["--steps", "5000", "--repeat", "3"]),
}
# Run only when named with --only (a few minutes on its own, with worker processes and a
# PostgreSQL schema when --store names one): not part of `make bench`.
OPT_IN: dict[str, tuple[Main, list[str]]] = {
    "distribution": (distribution.main, ["--store", "sqlite"]),
    # A cronbus api process on a PostgreSQL schema and Chromium pages: a few minutes.
    "console_tabs": (console_tabs.main, []),
    # Worker processes on SQLite and on a PostgreSQL schema (both, by default), 100,000 rows
    # each and a 15 s lease to wait out: about two minutes.
    "connectors": (connectors.main, []),
    # cronbus (SQLite and a PostgreSQL schema) beside Huey and Dramatiq; needs Redis at
    # 127.0.0.1:6379 and the `bench` extra: about 3-5 minutes. `make bench` runs it after the
    # default set when Redis answers.
    "peers": (_peers, []),
}
QUICK: dict[str, list[str]] = {
    "connectors": ["--quick"],
    "peers": ["--quick"],
    "distribution": ["--quick"],
    "console_tabs": ["--quick"],
    "cron": ["--steps", "500", "--parse", "200", "--repeat", "1"],
    "defer": ["--single", "500", "--bulk", "10000", "--sync", "500"],
    "throughput": ["--runs", "4000"],
    "latency": ["--samples", "100", "--delayed-samples", "10"],
    "precision": ["--jobs", "10", "--duration", "4", "--warmup", "1"],
    "scale": [
        "--jobs",
        "10000",
        "--define-sample",
        "200",
        "--put-sample",
        "200",
        "--idle-seconds",
        "2",
        "--fire-seconds",
        "3",
        "--no-startup-sync",
    ],
    "delivery": [
        "--single",
        "500",
        "--bulk",
        "10000",
        "--deliveries",
        "3000",
        "--samples",
        "100",
        "--warmup",
        "10",
    ],
}


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store",
        default=None,
        help="store URL for every benchmark (default: fresh SQLite files in a temp folder)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="repetitions of each measurement")
    parser.add_argument(
        "--only",
        action="append",
        choices=[*PLAN, *OPT_IN],
        help="run only this benchmark (repeatable; default: all but "
        f"{', '.join(OPT_IN)}, run only when named)",
    )
    parser.add_argument("--quick", action="store_true", help="much smaller sizes, for a smoke test")
    return parser


def main(argv: list[str] | None = None) -> list[Figure]:
    """Run the chosen benchmarks and print their figures, then the summary table."""
    args = build_parser().parse_args(argv)
    print_environment()
    figures: list[Figure] = []
    timings: list[str] = []
    for name in args.only or list(PLAN):
        bench_main, bench_args = {**PLAN, **OPT_IN}[name]
        extra = ["--repeat", str(args.repeat)]
        if args.store:
            extra += ["--store", args.store]
        if args.quick:
            extra += QUICK[name]
        start = time.perf_counter()
        figures.extend(bench_main([*bench_args, *extra], environment=False))
        timings.append(f"{name} {time.perf_counter() - start:.0f}s")
    heading("summary" + (f" (median of {args.repeat} repetitions)" if args.repeat > 1 else ""))
    print_table(figures)
    print(f"\ntime taken: {', '.join(timings)}")
    print("settings of each figure are printed above it; rerun one with bench/<name>.py --help")
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    main(sys.argv[1:])
