"""How the runtime calls plugin code: sync methods in a thread, async ones awaited, and
retriable failures tried again with backoff."""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from ..retry import Retry
from .api import RetriableError

T = TypeVar("T")

RETRY = Retry(retries=5, backoff=0.5, factor=2.0, max_backoff=30.0, jitter=0.5)
"""Retriable failures (:class:`~cronbus.connectors.api.RetriableError`, a store that is down)
are tried again this many times, after these delays, before they count as failures."""


async def call(fn: Callable[..., T | Awaitable[T]], *args: Any) -> T:
    """Call a plugin method: a coroutine function is awaited on the loop; a plain one runs in
    a thread, so a blocking driver never stalls the worker (its result, if awaitable, is
    awaited too)."""
    if inspect.iscoroutinefunction(fn):
        return cast(T, await fn(*args))
    result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        return cast(T, await result)
    return result


def retriable(exc: BaseException) -> bool:
    """True for a failure worth trying again."""
    return isinstance(exc, RetriableError)


async def backoff(attempt: int, stopping: asyncio.Event, policy: Retry = RETRY) -> bool:
    """Wait the policy's delay after failed attempt ``attempt`` (1, 2, …); False when the task
    is stopping meanwhile."""
    delay = policy.delay(attempt, random.random())
    try:
        await asyncio.wait_for(stopping.wait(), timeout=delay)
    except TimeoutError:
        return True
    return False


def describe(exc: BaseException) -> str:
    """An error as one line: its type and message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
