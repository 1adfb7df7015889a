"""Metrics of in-process roles on a real SQLite file: the paths the subprocess test cannot
steer (a lost worker's runs, cancelled and timed-out attempts), metrics switched off, and the
store-wide figures served from the cache rather than counted per scrape."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from apps.worker_app import app as worker_app
from cronbus import App, Worker
from cronbus.model import ClaimRequest, QueueShare
from cronbus.observability.exposition import exposition_of
from integration.conftest import until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: bytes) -> Samples:
    """Every sample of a scrape, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value, 0 when absent."""
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(app: App) -> Samples:
    """The app's /metrics, rendered and parsed."""
    exposition = exposition_of(app)
    assert exposition is not None
    return parse(await exposition.render())


def runs(samples: Samples, task: str, outcome: str) -> float:
    """``cronbus_runs_total`` of a task of the default queue."""
    return value(samples, "cronbus_runs_total", task=task, queue="default", outcome=outcome)


async def test_lost_timed_out_and_cancelled_attempts(app: App) -> None:
    """A run whose worker died counts as lost once the reaper requeues it (with its task
    and queue); a timeout and a cancel count under their outcomes."""
    noop = app.get_task("apps.worker_app.noop")
    ghost = await noop.defer_async()
    request = ClaimRequest(
        worker_id="ghost", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=0.2
    )
    (claimed,) = await app.store.claim(request, app.clock.now())
    assert claimed.run_id == ghost.id
    worker = Worker(app, concurrency=4, queues="default")
    running = asyncio.create_task(worker.run())
    try:
        busy = await app.get_task("apps.worker_app.busy_loop").defer_async(5.0)
        waiting = await app.get_task("apps.worker_app.wait_for_cancel").defer_async(
            str(Path(app.store_url.removeprefix("sqlite:///")).with_suffix(".log")), 30.0
        )

        async def started() -> bool:
            return (await app.store.get_run(waiting.id)).state == "running"

        await until(started, timeout=20)
        await app.services().runs.cancel(waiting.id)

        async def counted() -> bool:
            got = await scrape(app)
            return (
                runs(got, "apps.worker_app.noop", "lost") == 1
                and runs(got, "apps.worker_app.noop", "succeeded") == 1
                and runs(got, "apps.worker_app.busy_loop", "dead") == 1
                and runs(got, "apps.worker_app.wait_for_cancel", "cancelled") == 1
            )

        await until(counted, timeout=30)
        assert (await busy.wait_async(timeout=10, raise_error=False)).state == "dead"
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 30)
    got = await scrape(app)
    duration = "cronbus_run_duration_seconds_sum"
    assert value(got, duration, task="apps.worker_app.busy_loop", queue="default") >= 0.3
    assert value(got, "cronbus_worker_slots", state="free") == 0  # the worker stopped


async def test_figures_come_from_the_cache_not_a_count_per_scrape(app: App) -> None:
    """Scrapes within the figures' time to live show the same figures (their age grows), and
    a run deferred meanwhile shows once they are computed again."""
    noop = app.get_task("apps.worker_app.noop")
    await noop.defer_async()
    first = await scrape(app)
    assert value(first, "cronbus_queue_depth", queue="default", state="queued") == 1
    await noop.defer_async()
    second = await scrape(app)
    assert value(second, "cronbus_queue_depth", queue="default", state="queued") == 1
    age = "cronbus_metrics_figures_age_seconds"
    assert value(second, age) > value(first, age)

    async def recounted() -> bool:
        got = await scrape(app)
        return value(got, "cronbus_queue_depth", queue="default", state="queued") == 2

    await until(recounted, timeout=10)


async def test_metrics_switched_off(tmp_path: Path) -> None:
    """``App(metrics=False)``: no metrics object, no exposition, and the roles run as usual."""
    app = App(store=f"sqlite:///{tmp_path / 'off.db'}", metrics=False)
    done = app.task(name="off.add")(lambda a, b: a + b)
    async with app:
        assert app.metrics is None
        assert exposition_of(app) is None
        assert getattr(app.store, "observer", None) is None
        worker = Worker(app, concurrency=1)
        running = asyncio.create_task(worker.run())
        try:
            handle = await done.defer_async(1, 2)
            assert (await handle.wait_async(timeout=20)).result == 3
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 30)
    assert worker_app.metrics is not None  # the default: on


async def test_the_api_counts_from_its_start_and_serves_metrics_without_a_token(
    tmp_path: Path,
) -> None:
    """`cronbus api` without a metrics port: /metrics on its own port, no token, and the
    publishes made through it counted from the start (not from the first scrape)."""
    from integration.test_api_support import make_app, served

    async with served(make_app(f"sqlite:///{tmp_path / 'api.db'}")) as api:
        headers = await api.headers("write")
        for n in range(2):
            body = {"type": "order.created", "data": {"n": n}}
            created = await api.client.post("/v1/topics/orders/events", json=body, headers=headers)
            assert created.status_code == 201, created.text
        response = await api.client.get("/metrics")  # no Authorization header
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        got = parse(response.content)
        assert value(got, "cronbus_events_published_total", topic="orders") == 2
        assert value(got, "cronbus_store_transaction_seconds_count", op="append") == 2
        assert ("cronbus_workers", frozenset({("state", "alive")})) in got
