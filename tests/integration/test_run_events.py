"""Run outcomes as events: a worker publishes them to ``cronbus.runs`` while someone listens."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cronbus import App, Worker
from cronbus.events import Event
from cronbus.events.dispatcher import Dispatcher
from cronbus.worker.outcomes import RUNS_TOPIC
from integration.conftest import until


async def test_outcomes_reach_a_subscriber_of_the_runs_topic(
    app: App, worker: Worker, tmp_path: Path
) -> None:
    seen: list[Event] = []
    app.subscribe(topic=RUNS_TOPIC, name="watch-runs", types=["run.*"])(seen.append)
    stopping = asyncio.Event()
    dispatcher = Dispatcher(app, lease_seconds=3.0, poll_seconds=0.5)
    running = asyncio.create_task(dispatcher.run(stopping))
    try:
        await until(lambda: _subscribed(app), timeout=10)
        ok = await app.get_task("apps.worker_app.record").defer_async(7, str(tmp_path / "out"))
        # busy_loop times out after 0.3 s, with no retries left.
        slow = await app.get_task("apps.worker_app.busy_loop").defer_async(2.0)

        async def arrived() -> bool:
            return len(seen) >= 3

        await until(arrived, timeout=20)
        by_run = {(e.data["run_id"], e.type): e for e in seen}
        assert set(by_run) == {
            (ok.id, "run.succeeded"),
            (slow.id, "run.timed_out"),
            (slow.id, "run.dead"),
        }
        done = by_run[(ok.id, "run.succeeded")]
        assert (done.data["task"], done.data["result"], done.subject) == (
            "apps.worker_app.record",
            7,
            f"run/{ok.id}",
        )
        assert by_run[(slow.id, "run.dead")].data["error"]["type"] == "TimeoutError"
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
        del app.code_subscriptions["watch-runs"]
        del app.handlers["watch-runs"]


async def _subscribed(app: App) -> bool:
    return bool(await app.subscriptions.list(RUNS_TOPIC))
