"""The app the benchmarks defer to and their worker processes serve.

It is imported both by the benchmark scripts and by ``bench/_worker.py`` (a separate process), so
every task has an explicit name: the names must match in both processes whatever the module is
called there. The store is chosen later, with ``app.use_store(url)``.
"""

from __future__ import annotations

import time

from cronbus import App

app = App()


@app.task(name="bench.noop")
def noop() -> None:
    """Do nothing, in the worker's thread pool (a sync task)."""


@app.task(name="bench.anoop")
async def anoop() -> None:
    """Do nothing, on the worker's event loop (an async task)."""


@app.task(name="bench.stamp")
async def stamp() -> float:
    """Return the wall time at which the attempt started (an async task)."""
    return time.time()


@app.task(name="bench.stamp_sync")
def stamp_sync() -> float:
    """Return the wall time at which the attempt started (a sync task, in a thread)."""
    return time.time()
