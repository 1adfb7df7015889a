"""Dramatiq's app for ``bench/peers.py``: ``dramatiq _peers_dramatiq --processes 2 --threads 8``.

A :class:`dramatiq.brokers.redis.RedisBroker` on the benchmark's Redis database (its own
namespace), with Dramatiq's default middleware. The bodies are those of :mod:`_peers_common`.
"""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

import _peers_common as body

broker = RedisBroker(url=body.REDIS_URL, namespace="peers-dramatiq")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=body.QUEUE, max_retries=0)
def hit() -> None:
    """One synchronous Redis round trip (INCR and the Redis-side time stamps)."""
    body.hit()


@dramatiq.actor(queue_name=body.QUEUE, max_retries=0)
def stamp(key: str, t0: float) -> None:
    """Record how long after ``t0`` this body started."""
    body.stamp(key, t0)


body.gate()
