"""The application object: tasks, the store, and the lifecycle that opens and closes them."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .clock import Clock, SystemClock
from .config import Settings
from .connectors.registry import ConnectorKinds
from .errors import ConfigurationError, CronbusError, InvalidArgumentError, UnknownTaskError
from .events.bus import Events, Subscriptions, handler_spec
from .events.event import DEFAULT_SOURCE, Event, make_event
from .events.records import SubscriptionSpec
from .events.targets import Handler
from .group_commit import GroupCommit
from .jobs import JobOptions, Jobs, build_spec
from .model import JobSpec, NewRun
from .observability.alerts.registry import AlertRegistry
from .observability.retention_policy import KeepSpec
from .portal import Portal
from .retry import Retry
from .store import Store, default_url, open_store
from .task import Isolation, Task
from .task_policy import KeySpec
from .validation import DEFAULT_NAMESPACE, check_namespace

if TYPE_CHECKING:
    from .observability.alerts.records import Destination
    from .observability.metrics import Metrics
    from .services import Access, Services

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound=Callable[..., Any])
log = logging.getLogger("cronbus.app")
Hook = Callable[["App"], Awaitable[None] | None]
NAMESPACE_VARIABLE = "CRONBUS_NAMESPACE"
"""The environment variable an app reads its namespace from when none is given."""


def _namespace(given: str | None) -> str:
    """The app's namespace: ``given``, else ``CRONBUS_NAMESPACE``, else ``default``; refused
    (naming the variable when it came from there) unless it follows the namespace grammar."""
    if given is not None:
        return check_namespace(given)
    raw = os.environ.get(NAMESPACE_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_NAMESPACE
    try:
        return check_namespace(raw)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{NAMESPACE_VARIABLE}: {exc}", field="namespace") from None


class App:
    """Tasks and the store they share.

    Nothing starts at construction or import: open the app with ``with app:`` in sync code or
    ``async with app:`` in async code, or let ``cronbus worker|server --app`` open it.

    An app lives in one namespace (``namespace=``, ``CRONBUS_NAMESPACE``, else ``default``):
    what it defers, publishes and defines goes there, and its workers claim only runs of it.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        lease_seconds: float | None = None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        namespace: str | None = None,
        metrics: bool | None = None,
    ) -> None:
        self.namespace: str = _namespace(namespace)
        """The namespace this app's runs, jobs, topics and subscriptions live in: its workers
        claim only runs of it (``namespace=``, else ``CRONBUS_NAMESPACE``, else ``default``)."""
        self._store_arg = store
        self._store: Store | None = None
        self.settings = (settings or Settings.load()).with_overrides(lease_seconds=lease_seconds)
        self.clock: Clock = clock or SystemClock()
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.code_jobs: dict[str, JobSpec] = {}
        self.jobs = Jobs(self)
        """Jobs in the store: ``await app.jobs.add(...)``, ``pause``, ``resume``, ``trigger``..."""
        self.handlers: dict[str, Handler] = {}
        self.code_subscriptions: dict[str, SubscriptionSpec] = {}
        self.events = Events(self)
        """Topics in the store: ``await app.events.read(topic, after=...)``, retention."""
        self.subscriptions = Subscriptions(self)
        """Subscriptions in the store: ``await app.subscriptions.add(...)``, ``pause``..."""
        self.connector_kinds = ConnectorKinds()
        """The connector kinds this app's workers can run: the built-ins, and the app's own
        (``@app.connector_kinds.register`` on a :class:`~cronbus.connectors.Connector` class)."""
        self.alerts = AlertRegistry(self)
        """Alert rules in this app's code: ``app.alerts.add("queue-depth", threshold=100,
        to=[webhook(...)])`` (see :mod:`cronbus.observability.alerts`)."""
        self._startup: list[Hook] = []
        self._metrics_on = metrics
        self._metrics: Metrics | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._portal: Portal | None = None
        self._opened = 0
        self.defers = GroupCommit(lambda: self.store, lambda: self.clock.now())
        """Single defers, written in shared transactions when they come together."""

    def __repr__(self) -> str:
        return (
            f"<App store={self.store_url!r} namespace={self.namespace!r} tasks={len(self.tasks)}>"
        )

    @property
    def store_url(self) -> str:
        """The URL of the store this app uses."""
        if isinstance(self._store_arg, str):
            return self._store_arg
        if self._store_arg is not None:
            return self._store_arg.url
        return default_url()

    def use_store(self, store: str | Store) -> None:
        """Point a closed app at another store (the CLI's ``--store`` does this)."""
        if self._store is not None:
            raise ConfigurationError("the app is open; close it before changing its store")
        self._store_arg = store

    def use_namespace(self, namespace: str) -> None:
        """Move a closed app, with the jobs and subscriptions its code defines, to another
        namespace (the CLI's ``--namespace`` does this after importing the app)."""
        if self._store is not None:
            raise ConfigurationError("the app is open; close it before changing its namespace")
        self.namespace = check_namespace(namespace)
        self.code_jobs = {
            name: replace(spec, namespace=self.namespace) for name, spec in self.code_jobs.items()
        }
        self.code_subscriptions = {
            name: replace(spec, namespace=self.namespace)
            for name, spec in self.code_subscriptions.items()
        }

    @property
    def metrics(self) -> Metrics | None:
        """This app's Prometheus metrics (``app.metrics.registry`` holds them), made on first
        use: the roles use it, other processes never load ``prometheus_client``. None when
        switched off: ``App(metrics=False)`` or ``CRONBUS_METRICS=0``."""
        if self._metrics is None and self._metrics_on is not False:
            from .observability.hooks import attach
            from .observability.metrics import Metrics, metrics_enabled

            self._metrics_on = metrics_enabled(self._metrics_on)
            if self._metrics_on:
                self._metrics = Metrics()
                if self._store is not None:
                    attach(self._store, self._metrics)
        return self._metrics

    @property
    def store(self) -> Store:
        """The open store."""
        if self._store is None:
            raise CronbusError(
                "the app is not open: wrap your code in `with app:` or `async with app:`"
            )
        return self._store

    # -- tasks ---------------------------------------------------------------------------------
    @overload
    def task(self, fn: F, /) -> Task[Any, Any]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        retries: int | Retry | None = None,
        timeout: float | None = None,
        priority: int = 0,
        isolation: Isolation | None = None,
        retry_on: Sequence[type[BaseException]] | None = None,
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
    ) -> Callable[[F], Task[Any, Any]]: ...

    def task(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        retries: int | Retry | None = None,
        timeout: float | None = None,
        priority: int = 0,
        isolation: Isolation | None = None,
        retry_on: Sequence[type[BaseException]] | None = None,
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
    ) -> Task[Any, Any] | Callable[[F], Task[Any, Any]]:
        """Register a function as a task; use bare (``@app.task``) or with options.

        ``retries`` is a count or a :class:`Retry` policy; ``retry_on`` limits retries to these
        exception types; ``timeout`` is the maximum execution time in seconds; ``isolation`` is
        ``"thread"`` (default for sync functions), ``"async"`` (default for coroutines) or
        ``"process"`` (a child process that can be killed).

        Distribution (enforced by the store across every worker; see docs/distribution.md):
        ``route`` picks the worker (``any``, ``round_robin``, ``random``, ``hash`` with
        ``route_key``, ``least_busy``, ``failover`` with ``failover=[ids or 'label:x']``,
        ``labels``), ``labels`` narrows it to workers carrying them; ``concurrency`` caps the
        runs running at once (per ``concurrency_key`` when given), ``rate`` (``"100/m"``) the
        starts per period (per ``rate_key``). A key is an argument's name or a callable given
        the call's ``(*args, **kwargs)``. A function with a ``ctx`` parameter receives a
        :class:`~cronbus.run_context.RunContext` there.

        ``redact`` hides payloads from every reader with a token (the HTTP API, the console and
        the CLI through a server show ``"[redacted]"``): argument names (``redact=("password",
        "card")``, passed by keyword or by position), or ``True`` for every argument and the
        result. The worker, local code (a run's handle) and local commands still see them.

        ``keep`` is how long its finished runs are kept (retention): one age for every final
        state (``"30d"``, seconds, a timedelta) or per state (``{"succeeded": "1d", "dead":
        "90d"}``, or a :class:`~cronbus.observability.retention_policy.Keep`); states it does
        not name keep the store's defaults (``CRONBUS_KEEP_*_SECONDS``).
        """

        def register(function: F) -> Task[Any, Any]:
            if not callable(function):
                raise ConfigurationError(f"@app.task needs a function, got {function!r}")
            policy = Retry.coerce(retries)
            if retry_on is not None:
                policy = replace(policy, retry_on=tuple(retry_on))
            task: Task[Any, Any] = Task(
                self,
                function,
                name=name,
                queue=queue,
                retry=policy,
                timeout=timeout,
                priority=priority,
                isolation=isolation,
                route=route,
                route_key=route_key,
                labels=labels,
                failover=failover,
                concurrency=concurrency,
                concurrency_key=concurrency_key,
                rate=rate,
                rate_key=rate_key,
                redact=redact,
                keep=keep,
            )
            if task.name in self.tasks:
                raise ConfigurationError(f"two tasks are named {task.name!r}; give one a name=")
            self.tasks[task.name] = task
            return task

        return register(fn) if fn is not None else register

    def job(
        self,
        *,
        name: str | None = None,
        cron: str | None = None,
        every: float | timedelta | None = None,
        after: float | timedelta | None = None,
        at: datetime | float | str | None = None,
        tz: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        jitter: float = 0.0,
        calendars: Sequence[str] = (),
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        misfire: str = "once",
        misfire_grace: float = 1.0,
        misfire_max: int = 100,
        overlap: str = "allow",
        children: Sequence[str] = (),
        max_fires: int | None = None,
        paused: bool = False,
        queue: str | None = None,
        priority: int | None = None,
        retries: int | Retry | None = None,
        timeout: float | None = None,
        isolation: Isolation | None = None,
        broadcast: bool = False,
        shards: int | None = None,
    ) -> Callable[[Callable[..., Any]], Task[Any, Any]]:
        """Define a job in code: a task plus one trigger (``cron``, ``every``, ``after`` or
        ``at``) and its policies. Jobs defined in code are synced to the store when a scheduler
        starts. Decorate a plain function (it becomes a task too) or a task. ``broadcast``
        makes each fire a parent run with one child per live worker that knows the task;
        ``shards=N`` one with N children."""
        options = JobOptions(
            cron=cron,
            every=every,
            after=after,
            at=at,
            tz=tz,
            start=start,
            end=end,
            jitter=jitter,
            calendars=calendars,
            args=args,
            kwargs=kwargs,
            misfire=misfire,
            misfire_grace=misfire_grace,
            misfire_max=misfire_max,
            overlap=overlap,
            children=children,
            max_fires=max_fires,
            queue=queue,
            priority=priority,
            paused=paused,
            broadcast=broadcast,
            shards=shards,
        )

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            task = (
                function
                if isinstance(function, Task)
                else self.task(retries=retries, timeout=timeout, isolation=isolation)(function)
            )
            spec = replace(
                build_spec(name or task.name, task, options, source="code"),
                namespace=self.namespace,
            )
            if spec.name in self.code_jobs:
                raise ConfigurationError(f"two jobs are named {spec.name!r}; give one a name=")
            self.code_jobs[spec.name] = spec
            return task

        return register

    # -- events ------------------------------------------------------------------------------
    def subscribe(
        self,
        *,
        topic: str,
        name: str | None = None,
        types: Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        subject: str | Sequence[str] | None = None,
        data: Mapping[str, Any] | None = None,
        filter: Mapping[str, Any] | None = None,
        start: str = "latest",
        **policy: Any,
    ) -> Callable[[H], H]:
        """Push the matching events of ``topic`` to the decorated function (sync or async),
        in every dispatcher of this app. It receives an :class:`~cronbus.events.Event`;
        returning acknowledges, raising fails the push (retried with backoff, then a dead
        letter). Filters and delivery options are those of ``app.subscriptions.add``."""

        def register(function: H) -> H:
            if not callable(function):
                raise ConfigurationError(f"@app.subscribe needs a function, got {function!r}")
            chosen = name or f"{function.__module__}.{function.__qualname__}"
            spec = replace(
                handler_spec(
                    chosen,
                    topic,
                    types=types,
                    source=source,
                    subject=subject,
                    data=data,
                    filter=filter,
                    start=start,
                    policy=policy,
                ),
                namespace=self.namespace,
            )
            if chosen in self.code_subscriptions:
                raise ConfigurationError(
                    f"two subscriptions are named {chosen!r}; give one a name="
                )
            self.code_subscriptions[chosen] = spec
            self.handlers[chosen] = function
            return function

        return register

    def alert(
        self, *, to: Sequence[Destination], name: str | None = None, repeat: float | str = 3600
    ) -> Callable[[F], F]:
        """Alert with a check of your own: the decorated function gets the namespace's
        figures at every evaluation and returns None (all well), a message or a mapping of
        subject to message (see ``AlertRegistry.check`` in
        :mod:`cronbus.observability.alerts.registry`)."""
        return self.alerts.check(to=to, name=name, repeat=repeat)

    async def publish_async(
        self,
        topic: str,
        type: str,
        data: Any = None,
        *,
        source: str = DEFAULT_SOURCE,
        subject: str | None = None,
        id: str | None = None,
        key: str | None = None,
        time: Any = None,
    ) -> Event:
        """Append one event to ``topic``; returns it (with its offset) once it is durable.

        A repeated ``id`` in the topic is stored once: the stored event's offset is returned.
        Topics under ``cronbus.`` are cronbus's own; attributes and data follow docs/limits.md.
        """
        event = make_event(type, data, source=source, subject=subject, id=id, key=key, time=time)
        (published,) = await self.events.publish_many(topic, [event])
        return published.event

    def publish(
        self,
        topic: str,
        type: str,
        data: Any = None,
        *,
        source: str = DEFAULT_SOURCE,
        subject: str | None = None,
        id: str | None = None,
        key: str | None = None,
        time: Any = None,
    ) -> Event:
        """:meth:`publish_async`, blocking (from sync code, inside ``with app:``)."""
        return self.blocking(
            self.publish_async(
                topic, type, data, source=source, subject=subject, id=id, key=key, time=time
            )
        )

    async def publish_many_async(self, topic: str, events: Sequence[Event]) -> list[Event]:
        """Append events (built with :func:`cronbus.events.make_event`) in one transaction."""
        return [p.event for p in await self.events.publish_many(topic, events)]

    def publish_many(self, topic: str, events: Sequence[Event]) -> list[Event]:
        """:meth:`publish_many_async`, blocking."""
        return self.blocking(self.publish_many_async(topic, events))

    def services(self, access: Access | None = None, namespace: str | None = None) -> Services:
        """The service layer over this app's store (:mod:`cronbus.services`): every use case
        of the CLI and the HTTP API, for ``access`` (default: local, admin of everything) in
        ``namespace`` (default: the app's). The app must be open when a method is called."""
        from .services import LOCAL, Services  # the services import this module's siblings

        return Services(self, access or LOCAL, namespace)

    def shape_run(self, new: NewRun) -> NewRun:
        """``new`` with its task's route and limits when this app knows the task (a run made
        without the task's code, by a job's fire or the CLI, carries none), or ``new`` as it
        is. Raises :class:`~cronbus.errors.InvalidArgumentError` when a key cannot be taken
        from the run's arguments."""
        task = self.tasks.get(new.task)
        if task is None:
            return new
        args, kwargs = json.loads(new.args_json), json.loads(new.kwargs_json)
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise InvalidArgumentError(
                f"run of task {new.task!r}: its arguments are not a list and an object"
            )
        return replace(new, **task.policy_fields(args, kwargs, new.namespace))

    def get_task(self, name: str) -> Task[Any, Any]:
        """The task registered under ``name``."""
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTaskError(f"no task named {name!r} (known: {known})") from None

    def on_startup(self, hook: Hook) -> Hook:
        """Call ``hook(app)`` (sync or async) when a worker or server of this app starts."""
        self._startup.append(hook)
        return hook

    async def run_startup_hooks(self) -> None:
        """Run the ``on_startup`` hooks, in order."""
        for hook in self._startup:
            result = hook(self)
            if inspect.isawaitable(result):
                await result

    # -- lifecycle -----------------------------------------------------------------------------
    async def open_async(self, *, create: bool = True) -> None:
        """Open the store (creating it and applying migrations) on the running loop. Nests.
        ``create=False`` (for reading) opens only an existing, up-to-date store."""
        self._opened += 1
        if self._store is not None:
            return
        arg = default_url() if self._store_arg is None else self._store_arg
        store = open_store(arg) if isinstance(arg, str) else arg
        try:
            await store.open(create=create)
        except BaseException:
            self._opened -= 1
            raise
        self._store = store
        self._loop = asyncio.get_running_loop()
        if self._metrics is not None:
            from .observability.hooks import attach

            attach(store, self._metrics)

    async def close_async(self) -> None:
        """Close the store when the outermost open ends."""
        self._opened = max(0, self._opened - 1)
        if self._opened or self._store is None:
            return
        store, self._store, self._loop = self._store, None, None
        await store.close()

    async def __aenter__(self) -> App:
        await self.open_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close_async()

    def __enter__(self) -> App:
        if self._store is not None:
            self._opened += 1
            return self
        portal = Portal()
        try:
            portal.call(self.open_async())
        except BaseException:
            portal.stop()
            raise
        self._portal = portal
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        portal = self._portal
        if portal is None or self._opened > 1:
            self._opened = max(0, self._opened - 1)
            return
        try:
            portal.call(self.close_async())
        finally:
            self._portal = None
            portal.stop()

    def blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of this app from sync code, on the loop the app was opened on."""
        loop = self._loop
        if loop is None:
            coro.close()
            raise CronbusError(
                "the app is not open: wrap your code in `with app:` or `async with app:`"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise CronbusError(
                "a blocking cronbus call was made on the app's own event loop; "
                "use the `_async` form with await (for example `await task.defer_async(...)`)"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
