"""Run cronbus roles (a scheduler, a worker, or both) in one process, for the benchmarks.

This stands in for ``cronbus scheduler`` / ``cronbus worker`` / ``cronbus server`` with the bench
app (``bench/_app.py``), with the scheduler's options exposed (``--lookahead``, ``--batch``,
``--sync``). It prints ``ready`` once the roles are up (the scheduler has finished its first
pass; the worker is registered and listening), then serves until SIGTERM (or SIGINT): the first
signal stops the scheduler and drains the worker, a second one requeues running attempts.

The scheduler does *not* sync code-defined jobs unless ``--sync`` is given: the bench app defines
none, so a sync would disable the code jobs another benchmark put in the store.

The parent side is :class:`RoleProcess`, a context manager that starts one such process, waits
for ``ready`` and always stops it (SIGTERM, then SIGKILL), even on error.

Example: ``python bench/_roles.py --role scheduler --store sqlite:////tmp/b.db``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from _app import app
from _common import worker_env
from _subprocess import ChildProcess
from _worker import _die_with_parent
from cronbus import App
from cronbus.runner import Roles
from cronbus.scheduler import DEFAULT_LOOKAHEAD, Scheduler
from cronbus.worker.engine import Worker

ROLES_SCRIPT = Path(__file__).resolve()
ROLES = ("scheduler", "worker", "both")
_LISTEN_SETTLE_SECONDS = 0.2
"""The worker listens for wake-ups just after it registers; give it this long."""


class ReadyScheduler(Scheduler):
    """A :class:`Scheduler` that tells when its first pass over the store is done."""

    def __init__(self, app: App, **options: Any) -> None:
        super().__init__(app, **options)
        self.first_pass = asyncio.Event()

    async def tick(self) -> bool:
        """One pass (see :meth:`Scheduler.tick`); the first one sets :attr:`first_pass`."""
        busy = await super().tick()
        self.first_pass.set()
        return busy


async def _worker_ready(worker: Worker, timeout: float) -> None:
    """Wait until the worker is registered (and has had a moment to listen)."""
    deadline = time.monotonic() + timeout
    while True:
        workers = await worker.store.list_workers(time.time())
        if any(w.id == worker.id and w.state.value == "alive" for w in workers):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {worker.id} did not register in {timeout}s")
        await asyncio.sleep(0.01)
    await asyncio.sleep(_LISTEN_SETTLE_SECONDS)


async def serve(args: argparse.Namespace) -> None:
    """Open the bench app on ``--store``, run the roles, print ``ready``, serve until stopped."""
    app.use_store(args.store)
    async with app:
        scheduler = None
        worker = None
        if args.role in ("scheduler", "both"):
            scheduler = ReadyScheduler(
                app, lookahead=args.lookahead, batch=args.batch, sync=args.sync
            )
        if args.role in ("worker", "both"):
            queues = [q for q in args.queues.split(",") if q]
            worker = Worker(app, queues=queues, concurrency=args.concurrency)
        roles = Roles(worker=worker, scheduler=scheduler)
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            roles.stop(hurry=signals > 1)

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal)
        running = asyncio.create_task(roles.run(), name="bench-roles")
        waits: list[Coroutine[Any, Any, Any]] = []
        if scheduler is not None:
            waits.append(scheduler.first_pass.wait())
        if worker is not None:
            waits.append(_worker_ready(worker, args.ready_timeout))
        up: asyncio.Future[list[Any]] = asyncio.ensure_future(asyncio.gather(*waits))
        either: list[asyncio.Future[Any]] = [running, up]
        done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if running in done:
            up.cancel()
            running.result()  # raises what stopped the roles early
            return
        up.result()
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await running


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--role", choices=ROLES, required=True, help="the roles to run")
    parser.add_argument("--store", required=True, help="store URL, e.g. sqlite:////tmp/b.db")
    parser.add_argument("--queues", default="default", help="the worker's queues (comma list)")
    parser.add_argument("--concurrency", type=int, default=16, help="the worker's concurrency")
    parser.add_argument(
        "--lookahead",
        type=float,
        default=DEFAULT_LOOKAHEAD,
        help=f"the scheduler's look-ahead, s (default {DEFAULT_LOOKAHEAD}, the scheduler's own)",
    )
    parser.add_argument(
        "--batch", type=int, default=500, help="jobs per scheduler pass (default 500)"
    )
    parser.add_argument(
        "--sync", action="store_true", help="sync the bench app's code jobs at start (off)"
    )
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="seconds")
    parser.add_argument("--log-level", default="WARNING", help="log level")
    parser.add_argument(
        "--parent", type=int, default=0, help="pid of the benchmark; exit when it dies"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse the options and serve until SIGTERM."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format=f"%(asctime)s {args.role} %(levelname)s %(message)s"
    )
    _die_with_parent(args.parent)
    asyncio.run(serve(args))


# -- the parent side -----------------------------------------------------------------------------
class RoleProcess(ChildProcess):
    """One ``bench/_roles.py`` subprocess: started and awaited ``ready`` on entry, stopped on
    exit (SIGTERM, then SIGKILL after ``stop_timeout``), whatever happens in between."""

    def __init__(
        self,
        store: str,
        role: str,
        *,
        queues: str = "default",
        concurrency: int = 16,
        lookahead: float = DEFAULT_LOOKAHEAD,
        batch: int = 500,
        sync: bool = False,
        ready_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        extra: Sequence[str] = (),
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
        command = [
            sys.executable,
            str(ROLES_SCRIPT),
            "--role",
            role,
            "--store",
            store,
            "--queues",
            queues,
            "--concurrency",
            str(concurrency),
            "--lookahead",
            str(lookahead),
            "--batch",
            str(batch),
            "--ready-timeout",
            str(ready_timeout),
            *(["--sync"] if sync else []),
            *extra,
        ]
        super().__init__(
            role,
            command,
            env=worker_env(),
            ready_timeout=ready_timeout,
            stop_timeout=stop_timeout,
        )
        self.role = role
        self.started = 0.0
        """``time.perf_counter()`` when the process was launched."""
        self.ready_after = 0.0
        """Seconds from launch to ``ready`` (interpreter start-up and imports included)."""

    def start(self) -> None:
        """Launch the process, wait until it prints ``ready``, and time that."""
        self.started = time.perf_counter()
        super().start()
        self.ready_after = time.perf_counter() - self.started


if __name__ == "__main__":
    main()
