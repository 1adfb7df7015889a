"""The workers page: registered workers with state, queues, labels, slots, held runs and
heartbeat age; the tasks no live worker knows; draining a worker (a real one stops)."""

from __future__ import annotations

import asyncio
import os

from console.conftest import Console
from console.test_jobs import change_forms, error_of, header_forms, notice, parse
from cronbus import Worker
from cronbus.model import WorkerInfo, WorkerState
from cronbus.services import Services
from integration.api_seed import WORKER_ID, _claim
from integration.conftest import until


async def register(
    console: Console, worker_id: str, *, age: float = -600.0, tasks: tuple[str, ...] = ("noop",)
) -> None:
    """A worker in the registry whose last heartbeat was ``age`` seconds ago (negative: ahead
    of now, so it stays alive for the whole test with no process beating for it)."""
    app = console.api.app
    now = app.clock.now()
    await app.store.register_worker(
        WorkerInfo(
            id=worker_id,
            host="box-1",
            pid=os.getpid(),
            queues=["default", "emails"],
            labels=["gpu", "eu"],
            concurrency=4,
            version="9.9.9",
            started_at=now - 3600.0,
            heartbeat_at=now - age,
            tasks=tasks,
        )
    )


async def test_the_table_shows_each_worker_and_the_unknown_tasks(console: Console) -> None:
    services = Services(console.api.app)
    await register(console, WORKER_ID)
    await register(console, "gone-1", age=3600.0)
    held = (await services.runs.defer("noop")).run.id
    await _claim(console.api.app, held)  # the seed's worker id holds it
    await services.runs.defer("send", ["a@example.com"])  # queued: no live worker knows it
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.get("/workers")
        assert response.status_code == 200
        doc = parse(response.text)
        table = doc.by_id("workers")
        alive = table.one("tr", data_worker=WORKER_ID)
        assert alive.one(class_="worker-state").text == "alive"
        assert "box-1" in alive.text
        assert str(os.getpid()) in alive.text
        assert alive.one(class_="worker-queues").text == "default, emails"
        assert "gpu, eu" in alive.text
        assert alive.one(class_="worker-slots").text == "1/4"
        assert alive.one(class_="worker-runs").one("a").attrs["href"] == f"/runs/{held}"
        assert alive.one(class_="worker-heartbeat").text.endswith(" ago")
        assert "9.9.9" in alive.text
        lost = table.one("tr", data_worker="gone-1")
        assert lost.one(class_="worker-state").text == "lost"
        assert lost.one(class_="worker-slots").text == "0/4"
        assert lost.one(class_="worker-heartbeat").text == "1.0 h ago"
        hint = doc.by_id("unknown-tasks")
        assert "No live worker knows this task" in hint.text
        assert [a.attrs["data-task"] for a in hint.all("a")] == ["send"]  # noop is known
        assert hint.one("a").attrs["href"] == "/runs?q=state%3Aqueued%20task%3Asend"
        assert 'aria-current="page">Workers' in response.text
        assert change_forms(response.text) == []  # read-only: no Drain button
        assert sorted(header_forms(response.text)) == ["/logout", "/namespace"]
        assert not doc.one("main").all("button")
        live = doc.by_id("workers-live")
        assert live.attrs["hx-trigger"] == "cb:changed from:body"
        partial = await browser.get("/workers", headers={"HX-Request": "true"})
        assert partial.text.lstrip().startswith('<div id="workers-live"')
    finally:
        await browser.close()


async def test_no_workers_says_how_to_start_one(console: Console) -> None:
    browser = await console.login("read", namespaces=["default"])
    try:
        doc = parse((await browser.get("/workers")).text)
        assert "cronbus worker" in doc.by_id("no-workers").text
        assert not doc.all(id="unknown-tasks")
    finally:
        await browser.close()


async def test_drain_asks_a_registered_worker(console: Console) -> None:
    await register(console, "w/one")  # an id holding a slash
    await register(console, "gone-1", age=3600.0)
    browser = await console.login("write", namespaces=["default"])
    try:
        doc = parse((await browser.get("/workers")).text)
        button = doc.one("button", data_testid="drain-w/one")
        assert button.text.startswith("Drain")
        form = doc.one("form", action="/workers/w/one/drain")
        assert form.attrs["data-confirm"].startswith("Drain worker w/one?")
        assert not doc.all("button", data_testid="drain-gone-1")  # lost: nothing to drain
        response = await browser.post("/workers/w/one/drain")
        assert response.status_code == 303
        assert notice(response.headers["location"]).startswith("Asked worker w/one to drain")
        (seen,) = [w for w in await console.api.app.store.list_workers(0.0) if w.id == "w/one"]
        assert seen.drain_requested
        after = parse((await browser.get("/workers")).text)
        row = after.by_id("workers").one("tr", data_worker="w/one")
        assert "(drain asked)" in row.one(class_="worker-state").text
        lost = await browser.post("/workers/gone-1/drain")
        assert lost.status_code == 409
        assert "lost" in error_of(lost.text)
        missing = await browser.post("/workers/nobody/drain")
        assert missing.status_code == 404
        assert error_of(missing.text) == "no worker has id 'nobody'"
    finally:
        await browser.close()
    reader = await console.login("read", namespaces=["default"])
    try:
        refused = await reader.post("/workers/w/one/drain")
        assert refused.status_code == 403
    finally:
        await reader.close()


async def test_a_drained_real_worker_drains_and_stops(console: Console) -> None:
    app = console.api.app
    worker = Worker(app, concurrency=1)
    running = asyncio.create_task(worker.run())
    browser = await console.login("write", namespaces=["default"])
    try:

        async def listed() -> bool:
            return len(await Services(app).workers.list()) == 1

        await until(listed, 30.0)
        (view,) = await Services(app).workers.list()
        assert view.worker.state is WorkerState.ALIVE
        doc = parse((await browser.get("/workers")).text)
        assert doc.one("button", data_testid=f"drain-{view.worker.id}")
        response = await browser.post(f"/workers/{view.worker.id}/drain")
        assert response.status_code == 303
        await asyncio.wait_for(running, 30)  # it drains and stops by itself
        (stopped,) = await Services(app).workers.list(include_stopped=True)
        assert stopped.worker.state is WorkerState.STOPPED
        page = parse((await browser.get("/workers")).text)
        assert not page.all(id="workers")  # stopped workers are history, not listed
    finally:
        await browser.close()
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 30)
