"""What ``bench/peers.py`` and the peers' app modules share: the Redis database the task bodies
write to, the bodies themselves, and the start gate of the worker processes.

The app modules (``_peers_cronbus``, ``_peers_huey``, ``_peers_dramatiq``) are imported by
the benchmark and by the worker processes it starts (``cronbus worker``, ``huey_consumer``,
``dramatiq``), so every system runs the very same body:

* ``hit()``: the processed-runs body, **one Redis round trip** through redis-py (a client per
  process): ``EVALSHA`` of :data:`HIT_LUA`, which does ``INCR`` on a counter and records
  Redis's own ``TIME`` as the first stamp (when the counter became 1) and as the last stamp
  (every call), all atomically (and counts the bodies of each process). The benchmark times
  the work from these stamps: runs / (last - first), read from Redis, not from any queue's
  own tables. ``ahit()`` is the same through ``redis.asyncio``.
* ``stamp(key, t0)``: the latency body: ``RPUSH key (time.time() - t0)``, where ``t0`` is the
  wall-clock time the benchmark took just before the defer call (or the run's due time),
  carried in the arguments; the worker's clock is read first thing in the body.

The gate: with ``PEERS_GATE`` set in its environment, a process that imports an app module
pushes its pid to :data:`READY_KEY` and blocks until it pops a token from :data:`GO_KEY`, so
the benchmark can defer its runs first, start the workers, and release them all at once when
each has done its imports (interpreter start-up is not measured).

Everything lives in one Redis database (``PEERS_REDIS_URL``, default db 15 of the local
server) that the benchmark empties (``FLUSHDB``, that database only) before and after each
measurement.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis
import redis.asyncio

REDIS_URL = os.environ.get("PEERS_REDIS_URL", "redis://127.0.0.1:6379/15")
"""The Redis database of the benchmark (bodies, gate, Huey's and Dramatiq's queues)."""
GATE_ENV = "PEERS_GATE"
READY_KEY = "peers:ready"
GO_KEY = "peers:go"
GATE_TIMEOUT = 300
"""Seconds a gated process waits for the benchmark's go before it gives up."""
COUNT_KEY = "peers:count"
FIRST_KEY = "peers:first"
LAST_KEY = "peers:last"
SHARES_KEY = "peers:shares"
HIT_KEYS = [COUNT_KEY, FIRST_KEY, LAST_KEY, SHARES_KEY]
QUEUE = "peers"
"""The queue (cronbus, Dramatiq) of every task of the benchmark."""

HIT_LUA = """
local n = redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
local stamp = t[1] .. string.format('%06d', tonumber(t[2]))
if n == 1 then redis.call('SET', KEYS[2], stamp) end
redis.call('SET', KEYS[3], stamp)
redis.call('HINCRBY', KEYS[4], ARGV[1], 1)
return n
"""
"""INCR the counter; stamp Redis's clock (microseconds since the epoch) as first and last;
count the bodies of each process (by pid), to show how the processes shared the work."""

_PID = os.getpid()
_lock = threading.Lock()
_client: redis.Redis | None = None
_script: Any = None
_aclient: redis.asyncio.Redis | None = None
_ascript: Any = None


def client() -> redis.Redis:
    """This process's redis-py client (thread-safe: a connection pool)."""
    global _client, _script
    if _client is None:
        with _lock:
            if _client is None:
                made = redis.Redis.from_url(REDIS_URL)
                _script = made.register_script(HIT_LUA)
                _client = made
    return _client


def hit() -> None:
    """The processed-runs body: one synchronous round trip to Redis (see :data:`HIT_LUA`)."""
    client()
    _script(keys=HIT_KEYS, args=[_PID])


async def ahit() -> None:
    """The same body through ``redis.asyncio`` (a client per process, made on its loop)."""
    global _aclient, _ascript
    if _aclient is None:
        _aclient = redis.asyncio.Redis.from_url(REDIS_URL)
        _ascript = _aclient.register_script(HIT_LUA)
    await _ascript(keys=HIT_KEYS, args=[_PID])


def stamp(key: str, t0: float) -> None:
    """The latency body: push how long after ``t0`` (wall clock) this body started."""
    started = time.time()
    client().rpush(key, started - t0)


def gate() -> None:
    """With ``PEERS_GATE`` set: say ready, then wait for the benchmark's go (see the module)."""
    if not os.environ.get(GATE_ENV):
        return
    conn = client()
    conn.rpush(READY_KEY, os.getpid())
    if conn.blpop([GO_KEY], timeout=GATE_TIMEOUT) is None:
        raise SystemExit(f"peers: no go from the benchmark in {GATE_TIMEOUT}s")
