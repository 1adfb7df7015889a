"""A dispatcher process of ``apps.dispatch_app`` with a short lease, for cluster tests.

``cronbus dispatcher`` builds its :class:`~cronbus.events.dispatcher.Dispatcher` with the default
15 s lease and offers no option to change it, so a test that kills one would wait up to 15 s
for the takeover. This script runs the same dispatcher with ``--lease`` seconds instead, and
stops it on SIGTERM or SIGINT as the command does (pushes in flight end, leases are let go).

Usage: ``python -m apps.run_dispatcher --store URL [--lease 2] [--pool 64]``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from apps.dispatch_app import app
from cronbus.events.dispatcher import Dispatcher


async def serve(store: str, lease: float, pool: int, poll: float) -> None:
    """Dispatch the app's subscriptions on ``store`` until SIGTERM or SIGINT."""
    app.use_store(store)
    async with app:
        dispatcher = Dispatcher(app, pool=pool, lease_seconds=lease, poll_seconds=poll)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        await dispatcher.run(stopping)


def main() -> None:
    """Parse the options and dispatch."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, help="store URL")
    parser.add_argument("--lease", type=float, default=2.0, help="subscription lease, s")
    parser.add_argument("--pool", type=int, default=64, help="pushes at once")
    parser.add_argument("--poll", type=float, default=1.0, help="safety-net poll, s")
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.store, args.lease, args.pool, args.poll))


if __name__ == "__main__":
    main()
