"""Namespaces at run time: two apps share one store in namespaces ``a`` and ``b``.

Real ``cronbus worker`` processes (their app reads ``CRONBUS_NAMESPACE``) claim only runs of
their namespace; a job's runs and a subscription's task runs inherit its namespace whichever
scheduler or dispatcher makes them; events published by an app land in a topic of its namespace;
an operator's drain request makes a worker process finish its run and exit 0. Waiting is by
polling with deadlines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from contract.pg import pg_store_url
from cronbus import App
from cronbus.errors import ConflictError, InvalidArgumentError
from cronbus.events.dispatcher import Dispatcher
from cronbus.model import RunFilter, WorkerInfo, WorkerState
from cronbus.scheduler import Scheduler
from cronbus.states import RunState
from cronbus.worker.engine import Worker
from cronbus.worker.outcomes import RUNS_TOPIC, runs_topic

TESTS = Path(__file__).resolve().parent.parent
LEASE = "6"
"""Heartbeats (a third of a lease) carry drain requests to workers within 2 s, and a loaded
machine does not expire a lease (a run executed twice would blur what ran where)."""

# The app the worker processes load; its namespace comes from CRONBUS_NAMESPACE.
APP_SOURCE = """
import os
import time

from cronbus import App

app = App()


def _append(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


@app.task(name="ns.record")
def record(n, path):
    _append(path, f"{app.namespace}:{n}")
    return n


@app.task(name="ns.hold")
def hold(path, release):
    _append(path, "started")
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "released"


@app.task(name="ns.event")
def on_event(event):
    return None
"""


def make_app(url: str, namespace: str) -> App:
    """An app of ``namespace`` whose tasks have the worker app's names (to defer them)."""
    app = App(url, namespace=namespace)

    @app.task(name="ns.record")
    def record(n: int, path: str) -> int:
        return n

    @app.task(name="ns.hold")
    def hold(path: str, release: str) -> str:
        return "released"

    @app.task(name="ns.event")
    def on_event(event: dict[str, object]) -> None:
        """A subscription's task: takes the event."""

    return app


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    """Poll ``check`` until it holds, failing after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


class Workers:
    """``cronbus worker`` subprocesses of the test app, none outliving the test."""

    def __init__(self, url: str, where: Path) -> None:
        self.url = url
        self.where = where
        (where / "nsapp.py").write_text(APP_SOURCE)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, namespace: str, *args: str) -> subprocess.Popen[bytes]:
        path = os.pathsep.join([str(self.where), str(TESTS), os.environ.get("PYTHONPATH", "")])
        env = {
            **os.environ,
            "PYTHONPATH": path,
            "CRONBUS_NAMESPACE": namespace,
            "CRONBUS_LEASE_SECONDS": LEASE,
            "CRONBUS_POLL_SECONDS": "0.5",
        }
        log = open(self.log(len(self.procs)), "wb")  # noqa: SIM115 - outlives this call
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "cronbus", "worker", "--app", "nsapp:app"),
                *("--store", self.url, "--concurrency", "4", *args),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, index: int) -> Path:
        return self.where / f"worker-{index}.log"

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind, migrated."""
    if request.param == "postgres":
        chosen = await pg_store_url(request)
    else:
        chosen = f"sqlite:///{tmp_path / 'ns.db'}"
    async with App(chosen):
        pass
    return chosen


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    """A fresh SQLite store's URL."""
    return f"sqlite:///{tmp_path / 'ns.db'}"


@pytest.fixture
async def apps(sqlite_store: str) -> AsyncIterator[tuple[App, App]]:
    """Apps of namespaces ``a`` and ``b``, open on one SQLite store."""
    a, b = make_app(sqlite_store, "a"), make_app(sqlite_store, "b")
    async with a, b:
        yield a, b


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[[str], Workers]]:
    """Starts worker processes on a store; all are killed at the end."""
    pools: list[Workers] = []

    def on(url: str) -> Workers:
        pool = Workers(url, tmp_path)
        pools.append(pool)
        return pool

    try:
        yield on
    finally:
        for pool in pools:
            pool.stop_all()


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """The exit status of ``proc``, polled until it exits."""

    async def exited() -> bool:
        return proc.poll() is not None

    await until(exited, timeout)
    return int(proc.returncode)


async def worker_of(app: App, proc: subprocess.Popen[bytes]) -> WorkerInfo:
    """The registry entry of a worker process, once it registered."""
    found: list[WorkerInfo] = []

    async def registered() -> bool:
        found[:] = [w for w in await app.store.list_workers(app.clock.now()) if w.pid == proc.pid]
        return bool(found)

    await until(registered)
    return found[0]


# -- the app's namespace ----------------------------------------------------------------------
def test_an_app_takes_its_namespace_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CRONBUS_NAMESPACE", raising=False)
    assert App().namespace == "default"
    monkeypatch.setenv("CRONBUS_NAMESPACE", "billing")
    assert App().namespace == "billing"
    assert App(namespace="shop").namespace == "shop"


@pytest.mark.parametrize("bad", ["", "Upper", "-dash", "a b", "x" * 64, "a/b", "é"])
def test_a_bad_namespace_is_refused_naming_the_field(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        App(namespace=bad)
    assert caught.value.field == "namespace"
    if bad.strip():
        monkeypatch.setenv("CRONBUS_NAMESPACE", bad)
        with pytest.raises(InvalidArgumentError, match="CRONBUS_NAMESPACE") as caught:
            App()
        assert caught.value.field == "namespace"


def test_use_namespace_moves_a_closed_app_with_its_code_jobs_and_subscriptions(
    sqlite_store: str,
) -> None:
    app = make_app(sqlite_store, "a")
    app.job(name="nightly", cron="0 3 * * *", args=[1, "x"])(app.tasks["ns.record"])
    app.subscribe(topic="orders", name="watch")(print)
    app.use_namespace("b")
    assert app.namespace == "b"
    assert app.code_jobs["nightly"].namespace == "b"
    assert app.code_subscriptions["watch"].namespace == "b"
    with pytest.raises(InvalidArgumentError) as caught:
        app.use_namespace("B")
    assert caught.value.field == "namespace"
    assert app.namespace == "b"


async def test_runs_jobs_and_subscriptions_are_created_in_the_apps_namespace(
    apps: tuple[App, App],
) -> None:
    a, b = apps
    ran = await a.tasks["ns.record"].defer_async(1, "x")
    (many,) = await b.tasks["ns.record"].defer_many_async([[2, "x"]])
    using = await b.tasks["ns.record"].using(queue="other").defer_async(3, "x")
    assert (await ran.fetch_async()).namespace == "a"
    assert (await many.fetch_async()).namespace == "b"
    assert (await using.fetch_async()).namespace == "b"

    job = await b.jobs.add("b-daily", "ns.record", cron="0 3 * * *", args=[1, "x"])
    assert job.spec.namespace == "b"
    assert [j.name for j in await b.jobs.list()] == ["b-daily"]
    assert await a.jobs.list() == []
    changed = await a.jobs.update("b-daily", priority=5)
    assert changed.spec.namespace == "b"  # a job stays in its namespace whoever changes it
    triggered = await a.jobs.trigger("b-daily")
    assert (await triggered.fetch_async()).namespace == "b"

    sub = await a.subscriptions.add("a-orders", topic="orders", task="ns.record")
    assert sub.spec.namespace == "a"
    assert [s.name for s in await a.subscriptions.list()] == ["a-orders"]
    assert await b.subscriptions.list() == []


# -- workers claim only their namespace's runs -------------------------------------------------
async def test_a_worker_runs_only_the_runs_of_its_namespace(
    url: str, workers: Callable[[str], Workers], tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    a, b = make_app(url, "a"), make_app(url, "b")
    async with a, b:
        # b's runs first: a worker that ignored namespaces would take them before a's.
        b_runs = await b.tasks["ns.record"].defer_many_async([[n, out] for n in range(5)])
        a_runs = await a.tasks["ns.record"].defer_many_async([[n, out] for n in range(5)])
        pool = workers(url)
        proc = pool.start("a")  # every queue: the queues with ready runs are read per namespace
        fixed = pool.start("a", "--queues", "default")  # named queues: the claim filters

        async def a_done() -> bool:
            runs = [await h.fetch_async() for h in a_runs]
            return all(r.state is RunState.SUCCEEDED for r in runs)

        await until(a_done)
        info = await worker_of(a, proc)
        assert info.namespace == "a"
        assert set(info.tasks) == {"ns.record", "ns.hold", "ns.event"}
        for handle in b_runs:
            run = await handle.fetch_async()
            assert run.state is RunState.QUEUED
            assert await a.store.list_attempts(run.id) == []
        # A set: delivery is at least once, and only where runs ran matters here.
        assert set(Path(out).read_text().split()) == {f"a:{n}" for n in range(5)}
        queued = await a.store.list_runs(RunFilter(namespace="b", states=[RunState.QUEUED]))
        assert len(queued) == 5

        # A worker of b takes b's runs: they waited for their namespace, not for nothing.
        other = pool.start("b")

        async def b_done() -> bool:
            runs = [await h.fetch_async() for h in b_runs]
            return all(r.state is RunState.SUCCEEDED for r in runs)

        await until(b_done)
        assert set(Path(out).read_text().split()) == {f"{ns}:{n}" for ns in "ab" for n in range(5)}
        for running in (proc, fixed, other):
            running.send_signal(signal.SIGTERM)
            assert await wait_exit(running) == 0


# -- jobs and subscriptions keep their namespace ------------------------------------------------
async def test_a_job_fires_runs_in_its_namespace_whichever_scheduler_fires_it(
    apps: tuple[App, App],
) -> None:
    a, b = apps

    @b.job(name="b-tick", every=0.2, args=[7, "x"])
    def ticked(n: int, path: str) -> None:
        """A code job of b."""

    # a's scheduler syncs a's code jobs (none) and leaves b's alone, then fires b's job.
    await b.jobs.sync()
    scheduler = Scheduler(a, poll_seconds=0.2)
    running = asyncio.create_task(scheduler.run())
    try:

        async def fired() -> bool:
            return bool(await a.store.list_runs(RunFilter(task=ticked.name)))

        await until(fired)
    finally:
        scheduler.request_stop()
        await asyncio.wait_for(running, 10)
    job = await b.jobs.get("b-tick")
    assert job.enabled
    assert job.spec.namespace == "b"
    runs = await a.store.list_runs(RunFilter(task=ticked.name))
    assert runs
    assert {r.namespace for r in runs} == {"b"}
    assert await a.store.list_runs(RunFilter(namespace="a")) == []


async def test_events_land_in_a_topic_of_the_publishers_namespace(apps: tuple[App, App]) -> None:
    a, b = apps
    event = await a.publish_async("orders", "order.created", {"id": 1})
    assert event.offset == 1
    topic = await a.events.topic("orders")
    assert topic.namespace == "a"
    assert [t.name for t in await a.events.topics()] == ["orders"]
    assert await b.events.topics() == []
    with pytest.raises(ConflictError):
        await b.publish_async("orders", "order.created", {"id": 2})
    assert (await a.events.topic("orders")).last_offset == 1


async def test_a_subscriptions_task_runs_are_in_its_namespace(apps: tuple[App, App]) -> None:
    a, b = apps
    await a.subscriptions.add("a-orders", topic="orders", task="ns.event", start="earliest")
    await a.publish_async("orders", "order.created", {"id": 1})
    # b's dispatcher serves every namespace: the run is a's all the same.
    dispatcher = Dispatcher(b, lease_seconds=3.0, poll_seconds=0.2)
    stopping = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stopping))
    try:

        async def deferred() -> bool:
            return bool(await a.store.list_runs(RunFilter(task="ns.event")))

        await until(deferred)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
    (run,) = await a.store.list_runs(RunFilter(task="ns.event"))
    assert run.namespace == "a"


# -- drain on request ---------------------------------------------------------------------------
async def test_a_drain_request_makes_a_worker_finish_its_run_and_exit_0(
    url: str, workers: Callable[[str], Workers], tmp_path: Path
) -> None:
    async with make_app(url, "a") as a:
        await drain_on_request(a, workers(url), tmp_path)


async def drain_on_request(a: App, pool: Workers, tmp_path: Path) -> None:
    """A worker of ``a`` holding a run drains when asked: it finishes the run, claims nothing
    more, and exits 0."""
    out, release = tmp_path / "held", tmp_path / "release"
    held = await a.tasks["ns.hold"].defer_async(str(out), str(release))
    proc = pool.start("a")

    async def started() -> bool:
        return out.exists() and out.read_text().split() == ["started"]

    await until(started)
    info = await worker_of(a, proc)
    asked = await a.store.request_drain(info.id, a.clock.now())
    assert asked.drain_requested

    async def draining() -> bool:
        (now,) = [w for w in await a.store.list_workers(a.clock.now()) if w.id == info.id]
        return now.state is WorkerState.DRAINING

    await until(draining)
    # Deferred once the worker drains: it claims nothing more.
    later = await a.tasks["ns.record"].defer_async(1, str(tmp_path / "later"))
    assert proc.poll() is None  # the held run still runs
    release.touch()
    assert await wait_exit(proc) == 0
    done = await held.fetch_async()
    assert done.state is RunState.SUCCEEDED
    assert done.result == "released"
    assert (await later.fetch_async()).state is RunState.QUEUED
    log = pool.log(0).read_text()
    assert "drain requested" in log


async def test_a_sync_leaves_the_code_subscriptions_of_other_namespaces_alone(
    apps: tuple[App, App],
) -> None:
    a, b = apps

    @a.subscribe(topic="orders", name="a-handler")
    def handled(event: object) -> None:
        """A code subscription of a."""

    await a.subscriptions.sync()
    assert await b.subscriptions.sync() == []  # b's code has none, and a's is not b's to pause
    sub = await a.subscriptions.get("a-handler")
    assert sub.spec.namespace == "a"
    assert not sub.paused


async def test_run_outcomes_of_a_namespace_go_to_its_own_runs_topic(
    apps: tuple[App, App], tmp_path: Path
) -> None:
    a, b = apps
    topic = runs_topic("a")
    assert topic == "cronbus.runs.a"
    assert runs_topic("default") == RUNS_TOPIC
    await a.subscriptions.add("a-runs", topic=topic, task="ns.event")
    handle = await a.tasks["ns.record"].defer_async(1, str(tmp_path / "out"))
    worker = Worker(a, concurrency=1)
    running = asyncio.create_task(worker.run())
    try:

        async def published() -> bool:
            return bool(await a.store.read_events(topic, 0, 10))

        await until(published)
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 30)
    assert (await handle.fetch_async()).state is RunState.SUCCEEDED
    (event,) = await a.store.read_events(topic, 0, 10)
    assert event.type == "run.succeeded"
    assert (await a.events.topic(topic)).namespace == "a"
    assert await b.events.topics() == []
