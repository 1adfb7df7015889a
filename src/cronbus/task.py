"""Tasks: registered functions, and how a call to one becomes a run."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar

from .errors import ConfigurationError, CronbusError, InvalidArgumentError
from .handle import RunHandle
from .model import FanOut, NewRun
from .observability.retention_policy import Keep, KeepSpec
from .observability.tracing import capture as capture_trace
from .retry import Retry
from .serialization import context_parameter, encode_call, signature_of
from .task_policy import KeySpec, Redaction, TaskPolicy, check_fanout, check_redact, make_policy
from .validation import (
    RETRIES_LIMIT,
    check_epoch,
    check_int,
    check_label,
    check_seconds,
    check_time,
    shorten,
)
from .validation import check_key as _check_key
from .validation import check_priority as _check_priority
from .validation import check_queue as _check_queue

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")
Isolation = Literal["thread", "async", "process"]
ISOLATIONS: tuple[Isolation, ...] = ("thread", "async", "process")


@dataclass(frozen=True, slots=True)
class Call:
    """One call for :meth:`Task.defer_many`: arguments plus per-call options."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None

    @classmethod
    def of(cls, *args: Any, idempotency_key: str | None = None, **kwargs: Any) -> Call:
        """Build a call the way one writes a function call."""
        return cls(args, kwargs, idempotency_key)


class Task(Generic[P, R]):
    """A registered unit of work: a function with its defaults."""

    def __init__(
        self,
        app: App,
        fn: Callable[P, R] | Callable[P, Awaitable[R]],
        *,
        name: str | None = None,
        queue: str = "default",
        retry: Retry,
        timeout: float | None = None,
        priority: int = 0,
        isolation: Isolation | None = None,
        route: str = "any",
        route_key: KeySpec | None = None,
        labels: Sequence[str] | None = None,
        failover: Sequence[str] | None = None,
        concurrency: int | None = None,
        concurrency_key: KeySpec | None = None,
        rate: str | None = None,
        rate_key: KeySpec | None = None,
        redact: bool | Sequence[str] = (),
        keep: KeepSpec = None,
    ) -> None:
        self.app = app
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = signature_of(fn)
        """The signature runs are checked against (without ``ctx``)."""
        self.isolation: Isolation = isolation or ("async" if self.is_async else "thread")
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.retry = retry
        with configuring():
            self.name = check_label(name or f"{fn.__module__}.{fn.__qualname__}", "task name")
            self.queue = check_queue(queue)
            self.timeout = check_timeout(timeout)
            self.priority = check_priority(priority)
            check_int(retry.retries, f"task {self.name!r}: retries", 0, RETRIES_LIMIT)
        with configuring(f"task {self.name!r}: "):
            self.policy: TaskPolicy = make_policy(
                self.name,
                self.signature,
                route=route,
                route_key=route_key,
                labels=labels,
                failover=failover,
                concurrency=concurrency,
                concurrency_key=concurrency_key,
                rate=rate,
                rate_key=rate_key,
            )
            self.redaction: Redaction = check_redact(redact, self.signature)
            """Which payloads of its runs the services hide (see ``redact`` of ``app.task``)."""
            self.keep: Keep = Keep.coerce(keep, "keep")
            """How long its finished runs are kept, per final state (see ``keep`` of
            ``app.task``; what it does not say is the store's default)."""
        self.context_index: int | None = None
        """Where ``ctx`` sits among the positional parameters (None: keyword-only or none)."""
        self.takes_context = self._check_context()
        """Whether the function has a ``ctx`` parameter for a :class:`~cronbus.RunContext`."""
        if self.isolation not in ISOLATIONS:
            raise ConfigurationError(
                f"task {self.name!r}: isolation must be one of {', '.join(ISOLATIONS)}, "
                f"got {shorten(self.isolation)}"
            )
        if self.isolation == "async" and not self.is_async:
            raise ConfigurationError(
                f"task {self.name!r}: isolation='async' needs an `async def` function"
            )
        if self.isolation == "thread" and self.is_async:
            raise ConfigurationError(
                f"task {self.name!r} is async: use isolation='async' (the default) or 'process'"
            )

    def _check_context(self) -> bool:
        """Whether the function takes a run context (a ``ctx`` parameter the worker fills)."""
        param = context_parameter(self.fn)
        if param is None:
            return False
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ConfigurationError(
                f"task {self.name!r}: the run context parameter `ctx` must be a plain or "
                "keyword-only parameter (the worker passes it by name)"
            )
        if self.isolation == "process":
            raise ConfigurationError(
                f"task {self.name!r}: isolation='process' cannot take a run context (`ctx`); "
                "drop the `ctx` parameter or use isolation='thread' or 'async'"
            )
        if param.kind is param.POSITIONAL_OR_KEYWORD:
            names = list(inspect.signature(self.fn).parameters)
            self.context_index = names.index(param.name)
        return True

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def policy_fields(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], namespace: str
    ) -> dict[str, Any]:
        """The route and limit fields of one call's :class:`NewRun` (route, route_key,
        route_labels, route_order, limit_key/limit_max, rate_key/rate_max/rate_period)."""
        return self.policy.fields(args, kwargs, namespace)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R | Awaitable[R]:
        """Call the function here and now, without a run (handy in tests)."""
        return self.fn(*args, **kwargs)

    def prepare(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        now: float,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        namespace: str | None = None,
        policy: TaskPolicy | None = None,
        fanout: FanOut | None = None,
    ) -> NewRun:
        """Validate one call and its options into a :class:`NewRun`, or raise saying why.

        The run belongs to the app's namespace unless ``namespace`` names another (a
        subscription's task target defers into the subscription's namespace). Its route and
        limits are the task's (``policy`` replaces them for one defer, see :meth:`using`);
        ``fanout`` makes it a parent of broadcast or shard children."""
        args_json, kwargs_json = encode_call(
            self.signature,
            self.name,
            args,
            kwargs,
            max_bytes=self.app.settings.max_payload_bytes,
        )
        namespace = self.app.namespace if namespace is None else namespace
        fields = (policy or self.policy).fields(args, kwargs, namespace)
        return NewRun(
            task=self.name,
            queue=self.queue if queue is None else check_queue(queue),
            args_json=args_json,
            kwargs_json=kwargs_json,
            priority=self.priority if priority is None else check_priority(priority),
            eta=resolve_eta(now, delay, eta),
            max_attempts=self.retry.max_attempts,
            timeout=self.timeout,
            idempotency_key=check_key(idempotency_key),
            namespace=namespace,
            fanout=fanout,
            trace=capture_trace(),  # the caller's span, so its trace continues in the attempt
            **fields,
        )

    def using(
        self,
        *,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        route: str | None = None,
        route_key: KeySpec | None = None,
        labels: Sequence[str] | None = None,
        failover: Sequence[str] | None = None,
        broadcast: bool | Sequence[str] | None = None,
        shards: int | None = None,
    ) -> Deferral:
        """Options for one defer, kept apart from the task's own arguments.

        ``task.using(queue="bulk").defer(queue="a-task-argument")`` passes ``queue`` to the
        task; ``task.defer(..., queue="bulk")`` is the short form when names do not clash.
        ``route``, ``route_key``, ``labels`` and ``failover`` replace the task's for this
        defer; ``broadcast`` (True, or labels) or ``shards`` (a count) fan the run out.
        """
        policy = self.policy.with_routing(
            route=route, route_key=route_key, labels=labels, failover=failover
        )
        return Deferral(
            self,
            delay=delay,
            eta=eta,
            priority=priority,
            queue=queue,
            idempotency_key=idempotency_key,
            policy=None if policy is self.policy else policy,
            fanout=check_fanout(broadcast, shards),
        )

    async def defer_async(
        self,
        *args: Any,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        broadcast: bool | Sequence[str] | None = None,
        shards: int | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Create a run of this task; it is durable when this returns.

        The hot path goes to the store directly, not through the runs service (which would add
        an audit write per run), but :meth:`prepare` checks every value with the very
        validators the service uses, so a defer is refused the same way from Python, the CLI
        and the HTTP API. ``broadcast`` (True, or a list of labels) makes the run a parent
        with one child per live worker that knows the task; ``shards=N`` one with N children."""
        options = self.using(
            delay=delay,
            eta=eta,
            priority=priority,
            queue=queue,
            idempotency_key=idempotency_key,
            broadcast=broadcast,
            shards=shards,
        )
        return await options.defer_async(*args, **kwargs)

    def defer(
        self,
        *args: Any,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        broadcast: bool | Sequence[str] | None = None,
        shards: int | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Create a run of this task (blocking); returns a handle with ``.id``."""
        options = self.using(
            delay=delay,
            eta=eta,
            priority=priority,
            queue=queue,
            idempotency_key=idempotency_key,
            broadcast=broadcast,
            shards=shards,
        )
        return options.defer(*args, **kwargs)

    async def defer_many_async(
        self,
        calls: Iterable[Call | Sequence[Any] | Mapping[str, Any]],
        *,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
        broadcast: bool | Sequence[str] | None = None,
        shards: int | None = None,
    ) -> list[RunHandle]:
        """Create many runs in one transaction: all of them, or none if one is refused.

        Each call is a :class:`Call`, a sequence of positional arguments, or a mapping of
        keyword arguments.
        """
        if isinstance(calls, str | bytes | Mapping) or not isinstance(calls, Iterable):
            raise InvalidArgumentError(
                f"defer_many takes a list of calls, got {type(calls).__name__}"
            )
        fanout = check_fanout(broadcast, shards)
        now = self.app.clock.now()
        news = []
        for index, item in enumerate(calls):
            call = _as_call(item)
            try:
                news.append(
                    self.prepare(
                        call.args,
                        call.kwargs,
                        now=now,
                        delay=delay,
                        eta=eta,
                        priority=priority,
                        queue=queue,
                        idempotency_key=call.idempotency_key,
                        fanout=fanout,
                    )
                )
            except CronbusError as exc:
                raise type(exc)(f"call #{index}: {exc}") from None
        done = await self.app.store.defer(news, self.app.clock.now())
        return [
            RunHandle(self.app, d.id, created=d.created, namespace=new.namespace)
            for d, new in zip(done, news, strict=True)
        ]

    def defer_many(
        self,
        calls: Iterable[Call | Sequence[Any] | Mapping[str, Any]],
        *,
        delay: float | None = None,
        eta: datetime | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
        broadcast: bool | Sequence[str] | None = None,
        shards: int | None = None,
    ) -> list[RunHandle]:
        """Create many runs in one transaction (blocking)."""
        return self.app.blocking(
            self.defer_many_async(
                calls,
                delay=delay,
                eta=eta,
                priority=priority,
                queue=queue,
                broadcast=broadcast,
                shards=shards,
            )
        )


class Deferral:
    """A task with options for one defer (see :meth:`Task.using`)."""

    __slots__ = ("_options", "task")

    def __init__(self, task: Task[Any, Any], **options: Any) -> None:
        self.task = task
        self._options = options

    async def defer_async(self, *args: Any, **kwargs: Any) -> RunHandle:
        """Create the run; every keyword argument goes to the task."""
        app = self.task.app
        new = self.task.prepare(args, kwargs, now=app.clock.now(), **self._options)
        done = await app.defers.defer(new)
        return RunHandle(app, done.id, created=done.created, namespace=new.namespace)

    def defer(self, *args: Any, **kwargs: Any) -> RunHandle:
        """Create the run (blocking)."""
        return self.task.app.blocking(self.defer_async(*args, **kwargs))


def _as_call(item: Call | Sequence[Any] | Mapping[str, Any]) -> Call:
    if isinstance(item, Call):
        if not isinstance(item.args, tuple | list) or not isinstance(item.kwargs, Mapping):
            raise InvalidArgumentError(
                "a Call's args must be a tuple or list and its kwargs a mapping, got "
                f"{shorten(item)}"
            )
        return item
    if isinstance(item, Mapping):
        return Call((), dict(item))
    if isinstance(item, str | bytes) or not isinstance(item, Sequence):
        raise InvalidArgumentError(
            f"each call must be a Call, a list of arguments or a dict of keyword arguments, "
            f"got {type(item).__name__}"
        )
    return Call(tuple(item), {})


@contextlib.contextmanager
def configuring(prefix: str = "") -> Iterator[None]:
    """Report a bad option of a definition (a task, a job) as a :class:`ConfigurationError`:
    it is fixed in the code, not in one call. ``prefix`` (``"task 'x': "``) says whose."""
    try:
        yield
    except InvalidArgumentError as exc:
        raise ConfigurationError(f"{prefix}{exc}") from None


def resolve_eta(now: float, delay: float | None, eta: datetime | float | None) -> float:
    """When a run becomes due, from ``delay`` seconds or an ``eta``; refuse nonsense.

    A delay is 0 to 100 years; the due time, either way, lies between 1970 and 9999 (UTC).
    """
    if delay is not None and eta is not None:
        raise InvalidArgumentError("give delay or eta, not both")
    if delay is not None:
        return check_epoch(now + check_seconds(delay, "delay"), "eta (now + delay)")
    if eta is None:
        return now
    return check_time(eta, "eta")


def check_queue(queue: str) -> str:
    """A queue name: 1-100 letters, digits or ``_ . -``."""
    return _check_queue(queue, "queue name")


def check_priority(priority: int) -> int:
    """A priority: a whole number from -1,000,000 to 1,000,000; higher runs first in a queue."""
    return _check_priority(priority, "priority")


def check_timeout(timeout: float | None) -> float | None:
    """A maximum execution time in seconds (more than zero, at most 100 years), or None."""
    if timeout is None:
        return None
    with configuring():
        return check_seconds(timeout, "timeout", positive=True)


def check_key(key: str | None) -> str | None:
    """An idempotency key: 1 to 500 printable characters, or None."""
    return _check_key(key, "idempotency_key")
