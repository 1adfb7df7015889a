"""cronbus's app for ``bench/peers.py``: ``cronbus worker --app _peers_cronbus:app`` serves it.

The bodies are those of :mod:`_peers_common`, so cronbus runs exactly what Huey and Dramatiq
run. ``hit`` is a sync task (the worker's thread pool), ``ahit`` an async one (its event loop).
"""

from __future__ import annotations

import os

import _peers_common as body
from cronbus import App

if os.environ.get(body.GATE_ENV):
    # `cronbus worker` imports these after the app: import them before the gate, so that the
    # processes released together start their work together (imports are not measured). The
    # worker's metrics bring the service layer with them (0.2 s of CPU, which py-spy found
    # inside the measured drain).
    import cronbus.observability.metrics
    import cronbus.runner
    import cronbus.store.postgres
    import cronbus.store.sqlite
    import cronbus.worker.engine  # noqa: F401

app = App()


@app.task(name="peers.hit", queue=body.QUEUE)
def hit() -> None:
    """One synchronous Redis round trip (INCR and the Redis-side time stamps)."""
    body.hit()


@app.task(name="peers.ahit", queue=body.QUEUE)
async def ahit() -> None:
    """The same through redis.asyncio."""
    await body.ahit()


@app.task(name="peers.stamp", queue=body.QUEUE)
def stamp(key: str, t0: float) -> None:
    """Record how long after ``t0`` this body started."""
    body.stamp(key, t0)


body.gate()
