"""The quick-start demo: `cronbus server --app cronbus.demo:app` shows every kind of ending."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from cronbus import App, AttemptOutcome, RunState
from cronbus.model import Run, RunFilter

EXPECTED = {
    "cronbus.demo.send_email": RunState.SUCCEEDED,
    "cronbus.demo.flaky_report": RunState.SUCCEEDED,
    "cronbus.demo.slow_export": RunState.DEAD,
    "cronbus.demo.stubborn_sync": RunState.DEAD,
    "cronbus.demo.charge_card": RunState.DEAD,
    "cronbus.demo.heartbeat": RunState.SUCCEEDED,
}


async def first_round(app: App) -> dict[str, Run]:
    runs = await app.store.list_runs(RunFilter(limit=1000))
    first: dict[str, Run] = {}
    for run in sorted(runs, key=lambda r: r.id):
        first.setdefault(run.task, run)
    return first


async def test_demo_server_shows_success_retry_timeout_and_dead_letters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - the server writes to it
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "cronbus", "server", "--app", "cronbus.demo:app"),
            *("--store", url, "--api-port", "0"),  # any free port: tests run side by side
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        async with App(store=url) as app:
            deadline = asyncio.get_running_loop().time() + 40
            while True:
                first = await first_round(app)
                states = {task: run.state for task, run in first.items()}
                if states == EXPECTED:
                    break
                assert asyncio.get_running_loop().time() < deadline, states
                await asyncio.sleep(0.05)
            flaky = await app.store.list_attempts(first["cronbus.demo.flaky_report"].id)
            assert [a.outcome for a in flaky] == [AttemptOutcome.FAILED, AttemptOutcome.SUCCEEDED]
            slow = await app.store.list_attempts(first["cronbus.demo.slow_export"].id)
            assert [a.outcome for a in slow] == [AttemptOutcome.TIMED_OUT]
            card = await app.store.list_attempts(first["cronbus.demo.charge_card"].id)
            assert len(card) == 2
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
    output = (tmp_path / "server.log").read_text()
    assert "run is dead (dead letter)" in output
    assert "retry in" in output
