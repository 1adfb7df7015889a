"""What several tabs read repeatedly, computed once per few seconds for all of them.

Twenty open tabs refreshing the same table must cost what one tab costs: a page's read that
every tab repeats goes through :func:`shared`, which keeps the value for ``ttl`` seconds in
the process and makes concurrent callers of a stale key wait for one computation. It is the
same cache as the services' stats figures (:data:`cronbus.services.stats.CACHE`).

A key always names the store (``id(store)``) and the namespace, then what is read::

    rows = await shared(
        ("jobs", id(store), session.namespace, cursor), 2.0, lambda: services.jobs.list()
    )

Only what every viewer of the namespace may see belongs here: a value computed for one token
is served to every other token reading the same key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..services.stats import CACHE

__all__ = ["shared"]

T = TypeVar("T")


async def shared(key: tuple[object, ...], ttl: float, compute: Callable[[], Awaitable[T]]) -> T:
    """The value of ``key`` computed less than ``ttl`` seconds ago, else ``compute()``'s.

    Process-wide; concurrent callers of a missing or stale key wait for one computation.
    When ``compute`` fails its caller gets the error and nothing is kept: the next caller
    computes again.
    """
    if ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    return await CACHE.get(("console", *key), compute, ttl=ttl)
