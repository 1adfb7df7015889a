"""Invariant 1 with real processes: 3 schedulers, 1,000 jobs firing every second, one run per
fire, none missing, none doubled."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from apps.sched_app import app as sched_app
from cronbus.model import RunFilter

from .conftest import TESTS, until, wait_exit

JOBS = 1000
SECONDS = float(os.environ.get("CRONBUS_TEST_FIRE_SECONDS", "60"))


def start_scheduler(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cronbus",
                "scheduler",
                "--app",
                "apps.sched_app:app",
                "--store",
                url,
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


# A minute of firing, then however long loaded schedulers take to catch up: more than the
# suite's default of 120 s on a busy machine.
@pytest.mark.timeout(300)
async def test_three_scheduler_processes_fire_each_fire_exactly_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    sched_app.use_store(sqlite_url)
    async with sched_app as app:
        # misfire="all": a fire that comes late on a loaded machine is still made, so what is
        # counted is only whether each fire has one run, never the machine's speed.
        for i in range(JOBS):
            await app.jobs.add(f"every-second-{i}", "sched.noop", every=1, misfire="all")
        procs = [start_scheduler(sqlite_url, tmp_path / f"scheduler-{n}.log") for n in range(3)]
        try:
            started = app.clock.now()

            async def window_fired() -> bool:
                # The window has passed and every job's fires up to its end were made: on a
                # loaded machine the schedulers may lag seconds behind the clock (misfire="all"
                # makes every late fire all the same), which says nothing of double fires.
                if app.clock.now() - started < SECONDS:
                    return False
                end = started + SECONDS - 1.0
                jobs = await app.store.list_jobs()
                return all(j.next_fire_at is not None and j.next_fire_at > end for j in jobs)

            await until(window_fired, timeout=SECONDS + 60)
            for proc in procs:
                assert proc.poll() is None, (tmp_path / "scheduler-0.log").read_text()
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                assert await wait_exit(proc, 30) == 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        runs = await app.store.list_runs(RunFilter(limit=10_000_000))
    per_fire = Counter((run.job_id, run.fire_at) for run in runs)
    assert max(per_fire.values()) == 1, "a fire has more than one run"
    by_job: dict[int, list[float]] = {}
    for job_id, fire_at in per_fire:
        assert job_id is not None
        assert fire_at is not None
        by_job.setdefault(job_id, []).append(fire_at)
    assert len(by_job) == JOBS
    for times in by_job.values():
        times.sort()
        assert {round(b - a, 6) for a, b in itertools.pairwise(times)} == {1.0}
        assert times[0] <= started + 1.0  # the first fire after the jobs were added
        assert times[-1] >= started + SECONDS - 2.0  # and every second up to the end
