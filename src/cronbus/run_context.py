"""The run context: what a running attempt knows about itself, and how it spawns children.

A task function with a parameter named ``ctx`` receives a :class:`RunContext` there (it is not
one of the run's arguments). Besides the run's place (``run_id``, ``attempt``, ``shard_index``
and ``shard_total`` for a shard, ``parent_id``), it offers ``log``, the attempt's cancel
``token``, and ``map``: spawn one child run per item, in batches of one transaction each, with
an optional reduce run that receives the children's results once they all succeeded.

Children are numbered by item from 0 within one attempt, so a retried body that maps the same
items again creates none of them twice (the store skips an index it has).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from .distribution.fanout import map_children
from .errors import CronbusError, InvalidArgumentError
from .model import ClaimedRun, NewRun
from .task import Call, Task
from .validation import shorten

if TYPE_CHECKING:
    from .worker.interrupt import CancelToken

__all__ = ["MAP_BATCH", "RunContext", "RunLog"]

MAP_BATCH = 1000
"""Children created per transaction by ``map`` (its ``batch``) unless told otherwise."""
MAX_BATCH = 10_000
"""The largest ``batch`` a ``map`` may ask for."""


class RunLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A task's logger bound to its run and attempt: records carry ``run_id`` and ``attempt``
    (the attempt's number) as extra fields, beside any the caller gives."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Add the run's fields to the record's extra fields."""
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class RunContext:
    """A running attempt's view of itself (a task's ``ctx`` parameter)."""

    def __init__(
        self,
        claimed: ClaimedRun,
        task: Task[Any, Any],
        token: CancelToken,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.run_id = claimed.run_id
        """The run's id."""
        self.attempt = claimed.attempt
        """The try, counted against the task's retries (1 for the first)."""
        self.number = claimed.number
        """The attempt's number among all the run's attempts, lost ones included."""
        self.parent_id = claimed.parent_id
        """The parent run's id, for a child run (broadcast, shard or map); else None."""
        self.child_index = claimed.child_index
        """A child's place among its parent's children (shard index, map item, broadcast
        ordinal); else None."""
        self.shard_total = claimed.shard_total
        """How many shards the parent has, for a shard child; else None."""
        self.shard_index = claimed.child_index if claimed.shard_total is not None else None
        """This shard's index, 0 to ``shard_total - 1``, for a shard child; else None."""
        self.token = token
        """The attempt's cancel token: ``ctx.token.cancelled``, ``ctx.token.wait(5)``."""
        self.log = RunLog(
            logging.getLogger(task.name), {"run_id": claimed.run_id, "attempt": claimed.number}
        )
        """A logger named after the task, its records bound to this run and attempt."""
        self._claimed = claimed
        self._app = task.app
        self._loop = loop
        self._next_index = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<RunContext run={self.run_id} attempt={self.attempt}>"

    # -- map -------------------------------------------------------------------------------------
    def map(
        self,
        task: Task[Any, Any],
        items: Iterable[Any],
        *,
        reduce: Task[Any, Any] | None = None,
        batch: int = MAP_BATCH,
    ) -> int:
        """Create one run of ``task`` per item, children of this run, and return how many
        items were mapped; from a sync task (an async one awaits :meth:`map_async`).

        An item that is a :class:`~cronbus.task.Call` gives its arguments; any other item is
        the one positional argument. ``reduce`` (a task taking one list) runs once every child
        succeeded, with their results in item order; the parent ends as it does (or, without
        it, when the children end). Children are created ``batch`` per transaction."""
        self._off_loop()
        reduce_run = self._reduce(reduce)
        total = 0
        for chunk in self._chunks(task, items, batch):
            children = self._children(task, chunk)
            self._call(self._spawn(children, reduce_run))
            total += len(children)
        if total == 0 and reduce_run is not None:
            self._call(self._spawn([], reduce_run))
        return total

    async def map_async(
        self,
        task: Task[Any, Any],
        items: Iterable[Any],
        *,
        reduce: Task[Any, Any] | None = None,
        batch: int = MAP_BATCH,
    ) -> int:
        """:meth:`map`, from an async task."""
        reduce_run = self._reduce(reduce)
        total = 0
        for chunk in self._chunks(task, items, batch):
            children = self._children(task, chunk)
            await self._spawn(children, reduce_run)
            total += len(children)
        if total == 0 and reduce_run is not None:
            await self._spawn([], reduce_run)
        return total

    def _chunks(self, task: object, items: Iterable[Any], batch: int) -> Iterator[list[Any]]:
        if not isinstance(task, Task):
            raise InvalidArgumentError(
                f"ctx.map takes a task (a function decorated with @app.task), got {shorten(task)}",
                field="task",
            )
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise InvalidArgumentError(
                f"batch must be a whole number from 1 to {MAX_BATCH:,}, got {shorten(batch)}",
                field="batch",
            )
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidArgumentError(
                f"ctx.map takes an iterable of items (one per child), got {type(items).__name__}",
                field="items",
            )
        iterator = iter(items)
        while chunk := list(itertools.islice(iterator, batch)):
            yield chunk

    def _children(self, task: Task[Any, Any], chunk: list[Any]) -> list[NewRun]:
        """The chunk's children, numbered on from the last ones of this attempt."""
        now = self._app.clock.now()
        news = []
        with self._lock:
            start = self._next_index
            for offset, item in enumerate(chunk):
                args, kwargs = _call_of(item)
                try:
                    news.append(task.prepare(args, kwargs, now=now, namespace=self._namespace))
                except CronbusError as exc:
                    raise type(exc)(f"ctx.map item #{start + offset}: {exc}") from None
            self._next_index = start + len(chunk)
        if not task.policy.per_call:  # one template serves every child
            calls = [(new.args_json, new.kwargs_json) for new in news]
            return map_children(self.run_id, news[0], start, calls)
        return [
            map_children(self.run_id, new, start + i, [(new.args_json, new.kwargs_json)])[0]
            for i, new in enumerate(news)
        ]

    def _reduce(self, reduce: object) -> NewRun | None:
        """The reduce run's template (its arguments are the results, filled in later)."""
        if reduce is None:
            return None
        if not isinstance(reduce, Task):
            raise InvalidArgumentError(
                f"reduce must be a task (a function decorated with @app.task), got "
                f"{shorten(reduce)}",
                field="reduce",
            )
        try:
            return reduce.prepare([[]], {}, now=self._app.clock.now(), namespace=self._namespace)
        except CronbusError as exc:
            raise InvalidArgumentError(
                f"reduce task {reduce.name!r} must take the children's results as its one "
                f"argument: {exc}",
                field="reduce",
            ) from None

    async def _spawn(self, children: list[NewRun], reduce: NewRun | None) -> int:
        store = self._app.store
        return await store.spawn(self._claimed, children, reduce, self._app.clock.now())

    @property
    def _namespace(self) -> str:
        # A worker claims only runs of its app's namespace: the parent's is the app's.
        return self._app.namespace

    def _off_loop(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is self._loop:
            raise CronbusError(
                "ctx.map blocks, and this is the worker's event loop: in an async task use "
                "`await ctx.map_async(...)`"
            )

    def _call(self, coro: Any) -> int:
        """Run a coroutine on the worker's loop from the task's thread, and wait for it."""
        result: int = asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        return result


def _call_of(item: Any) -> tuple[tuple[Any, ...] | list[Any], Mapping[str, Any]]:
    """One item's arguments: a :class:`Call`'s own, else the item as the one argument."""
    if isinstance(item, Call):
        if not isinstance(item.args, tuple | list) or not isinstance(item.kwargs, Mapping):
            raise InvalidArgumentError(
                f"a Call's args must be a tuple or list and its kwargs a mapping, got "
                f"{shorten(item)}"
            )
        return item.args, item.kwargs
    return (item,), {}


def context_arguments(
    task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any], ctx: RunContext
) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments with ``ctx`` where the function takes it: in its place among the
    positional arguments when they reach past it, else by name."""
    index = task.context_index
    if index is not None and len(args) > index:
        return [*args[:index], ctx, *args[index:]], kwargs
    return args, {**kwargs, "ctx": ctx}
