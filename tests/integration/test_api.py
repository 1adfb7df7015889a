"""The Python API at the edge: defers, handles, refusals, the sync facade, cronbus.testing."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronbus import (
    App,
    Call,
    ConfigurationError,
    CronbusError,
    InvalidArgumentError,
    Retry,
    RunFailedError,
    RunState,
    SerializationError,
    StoreURLError,
    UnknownTaskError,
)
from cronbus.testing import MEMORY_STORE, FakeClock, run_until_idle, run_until_idle_async


def make_app(url: str, clock: FakeClock | None = None) -> App:
    app = App(store=url, clock=clock)

    @app.task(queue="emails", priority=3)
    def send(to: str, subject: str = "hi") -> str:
        return f"{subject} {to}"

    @app.task(retries=Retry(retries=2, backoff=4.0, factor=2.0, jitter=0.0))
    def flaky() -> None:
        raise ConnectionError("down")

    return app


async def count(app: App) -> int:
    return sum((await app.store.count_runs()).values())


async def test_defer_returns_a_durable_handle(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    async with app:
        handle = await app.tasks[f"{__name__}.make_app.<locals>.send"].defer_async("a@x")
        run = await handle.fetch_async()
        assert (run.state, run.queue, run.priority) == (RunState.QUEUED, "emails", 3)
        assert run.args == ["a@x"]
        assert run.kwargs == {}
    # Durable: a new app on the same file sees it.
    async with App(store=sqlite_url) as other:
        assert (await other.store.get_run(handle.id)).task.endswith("send")


async def test_defer_options(sqlite_url: str) -> None:
    clock = FakeClock(start=1_000_000.0)
    app = make_app(sqlite_url, clock)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    async with app:
        later = await send.defer_async("a", delay=30, priority=9, queue="other")
        run = await later.fetch_async()
        assert (run.state, run.eta, run.priority, run.queue) == (
            RunState.SCHEDULED,
            1_000_030.0,
            9,
            "other",
        )
        at = datetime(2026, 1, 1, tzinfo=UTC)
        assert (await (await send.defer_async("a", eta=at)).fetch_async()).eta == at.timestamp()


async def test_idempotent_defer_returns_the_existing_run(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    async with app:
        first = await send.defer_async("a", idempotency_key="welcome-a")
        again = await send.defer_async("b", idempotency_key="welcome-a")
        assert first.created
        assert not again.created
        assert again.id == first.id
        assert await count(app) == 1


async def test_defer_many_is_one_transaction(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    async with app:
        handles = await send.defer_many_async(
            [["a"], {"to": "b"}, Call.of("c", subject="yo", idempotency_key="k")]
        )
        assert len({h.id for h in handles}) == 3
        runs = [await h.fetch_async() for h in handles]
        assert [r.args for r in runs] == [["a"], [], ["c"]]
        assert runs[2].kwargs == {"subject": "yo"}
        with pytest.raises(SerializationError, match="call #1"):
            await send.defer_many_async([["d"], [object()]])
        assert await count(app) == 3  # the refused batch left nothing behind


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t: t.defer_async(object()), SerializationError, "argument 'to'.*object"),
        (lambda t: t.defer_async("a", subject={1, 2}), SerializationError, "'subject'.*set"),
        (lambda t: t.defer_async(math.nan), SerializationError, "NaN"),
        (lambda t: t.defer_async(), InvalidArgumentError, "missing a required argument"),
        (lambda t: t.defer_async("a", nope=1), InvalidArgumentError, "unexpected keyword"),
        (lambda t: t.defer_async("a", delay=-1), InvalidArgumentError, "zero or more"),
        (lambda t: t.defer_async("a", delay="soon"), InvalidArgumentError, "delay must be"),
        (lambda t: t.defer_async("a", delay=1, eta=2.0), InvalidArgumentError, "not both"),
        (
            lambda t: t.defer_async("a", eta=datetime.now() + timedelta(1)),
            InvalidArgumentError,
            "timezone-aware",
        ),
        (lambda t: t.defer_async("a", queue="no spaces"), InvalidArgumentError, "queue name"),
        (lambda t: t.defer_async("a", priority=1.5), InvalidArgumentError, "whole number"),
        (lambda t: t.defer_async("a", idempotency_key=""), InvalidArgumentError, "non-empty"),
    ],
)
async def test_bad_defers_are_refused_and_change_nothing(
    sqlite_url: str, call: object, error: type[Exception], message: str
) -> None:
    app = make_app(sqlite_url)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    async with app:
        with pytest.raises(error, match=message):
            await call(send)  # type: ignore[operator]
        assert await count(app) == 0


def test_unknown_task_names_the_known_ones(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    with pytest.raises(UnknownTaskError, match=r"no task named 'nope'.*send"):
        app.get_task("nope")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("mysql://x", "unknown scheme"),
        ("sqlite://relative.db", "three slashes"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous"),
        ("sqlite:///x.db?colour=blue", "unknown option"),
    ],
)
async def test_bad_store_urls(url: str, message: str) -> None:
    with pytest.raises(StoreURLError, match=message):
        async with App(store=url):
            pass


async def test_store_in_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(CronbusError, match="no folder"):
        async with App(store=f"sqlite:///{tmp_path}/missing/x.db"):
            pass


def test_bad_task_options() -> None:
    app = App(store=MEMORY_STORE)
    with pytest.raises(ConfigurationError, match="timeout"):
        app.task(timeout=-1)(lambda: None)
    with pytest.raises(ConfigurationError, match="isolation"):
        app.task(isolation="async")(lambda: None)
    with pytest.raises(ConfigurationError, match="retries"):
        app.task(retries=-2)(lambda: None)

    def dup() -> None: ...

    app.task(name="x")(dup)
    with pytest.raises(ConfigurationError, match="two tasks"):
        app.task(name="x")(dup)


def test_sync_facade(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    with pytest.raises(CronbusError, match="not open"):
        send.defer("a")
    with app:
        handle = send.defer("a")
        assert handle.state is RunState.QUEUED
        (run,) = run_until_idle(app)
        assert run.id == handle.id
        assert handle.result == "hi a"
        assert handle.wait(1).state is RunState.SUCCEEDED


def test_run_until_idle_serves_every_queue_unless_told(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    with app:
        bulk = send.defer("a", queue="bulk-emails")  # a queue no task names
        usual = send.defer("b")
        assert [r.id for r in run_until_idle(app, queues=["emails"])] == [usual.id]
        assert bulk.state is RunState.QUEUED
        assert [r.id for r in run_until_idle(app)] == [bulk.id]


async def test_blocking_call_on_the_apps_loop_is_refused(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    send = next(t for n, t in app.tasks.items() if n.endswith("send"))
    async with app:
        with pytest.raises(CronbusError, match="defer_async"):
            send.defer("a")


async def test_backoff_timing_with_the_fake_clock() -> None:
    clock = FakeClock(start=1_000.0)
    app = make_app(MEMORY_STORE, clock)
    flaky = next(t for n, t in app.tasks.items() if n.endswith("flaky"))
    async with app:
        handle = await flaky.defer_async()
        await run_until_idle_async(app)
        run = await handle.fetch_async()
        assert (run.state, run.eta) == (RunState.SCHEDULED, 1_004.0)  # 4 s, no jitter
        clock.advance(3.999)
        assert await run_until_idle_async(app) == []
        clock.advance(0.001)
        await run_until_idle_async(app)
        assert (await handle.fetch_async()).eta == 1_004.0 + 8.0  # doubled
        clock.advance(8.0)
        with pytest.raises(RunFailedError, match="ConnectionError: down"):
            await run_until_idle_async(app)
        run = await handle.fetch_async()
        assert (run.state, run.attempts) == (RunState.DEAD, 3)


async def test_using_keeps_options_apart_from_task_arguments(sqlite_url: str) -> None:
    app = App(store=sqlite_url)

    @app.task
    def route(queue: str, priority: int) -> str:
        return f"{queue}/{priority}"

    async with app:
        handle = await route.using(queue="bulk", priority=7).defer_async(queue="q", priority=1)
        run = await handle.fetch_async()
        assert (run.queue, run.priority) == ("bulk", 7)
        assert run.kwargs == {"queue": "q", "priority": 1}
        (done,) = await run_until_idle_async(app, queues=["bulk"])
        assert done.result == "q/1"
