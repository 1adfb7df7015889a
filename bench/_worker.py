"""Run one real cronbus worker process for the benchmarks (SIGTERM drains and stops it).

This stands in for ``cronbus worker --app _app:app``: it imports the bench app, points it at
``--store`` and calls :func:`cronbus.runner.run`, which installs the SIGTERM/SIGINT handlers.
With ``--wait-go`` it prints ``ready`` once its imports are done and waits for a line on stdin,
so a benchmark can start several workers and release them at the same moment.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import logging
import os
import signal
import sys

from _app import app
from cronbus import runner


def _die_with_parent(parent: int) -> None:
    """Ask Linux to send SIGTERM when the benchmark dies, so no worker is left behind."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if parent and os.getppid() != parent:
        raise SystemExit("the benchmark that started this worker is gone")


def main(argv: list[str] | None = None) -> None:
    """Parse the options and serve until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, help="store URL, e.g. sqlite:////tmp/b.db")
    parser.add_argument("--queues", default="default", help="comma-separated queue names")
    parser.add_argument("--concurrency", type=int, default=16, help="attempts at once")
    parser.add_argument(
        "--wait-go", action="store_true", help="print 'ready', then wait for a line on stdin"
    )
    parser.add_argument("--log-level", default="WARNING", help="worker log level")
    parser.add_argument(
        "--parent", type=int, default=0, help="pid of the benchmark; exit when it dies"
    )
    parser.add_argument(
        "--cprofile", metavar="PATH", help="profile the event-loop thread into PATH (pstats)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s worker %(levelname)s %(message)s"
    )
    _die_with_parent(args.parent)
    app.use_store(args.store)
    if args.wait_go:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
    queues = [q for q in args.queues.split(",") if q]
    if args.cprofile:
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            runner.run(app, queues=queues, concurrency=args.concurrency, startup=False)
        finally:
            profiler.disable()
            profiler.dump_stats(args.cprofile)
    else:
        runner.run(app, queues=queues, concurrency=args.concurrency, startup=False)


if __name__ == "__main__":
    main()
