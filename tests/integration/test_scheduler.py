"""The scheduler on a real SQLite file: code jobs synced, fires once and on time, misfires,
restarts, child jobs."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from pathlib import Path

import pytest

from cronbus import App, RunState, Worker
from cronbus.model import Misfire, RunFilter
from cronbus.scheduler import Scheduler
from cronbus.testing import FakeClock, run_until_idle_async

T0 = 1_800_000_000.0


def make_app(url: str, clock: FakeClock | None = None) -> App:
    app = App(store=url, clock=clock)

    @app.job(every=10, name="tick")
    def tick() -> str:
        return "tick"

    @app.job(cron="0 0 * * *", tz="Europe/Paris", name="nightly", args=["full"])
    def report(kind: str) -> str:
        return kind

    return app


async def test_code_jobs_are_added_updated_and_disabled_never_deleted(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    async with app:
        report = await app.jobs.sync()
        assert (sorted(report.added), report.updated, report.disabled) == (
            ["nightly", "tick"],
            [],
            [],
        )
        assert (await app.jobs.sync()).added == []  # unchanged: nothing to do

    changed = App(store=sqlite_url)

    @changed.job(every=20, name="tick")
    def tick() -> str:
        return "tock"

    async with changed:
        report = await changed.jobs.sync()
        assert (report.added, report.updated, report.disabled) == ([], ["tick"], ["nightly"])
        nightly = await changed.jobs.get("nightly")
        assert not nightly.enabled  # kept, not deleted
        assert (await changed.jobs.get("tick")).spec.trigger["seconds"] == 20


async def test_misfire_policies_after_downtime(sqlite_url: str) -> None:
    clock = FakeClock(start=T0)
    app = App(store=sqlite_url, clock=clock)

    @app.task
    def work() -> None: ...

    async with app:
        for policy in Misfire:
            await app.jobs.add(f"j-{policy.value}", work, every=10, misfire=policy)
        scheduler = Scheduler(app, lookahead=0.0, sync=False)
        clock.advance(95)  # the scheduler was down for nine and a half fires
        while await scheduler.tick():
            pass
        for policy, expected in ((Misfire.SKIP, 0), (Misfire.ONCE, 1), (Misfire.ALL, 9)):
            job = await app.jobs.get(f"j-{policy.value}")
            runs = await app.store.list_runs(RunFilter(job_id=job.id))
            assert len(runs) == expected, policy
            assert job.next_fire_at == T0 + 100


async def test_fires_once_and_on_time_with_a_worker(sqlite_url: str) -> None:
    app = App(store=sqlite_url)

    @app.job(every=0.2, name="fast")
    def fast() -> float:
        return 0.0

    async with app:
        await app.jobs.sync()
        scheduler = Scheduler(app, lookahead=0.5, sync=False)
        worker = Worker(app, concurrency=4)
        roles = asyncio.gather(scheduler.run(), worker.run())
        job = None
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            job = await app.jobs.get("fast")
            done = await app.store.list_runs(RunFilter(job_id=job.id, states=[RunState.SUCCEEDED]))
            if len(done) >= 8:
                break
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        scheduler.request_stop()
        worker.request_stop()
        await roles
        runs = await app.store.list_runs(RunFilter(job_id=job.id, limit=1000))
        fire_times = sorted(r.fire_at for r in runs if r.fire_at is not None)
        assert len(fire_times) == len(set(fire_times))
        gaps = {round(b - a, 6) for a, b in itertools.pairwise(fire_times)}
        assert gaps == {0.2}  # none missing, none doubled
        for run in runs:
            if run.state is RunState.SUCCEEDED:
                (attempt,) = await app.store.list_attempts(run.id)
                assert attempt.started_at - run.eta < 0.1  # started on time


async def test_three_schedulers_fire_each_fire_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    apps = [App(store=url) for _ in range(3)]
    for app in apps:

        @app.task(name="noop")
        def noop() -> None: ...

    async with apps[0] as first:
        for i in range(50):
            await first.jobs.add(f"j{i}", "noop", every=0.25)
    for app in apps:
        await app.open_async()
    try:
        schedulers = [Scheduler(app, lookahead=0.3, sync=False) for app in apps]
        running = asyncio.gather(*(s.run() for s in schedulers))
        await asyncio.sleep(2.0)  # let them race for two seconds of fires
        for s in schedulers:
            s.request_stop()
        await running
        runs = await apps[0].store.list_runs(RunFilter(limit=100_000))
        per_fire = Counter((r.job_id, r.fire_at) for r in runs)
        assert max(per_fire.values()) == 1
        for i in range(50):
            job = await apps[0].jobs.get(f"j{i}")
            times = sorted(t for (jid, t) in per_fire if jid == job.id)
            assert len(times) >= 6
            gaps = {round(b - a, 6) for a, b in itertools.pairwise(times)}
            assert gaps == {0.25}, (job.name, times)
        assert sum(s.fired for s in schedulers) == len(runs)
    finally:
        for app in apps:
            await app.close_async()


async def test_a_restarted_scheduler_loses_no_fire(sqlite_url: str) -> None:
    app = App(store=sqlite_url)

    @app.job(every=0.2, name="steady", misfire="all", misfire_grace=0.0)
    def steady() -> None: ...

    async with app:
        first = Scheduler(app, lookahead=0.1)
        running = asyncio.create_task(first.run())
        await asyncio.sleep(0.7)
        first.request_stop()
        await running
        await asyncio.sleep(0.9)  # down for several fires
        second = Scheduler(app, lookahead=0.1)
        running = asyncio.create_task(second.run())
        await asyncio.sleep(0.5)
        second.request_stop()
        await running
        job = await app.jobs.get("steady")
        runs = await app.store.list_runs(RunFilter(job_id=job.id, limit=1000))
        times = sorted(r.fire_at for r in runs if r.fire_at is not None)
        gaps = {round(b - a, 6) for a, b in itertools.pairwise(times)}
        assert gaps == {0.2}
        assert len(times) >= 9


async def test_child_jobs_run_after_their_parent_succeeds(sqlite_url: str) -> None:
    clock = FakeClock(start=T0)
    app = App(store=sqlite_url, clock=clock)

    @app.task
    def extract() -> str:
        return "rows"

    @app.task
    def load() -> str:
        return "loaded"

    async with app:
        await app.jobs.add("load", load, every=3600, paused=True)
        await app.jobs.add("extract", extract, every=3600, children=["load"])
        handle = await app.jobs.trigger("extract")
        ran = await run_until_idle_async(app)
        assert [r.task for r in ran] == [extract.name, load.name]
        assert ran[0].id == handle.id
        load_job = await app.jobs.get("load")
        assert ran[1].job_id == load_job.id


async def test_bad_job_definitions_are_refused(sqlite_url: str) -> None:
    app = App(store=sqlite_url)

    @app.task
    def work(n: int) -> None: ...

    async with app:
        with pytest.raises(Exception, match="'61 \\* \\* \\* \\*'"):
            await app.jobs.add("a", work, cron="61 * * * *", args=[1])
        with pytest.raises(Exception, match="Europe/Pariss"):
            await app.jobs.add("b", work, cron="* * * * *", tz="Europe/Pariss", args=[1])
        with pytest.raises(Exception, match=r"cron.*every|every.*cron"):
            await app.jobs.add("c", work, cron="* * * * *", every=5, args=[1])
        with pytest.raises(Exception, match="misfire"):
            await app.jobs.add("d", work, every=5, misfire="sometimes", args=[1])
        with pytest.raises(Exception, match="missing a required argument"):
            await app.jobs.add("e", work, every=5)
        assert await app.jobs.list() == []


async def test_after_jobs_keep_their_end_bound_and_paused_jobs_plan_nothing(
    sqlite_url: str,
) -> None:
    clock = FakeClock(start=T0)
    app = App(store=sqlite_url, clock=clock)

    @app.task
    def work() -> None: ...

    async with app:
        await app.jobs.add("bounded", work, after=60, end=T0 + 30)
        scheduler = Scheduler(app, lookahead=0.0, sync=False)
        await scheduler.tick()
        (run,) = await run_until_idle_async(app)
        assert run.state is RunState.SUCCEEDED
        assert (await app.jobs.get("bounded")).next_fire_at is None  # T0 + 60 is past its end
        paused = await app.jobs.add("later", work, every=10, paused=True)
        assert paused.next_fire_at is None
        assert await app.jobs.next("later") == []
        assert (await app.jobs.resume("later")).next_fire_at == T0 + 10
        with pytest.raises(Exception, match="never fire"):
            await app.jobs.add("past", work, at=T0 - 5)


async def test_a_store_failing_between_passes_does_not_stop_the_scheduler(sqlite_url: str) -> None:
    # The read of the next fire comes after a pass, outside its retry: a server restarting
    # there once ended a PostgreSQL scheduler. Now it is looked at again after the poll.
    app = make_app(sqlite_url)
    async with app:
        scheduler = Scheduler(app, poll_seconds=0.5)
        await app.store.close()
        assert await scheduler._idle_timeout() == 0.5
        await app.store.open()
        assert await scheduler._idle_timeout() <= 0.5
