"""Leases on PostgreSQL with worker clocks 20 s off (lease 2 s): the server's clock times them.

Real ``cronbus worker`` processes whose app clock is off (:mod:`apps.skewed_app`):

- a worker behind runs a run longer than its lease, while a worker ahead reaps: by their own
  clocks that lease expired long ago (the worker behind renews it into its past, the one ahead
  reads it from its future), yet the run is executed once, in one attempt;
- a worker ahead is frozen (SIGSTOP) while it holds a run: by its clock its lease would last
  22 s, by the server's 2 s, and a worker behind (for which the lease would last 42 s) takes the
  run back and runs it within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from apps import cluster_app
from apps.cluster_app import slow
from apps.skewed_app import OFFSET_ENV
from contract.pg import server_url, with_options
from cronbus import App, AttemptOutcome, RunState

from .conftest import TESTS
from .pg_conftest import (
    POOL_MAX,
    Cluster,
    Db,
    Proc,
    cluster,
    db,
    pg_app,
    pg_url,
    poll,
    schema_of,
    worker_id,
)

__all__ = ["cluster", "db", "pg_app", "pg_url"]  # fixtures
pytestmark = pytest.mark.slow

SKEW = 20.0
LEASE = 2.0
SECONDS = 6.0  # each execution: three leases long


def skewed_worker(cluster: Cluster, name: str, offset: float) -> Proc:
    """A ``cronbus worker`` of :mod:`apps.skewed_app` (concurrency 1) ``offset`` seconds off."""
    url = with_options(cluster.url, application_name=f"cronbus-{name}", pool_max=POOL_MAX)
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        cluster_app.DSN_ENV: server_url(),
        cluster_app.TABLE_ENV: f"{schema_of(cluster.url)}.executions",
        "CRONBUS_LEASE_SECONDS": str(LEASE),
        OFFSET_ENV: str(offset),
    }
    log = cluster.logs / f"{name}.log"
    command = [sys.executable, "-m", "cronbus", "worker", "--app", "apps.skewed_app:app"]
    command += ["--store", url, "--log-level", "info", "--concurrency", "1"]
    with open(log, "wb") as out:
        popen = subprocess.Popen(command, env=environ, stdout=out, stderr=subprocess.STDOUT)
    proc = Proc(name, popen, log)
    cluster.procs.append(proc)
    return proc


async def started_by(db: Db, key: str, proc: Proc) -> None:
    """Wait until ``proc`` has started executing the run of ``key``."""
    query = "SELECT count(*) FROM executions WHERE key = %s AND phase = 'start' AND pid = %s"

    async def started() -> bool:
        return int(await db.value(query, (key, proc.pid))) > 0

    await poll(started, 30, every=0.05, what=f"{proc.name} started {key}")


async def test_a_reaper_ahead_does_not_take_the_lease_of_a_worker_behind(
    pg_app: App, cluster: Cluster, db: Db
) -> None:
    behind = skewed_worker(cluster, "behind", -SKEW)
    behind_id = await worker_id(pg_app, behind)
    handle = await slow.defer_async("held", SECONDS)
    await started_by(db, "held", behind)
    ahead = skewed_worker(cluster, "ahead", +SKEW)
    await worker_id(pg_app, ahead)  # its reaper is running from now on

    run = await handle.wait_async(timeout=SECONDS * 5)
    assert (run.state, run.result) == (RunState.SUCCEEDED, behind.pid), cluster.outputs()
    (attempt,) = await pg_app.store.list_attempts(handle.id)
    assert (attempt.worker_id, attempt.outcome) == (behind_id, AttemptOutcome.SUCCEEDED)
    starts = "SELECT count(*) FROM executions WHERE key = 'held' AND phase = 'start'"
    assert await db.value(starts) == 1
    assert "requeued" not in ahead.log.read_text(errors="replace"), ahead.output()


async def test_a_frozen_worker_ahead_does_not_keep_its_lease(
    pg_app: App, cluster: Cluster, db: Db
) -> None:
    ahead = skewed_worker(cluster, "ahead", +SKEW)
    ahead_id = await worker_id(pg_app, ahead)
    handle = await slow.defer_async("frozen", SECONDS)
    await started_by(db, "frozen", ahead)
    ahead.signal(signal.SIGSTOP)
    behind = skewed_worker(cluster, "behind", -SKEW)
    behind_id = await worker_id(pg_app, behind)

    # By the clocks of these workers the lease would end 42 s from now; the server's says 2 s.
    await started_by(db, "frozen", behind)
    run = await handle.wait_async(timeout=SECONDS * 5)
    assert (run.state, run.result) == (RunState.SUCCEEDED, behind.pid), cluster.outputs()
    lost, done = await pg_app.store.list_attempts(handle.id)
    assert (lost.worker_id, lost.outcome) == (ahead_id, AttemptOutcome.LOST)
    assert (done.worker_id, done.outcome) == (behind_id, AttemptOutcome.SUCCEEDED)
    for proc in (ahead, behind):
        proc.signal(signal.SIGCONT)
        proc.signal(signal.SIGTERM)
