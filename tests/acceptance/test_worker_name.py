"""Acceptance: ``cronbus worker --name`` registers the worker under the id a fail-over route
names, and a bad name is refused before anything starts."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from cluster.conftest import Workers, until, wait_exit
from cronbus.model import WorkerState
from cronbus.store import open_store


async def test_a_named_worker_registers_under_its_name(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    await store.open()
    pool = Workers(sqlite_url, tmp_path)
    try:
        proc = pool.start(concurrency=1, args=["--name", "billing-primary"])

        async def registered() -> bool:
            workers = await store.list_workers(now=0.0)
            return any(w.id == "billing-primary" and w.pid == proc.pid for w in workers)

        await until(registered)
        proc.send_signal(signal.SIGTERM)
        assert await wait_exit(proc, 30) == 0
        (entry,) = [w for w in await store.list_workers(0.0) if w.id == "billing-primary"]
        assert entry.state is WorkerState.STOPPED
    finally:
        pool.stop_all()
        await store.close()


def test_a_bad_name_is_refused_at_the_edge(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never.db'}"
    command = ["worker", "--app", "apps.worker_app:app", "--store", url, "--name", "two words"]
    done = subprocess.run(
        [sys.executable, "-m", "cronbus", *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: --name"), done.stderr
    assert "Traceback" not in done.stderr
