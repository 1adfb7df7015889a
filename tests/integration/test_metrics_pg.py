"""Metrics on the PostgreSQL store: store transactions timed by store method, publishes counted
by the store, and the store-wide gauges computed once and shared through the store's snapshot.

On a fresh schema per test: skipped locally when PostgreSQL is unreachable, failed in CI.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.pg import pg_store_url
from cronbus import App, Worker
from cronbus.config import Settings
from cronbus.observability.exposition import exposition_of
from cronbus.observability.figures import Figures
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


def make_app(url: str) -> App:
    """An app with a task per queue used here, on ``url``."""
    app = App(store=url, settings=Settings(lease_seconds=3.0, poll_seconds=0.5))

    @app.task(name="pg.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="pg.parked", queue="parked")
    def parked() -> None:
        """Never runs: no worker here serves its queue."""

    return app


async def test_metrics_on_postgres(request: pytest.FixtureRequest) -> None:
    url = await pg_store_url(request)
    app = make_app(url)
    async with app:
        exposition = exposition_of(app)
        assert exposition is not None
        worker = Worker(app, concurrency=2, queues="default")
        running = asyncio.create_task(worker.run())
        try:
            add: Any = app.get_task("pg.add")
            handles = [await add.defer_async(n, 1) for n in range(3)]
            for _ in range(2):
                await app.get_task("pg.parked").defer_async()
            await app.publish_async("orders", type="order.created", data={"n": 1})
            await app.publish_async("orders", type="order.created", data={"n": 2})
            for handle in handles:
                assert (await handle.wait_async(timeout=30)).state == "succeeded"

            async def recorded() -> bool:
                got = parse(await exposition.render())
                name = "cronbus_runs_total"
                return value(got, name, task="pg.add", queue="default", outcome="succeeded") == 3

            await until(recorded, timeout=30)
            samples = parse(await exposition.render())
        finally:
            worker.request_stop(hurry=True)
            await asyncio.wait_for(running, 30)
        ops = {
            dict(labels)["op"]
            for name, labels in samples
            if name == "cronbus_store_transaction_seconds_count"
        }
        assert {"defer", "append", "complete_and_claim", "reap"} <= ops, ops
        total = value(samples, "cronbus_store_transaction_seconds_sum", op="complete_and_claim")
        assert total > 0
        assert value(samples, "cronbus_events_published_total", topic="orders") == 2
        assert value(samples, "cronbus_queue_depth", queue="parked", state="queued") == 2
        assert value(samples, "cronbus_queue_depth", queue="parked", state="running") == 0
        assert value(samples, "cronbus_queue_oldest_age_seconds", queue="parked") > 0
        assert value(samples, "cronbus_workers", state="alive") == 1
        # The figures went to the store for every other process to read.
        row = await app.store.get_snapshot("metrics:default")
        assert row is not None
        stored = Figures.from_json(row[1])
        assert ("parked", "queued", 2) in stored.depths

    # Another process (its own store object, its own cache entry) reads that row instead of
    # counting again while it is fresh: the same figures, taken at the same moment.
    other = make_app(url)
    async with app, other:
        first = exposition_of(app)
        second = exposition_of(other)
        assert first is not None
        assert second is not None
        await first.render()
        await second.render()
        assert first.aggregate.figures is not None
        assert second.aggregate.figures is not None
        assert second.aggregate.figures.taken_at == first.aggregate.figures.taken_at
        assert second.aggregate.figures.depths == first.aggregate.figures.depths
