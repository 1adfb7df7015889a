"""Acceptance: ``cronbus worker --namespace NAME`` (else ``CRONBUS_NAMESPACE``, else the app's)
serves that namespace, as a real worker process on an SQLite file.

A run of the default namespace is deferred before the billing one, so a worker that ignored
its namespace would take it first; the test polls with a deadline until the billing run
succeeds, then checks that the default run still waits and that the worker registered itself
in ``billing``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from apps import worker_app as tasks
from cluster.conftest import TESTS, Workers, until
from cronbus import App, RunState
from cronbus.store import open_store

DEADLINE_SECONDS = 60.0
RECORD = "apps.worker_app.record"


@pytest.fixture
async def url(tmp_path: Path) -> str:
    """A migrated SQLite file (the worker and the test share it)."""
    url = f"sqlite:///{tmp_path / 'cronbus.db'}"
    store = open_store(url)
    await store.migrate()
    return url


@pytest.fixture
def workers(url: str, tmp_path: Path) -> Iterator[Workers]:
    """``cronbus worker`` subprocesses, all killed at the end."""
    pool = Workers(url, tmp_path)
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture
async def app(url: str) -> AsyncIterator[App]:
    """The workers' app (namespace ``default``), open in the test process."""
    tasks.app.use_store(url)
    async with tasks.app:
        yield tasks.app


def clean_environment(**settings: str) -> dict[str, str]:
    """The test's environment without CRONBUS_* settings, plus ``settings``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    return {**kept, **settings}


@pytest.mark.parametrize("chosen_by", ["option", "environment"])
async def test_a_worker_serves_the_namespace_it_is_given(
    app: App, workers: Workers, tmp_path: Path, chosen_by: str
) -> None:
    out = tmp_path / "out"
    waiting = await tasks.record.defer_async(1, str(out))  # the default namespace: first in line
    billing = await app.services(namespace="billing").runs.defer(RECORD, [2, str(out)])
    assert billing.run.namespace == "billing"
    if chosen_by == "option":
        # The option beats the environment.
        env = clean_environment(CRONBUS_NAMESPACE="default")
        proc = workers.start(args=["--namespace", "billing"], **env)
    else:
        proc = workers.start(**clean_environment(CRONBUS_NAMESPACE="billing"))

    async def billed() -> bool:
        run = await app.store.get_run(billing.run.id)
        return run.state is RunState.SUCCEEDED

    await until(billed, DEADLINE_SECONDS)
    assert proc.poll() is None
    assert out.read_text().split() == ["2"]
    assert (await waiting.fetch_async()).state is RunState.QUEUED
    live = await app.store.list_workers(app.clock.now())
    assert [(w.pid, w.namespace) for w in live] == [(proc.pid, "billing")]


def test_a_bad_namespace_is_refused_in_one_line(url: str) -> None:
    env = {**clean_environment(), "PYTHONPATH": str(TESTS)}
    command = ["worker", "--app", "apps.worker_app:app", "--store", url]
    done = subprocess.run(
        [sys.executable, "-m", "cronbus", *command, "--namespace", "Not A Namespace"],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--namespace" in lines[0], lines[0]
    assert "lower-case" in lines[0], lines[0]
