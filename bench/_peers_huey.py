"""Huey's app for ``bench/peers.py``: ``huey_consumer _peers_huey.huey -k thread -w 8``.

A :class:`huey.RedisHuey` on the benchmark's Redis database (blocking dequeue, ``BRPOP``, its
default). The bodies are those of :mod:`_peers_common`; they return None, so Huey stores no
result.
"""

from __future__ import annotations

from huey import RedisHuey

import _peers_common as body

huey = RedisHuey("peers", url=body.REDIS_URL)


@huey.task()
def hit() -> None:
    """One synchronous Redis round trip (INCR and the Redis-side time stamps)."""
    body.hit()


@huey.task()
def stamp(key: str, t0: float) -> None:
    """Record how long after ``t0`` this body started."""
    body.stamp(key, t0)


body.gate()
