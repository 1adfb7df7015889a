"""Tasks for the distribution cluster tests (``tests/cluster/test_distribution_*.py``).

Every body notes what it did as one JSON line appended to the file named by
``CRONBUS_TEST_DIST_OUT`` (``O_APPEND``: lines of several processes never mix, and their order
in the file is the order the writes happened in), with the pid of the worker process that ran
it. The tests read that file, not the store's bookkeeping, to see where and when bodies ran.

``dist.late`` is registered only by :func:`late_task`, which a worker calls at import when
``CRONBUS_TEST_DIST_LATE=1``: workers started without it do not know that task.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from cronbus import App, RunContext
from cronbus.task import Task

OUT_ENV = "CRONBUS_TEST_DIST_OUT"
LATE_ENV = "CRONBUS_TEST_DIST_LATE"
HOLD_SECONDS = 60.0  # how long a held body waits for its release file before failing
LIMIT = 3  # dist.limited: runs at once, cluster-wide
RATE = 20  # dist.rated: starts per second

app = App()


def note(**fields: Any) -> None:
    """Append one record (with this process's pid and the time) to the output file."""
    line = json.dumps({"pid": os.getpid(), "at": time.time(), **fields}) + "\n"
    fd = os.open(os.environ[OUT_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of a short line: appended whole
    finally:
        os.close(fd)


def hold_until(release: str) -> None:
    """Block the body until the test creates ``release`` (a body's wait, not a test's)."""
    deadline = time.monotonic() + HOLD_SECONDS
    while not Path(release).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} was not created within {HOLD_SECONDS} s")
        time.sleep(0.01)


# -- routing -------------------------------------------------------------------------------------
@app.task(name="dist.where")
def where(key: str) -> int:
    """Note where it ran (route ``any``, or whatever ``using(route=...)`` says)."""
    note(task="where", key=key)
    return os.getpid()


@app.task(name="dist.rr", route="round_robin")
def round_robin(key: str) -> int:
    """Note where it ran; routed round robin."""
    note(task="rr", key=key)
    return os.getpid()


@app.task(name="dist.hash", route="hash", route_key="key")
def hashed(key: str) -> int:
    """Note where it ran; routed by rendezvous hashing of ``key``."""
    note(task="hash", key=key)
    return os.getpid()


@app.task(name="dist.least", route="least_busy")
def least_busy(key: str) -> int:
    """Note where it ran; routed to the least busy worker."""
    note(task="least", key=key)
    return os.getpid()


@app.task(name="dist.gpu", route="labels", labels=["gpu"])
def gpu(key: str) -> int:
    """Note where it ran; only workers labelled ``gpu``."""
    note(task="gpu", key=key)
    return os.getpid()


@app.task(name="dist.gpu_eu", route="labels", labels=["gpu", "eu"])
def gpu_eu(key: str) -> int:
    """Note where it ran; only workers labelled both ``gpu`` and ``eu``."""
    note(task="gpu_eu", key=key)
    return os.getpid()


@app.task(name="dist.random", route="random", labels=["gpu"])
def randomly(key: str) -> int:
    """Note where it ran; a random worker among those labelled ``gpu``."""
    note(task="random", key=key)
    return os.getpid()


@app.task(name="dist.hold")
def hold(key: str, release: str) -> int:
    """Note the start, hold the slot until ``release`` exists, note the end."""
    note(task="hold", key=key, phase="start")
    hold_until(release)
    note(task="hold", key=key, phase="end")
    return os.getpid()


# -- fan-out -------------------------------------------------------------------------------------
@app.task(name="dist.hello")
def hello(ctx: RunContext) -> int:
    """A broadcast child: note its parent and where it ran."""
    note(task="hello", parent=ctx.parent_id, index=ctx.shard_index)
    return os.getpid()


@app.task(name="dist.shard")
def shard(held: int, release: str, ctx: RunContext) -> int:
    """A shard: note its start; shard ``held`` then waits for ``release``; note the end."""
    fields = {"task": "shard", "index": ctx.shard_index, "total": ctx.shard_total}
    note(**fields, phase="start")
    if ctx.shard_index == held:
        hold_until(release)
    note(**fields, phase="end")
    return os.getpid()


@app.task(name="dist.square")
def square(n: int) -> int:
    """One map item."""
    return n * n


@app.task(name="dist.total")
def total(results: list[int]) -> int:
    """The reduce: note how many results came, whether in item order, and their sum."""
    ordered = all(value == i * i for i, value in enumerate(results))
    note(task="total", count=len(results), ordered=ordered, sum=sum(results))
    return sum(results)


@app.task(name="dist.squares")
def squares(n: int, ctx: RunContext) -> int:
    """The map-reduce parent: one ``dist.square`` child per number below ``n``, then the sum."""
    return ctx.map(square, range(n), reduce=total)


# -- limits --------------------------------------------------------------------------------------
@app.task(name="dist.limited", concurrency=LIMIT)
def limited(n: int, pause: float) -> None:
    """Note the start, hold the slot ``pause`` seconds, note the end."""
    note(task="limited", n=n, phase="start")
    time.sleep(pause)
    note(task="limited", n=n, phase="end")


@app.task(name="dist.per_customer", concurrency=1, concurrency_key="customer")
def per_customer(customer: str, n: int, pause: float) -> None:
    """As :func:`limited`, one run at a time per customer."""
    note(task="per_customer", customer=customer, n=n, phase="start")
    time.sleep(pause)
    note(task="per_customer", customer=customer, n=n, phase="end")


@app.task(name="dist.rated", rate=f"{RATE}/s")
def rated(n: int) -> None:
    """Note the start."""
    note(task="rated", n=n)


# -- a task only new workers know -----------------------------------------------------------------
def _late(key: str) -> int:
    """Note where it ran."""
    note(task="late", key=key)
    return os.getpid()


def late_task() -> Task[[str], int]:
    """``dist.late``, registered on :data:`app` the first time it is asked for."""
    known = app.tasks.get("dist.late")
    if known is not None:
        return known
    registered: Task[[str], int] = app.task(name="dist.late")(_late)
    return registered


if os.environ.get(LATE_ENV) == "1":
    late_task()
