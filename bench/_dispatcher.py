"""Run one cronbus dispatcher process for the delivery benchmark (SIGTERM stops it).

This stands in for ``cronbus dispatcher --app _app:app``, with the :class:`Dispatcher`'s options
that the command does not expose (``--pool``, ``--lease``, ``--poll``, ``--batch``). It prints
``ready`` once the app is open and the dispatcher is started; the benchmark then watches the
store to see the subscriptions' leases taken. :class:`DispatcherProcess` is the parent side.

Example: ``python bench/_dispatcher.py --store sqlite:////tmp/b.db --pool 64``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import signal
import sys
from pathlib import Path

from _app import app
from _common import worker_env
from _subprocess import ChildProcess
from _worker import _die_with_parent
from cronbus.events.dispatcher import Dispatcher

DISPATCHER_SCRIPT = Path(__file__).resolve()


async def serve(args: argparse.Namespace) -> None:
    """Open the bench app on ``--store`` and dispatch until SIGTERM or SIGINT."""
    app.use_store(args.store)
    async with app:
        dispatcher = Dispatcher(
            app,
            pool=args.pool,
            lease_seconds=args.lease,
            poll_seconds=args.poll,
            batch=args.batch,
        )
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        running = asyncio.create_task(dispatcher.run(stopping), name="bench-dispatcher")
        await asyncio.sleep(0)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await running


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", required=True, help="store URL, e.g. sqlite:////tmp/b.db")
    parser.add_argument("--pool", type=int, default=64, help="pushes at once, all subscriptions")
    parser.add_argument("--lease", type=float, default=15.0, help="subscription lease, s")
    parser.add_argument("--poll", type=float, default=5.0, help="safety-net poll, s")
    parser.add_argument("--batch", type=int, default=500, help="events matched per transaction")
    parser.add_argument("--log-level", default="WARNING", help="log level")
    parser.add_argument(
        "--cprofile", metavar="PATH", help="profile the dispatcher's loop into PATH (pstats)"
    )
    parser.add_argument(
        "--parent", type=int, default=0, help="pid of the benchmark; exit when it dies"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse the options and dispatch until SIGTERM."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s dispatcher %(levelname)s %(message)s"
    )
    _die_with_parent(args.parent)
    if not args.cprofile:
        asyncio.run(serve(args))
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(serve(args))
    finally:
        profiler.disable()
        profiler.dump_stats(args.cprofile)


# -- the parent side -----------------------------------------------------------------------------
class DispatcherProcess(ChildProcess):
    """A ``_dispatcher.py`` subprocess on ``store``."""

    def __init__(
        self,
        store: str,
        *,
        pool: int = 64,
        lease: float = 15.0,
        batch: int = 500,
        extra: list[str] | None = None,
    ) -> None:
        command = [sys.executable, str(DISPATCHER_SCRIPT), "--store", store]
        command += ["--pool", str(pool), "--lease", str(lease), "--batch", str(batch)]
        super().__init__("dispatcher", [*command, *(extra or [])], env=worker_env())


if __name__ == "__main__":
    main()
