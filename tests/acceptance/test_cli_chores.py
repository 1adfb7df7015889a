"""Acceptance: a ``cronbus worker`` process takes its turn at the store's chores.

Retention and alert evaluation are no role of their own: every role process runs them under a
role lease, so one process of the cluster does each at a time. Here the only process is one
worker, started with short retention and a short alert period: it removes a run that finished
past its retention, and sends a queue-depth alert to a webhook receiver on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from apps import worker_app as tasks
from cluster.conftest import Workers, until
from cronbus import App, RunState
from cronbus.errors import RunNotFoundError
from cronbus.observability.alerts import webhook
from cronbus.services import Services
from cronbus.testing import run_until_idle_async


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on a free loopback port: its URL and the JSON bodies it got."""
    got: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        got.append(json.loads(await request.read()))
        return web.Response(status=204)

    web_app = web.Application()
    web_app.router.add_post("/alerts", hook)
    runner = web.AppRunner(web_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/alerts", got
    finally:
        await runner.cleanup()


async def test_a_worker_applies_retention_and_sends_alerts(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, got = receiver
    store = f"sqlite:///{tmp_path / 'chores.db'}"
    tasks.app.use_store(store)
    async with tasks.app:
        app: App = tasks.app
        done = await tasks.noop.defer_async()
        await run_until_idle_async(app)
        assert (await app.store.get_run(done.id)).state is RunState.SUCCEEDED
        held = await tasks.noop.using(queue="held").defer_async()
        await Services(app).alerts.add(
            "queue-depth", name="held-backlog", queue="held", threshold=0, to=[webhook(url)]
        )
    pool = Workers(store, tmp_path)
    try:
        pool.start(
            queues="default",
            CRONBUS_KEEP_SUCCEEDED_SECONDS="1",
            CRONBUS_RETENTION_PERIOD_SECONDS="0.2",
            CRONBUS_ALERT_SECONDS="0.2",
        )
        async with tasks.app:

            async def purged() -> bool:
                try:
                    await tasks.app.store.get_run(done.id)
                except RunNotFoundError:
                    return True
                return False

            await until(purged, timeout=60)
            await until(lambda: _arrived(got), timeout=60)
            # The run that waits in its queue is live: retention leaves it.
            assert (await tasks.app.store.get_run(held.id)).state is RunState.QUEUED
    finally:
        pool.stop_all()
    assert "held-backlog" in json.dumps(got[0])


async def _arrived(got: list[dict[str, Any]]) -> bool:
    return bool(got)
