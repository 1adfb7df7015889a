"""The store contract for jobs: fires by compare-and-set, overlap at claim, runs that end."""

from __future__ import annotations

import asyncio

import pytest

from cronbus.errors import JobExistsError, JobNotFoundError
from cronbus.model import (
    ClaimRequest,
    Fire,
    JobSpec,
    NewRun,
    Outcome,
    Overlap,
    QueueShare,
    RunFilter,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store
from cronbus.store.logic import job_run

T0 = 1_700_000_000.0
EVERY = {"kind": "every", "seconds": 10.0}


def spec(name: str = "j", **kw: object) -> JobSpec:
    return JobSpec(name=name, task="t", trigger=kw.pop("trigger", EVERY), **kw)  # type: ignore[arg-type]


def claim(worker: str = "w", limit: int = 10) -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker,
        queues=[QueueShare(name="default", limit=limit)],
        limit=limit,
        lease_seconds=30.0,
    )


async def test_put_get_list_and_delete(store: Store) -> None:
    job = await store.put_job(spec(), T0 + 10, T0)
    assert (job.name, job.next_fire_at, job.fires, job.enabled) == ("j", T0 + 10, 0, True)
    again = await store.put_job(spec(priority=5), T0 + 20, T0 + 1)
    assert again.id == job.id
    assert again.spec.priority == 5
    assert [j.name for j in await store.list_jobs()] == ["j"]
    await store.delete_job("j")
    with pytest.raises(JobNotFoundError):
        await store.get_job("j")
    with pytest.raises(JobNotFoundError):
        await store.delete_job("j")


async def test_create_never_replaces_an_existing_job(store: Store) -> None:
    first = await store.put_job(spec(priority=1), T0 + 10, T0, create=True)
    with pytest.raises(JobExistsError):
        await store.put_job(spec(priority=2), T0 + 20, T0, create=True)
    kept = await store.get_job("j")
    assert (kept.id, kept.spec.priority, kept.next_fire_at) == (first.id, 1, T0 + 10)


async def test_concurrent_creates_of_one_name_make_one_job(store: Store) -> None:
    results = await asyncio.gather(
        *(store.put_job(spec(priority=i), T0 + 10, T0, create=True) for i in range(4)),
        return_exceptions=True,
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, JobExistsError)]
    assert (len(made), len(refused)) == (1, 3)
    assert (await store.get_job("j")).spec.priority == made[0].spec.priority


async def test_put_jobs_stores_many_in_one_go(store: Store) -> None:
    await store.put_job(spec("j1", priority=1), T0 + 1, T0)
    await store.put_jobs([(spec("j1", priority=9), T0 + 5), (spec("j2"), None)], T0 + 1)
    one, two = await store.list_jobs()
    assert (one.name, one.spec.priority, one.next_fire_at) == ("j1", 9, T0 + 5)
    assert (two.name, two.next_fire_at) == ("j2", None)
    await store.put_jobs([], T0 + 2)
    assert len(await store.list_jobs()) == 2


async def test_due_jobs_are_found_by_next_fire(store: Store) -> None:
    for i, at in enumerate([T0 + 5, T0 + 1, T0 + 50]):
        await store.put_job(spec(f"j{i}"), at, T0)
    await store.put_job(spec("paused", paused=True), T0, T0)
    due = await store.due_jobs(T0 + 10, limit=10)
    assert [j.name for j in due] == ["j1", "j0"]
    assert await store.next_job_fire() == T0 + 1
    assert [j.name for j in await store.due_jobs(T0 + 10, limit=1)] == ["j1"]


async def test_a_fire_applies_once(store: Store) -> None:
    job = await store.put_job(spec(), T0 + 10, T0)
    plan = Fire(
        job_id=job.id,
        expected=T0 + 10,
        next_fire_at=T0 + 20,
        runs=[job_run(job, T0 + 10, T0 + 10)],
    )
    assert await store.fire([plan], T0 + 9) == [True]
    assert await store.fire([plan], T0 + 9) == [False]  # a second scheduler's identical plan
    job = await store.get_job("j")
    assert (job.next_fire_at, job.fires, job.last_fire_at) == (T0 + 20, 1, T0 + 10)
    (run,) = await store.list_runs(RunFilter(job_id=job.id))
    assert (run.state, run.eta, run.fire_at, run.job_id) == (
        RunState.SCHEDULED,
        T0 + 10,
        T0 + 10,
        job.id,
    )


async def test_a_fire_time_has_one_run_even_when_planned_twice(store: Store) -> None:
    job = await store.put_job(spec(), T0 + 10, T0)
    (first,) = await store.defer([job_run(job, T0 + 10, T0 + 10)], T0)
    (second,) = await store.defer([job_run(job, T0 + 10, T0 + 10)], T0)
    assert first.created
    assert not second.created
    assert second.id == first.id


async def test_paused_and_disabled_jobs_do_not_fire(store: Store) -> None:
    job = await store.put_job(spec(), T0 + 10, T0)
    await store.set_job_paused("j", True, None, T0)
    plan = Fire(job_id=job.id, expected=T0 + 10, next_fire_at=T0 + 20, runs=[])
    assert await store.fire([plan], T0 + 10) == [False]
    resumed = await store.set_job_paused("j", False, T0 + 30, T0 + 25)
    assert resumed.next_fire_at == T0 + 30
    assert await store.disable_jobs(["j", "other"], T0) == ["j"]
    assert await store.due_jobs(T0 + 100, 10) == []
    assert not (await store.get_job("j")).enabled


async def run_of(store: Store, key: str, overlap: Overlap) -> int:
    (d,) = await store.defer(
        [NewRun(task="t", queue="default", eta=T0, concurrency_key=key, overlap=overlap)], T0
    )
    return d.id


@pytest.mark.parametrize("overlap", [Overlap.QUEUE, Overlap.SKIP, Overlap.REPLACE])
async def test_overlap_policies_at_claim(store: Store, overlap: Overlap) -> None:
    first = await run_of(store, "job:1", overlap)
    (running,) = await store.claim(claim(), T0)
    assert running.run_id == first
    second = await run_of(store, "job:1", overlap)
    claimed = await store.claim(claim(), T0 + 1)
    states = {r.id: r.state for r in await store.get_runs([first, second])}
    if overlap is Overlap.QUEUE:
        assert claimed == []
        assert states == {first: RunState.RUNNING, second: RunState.QUEUED}
        done = Outcome(
            run_id=first, attempt_id=running.attempt_id, outcome=AttemptOutcome.SUCCEEDED
        )
        await store.complete([done], T0 + 2)
        (next_one,) = await store.claim(claim(), T0 + 3)
        assert next_one.run_id == second
    elif overlap is Overlap.SKIP:
        assert claimed == []
        assert states == {first: RunState.RUNNING, second: RunState.SKIPPED}
    else:
        assert [c.run_id for c in claimed] == [second]
        assert states == {first: RunState.CANCELLING, second: RunState.RUNNING}


async def test_runs_with_other_keys_are_not_held_back(store: Store) -> None:
    await run_of(store, "job:1", Overlap.QUEUE)
    await store.claim(claim(), T0)
    await run_of(store, "job:1", Overlap.QUEUE)
    other = await run_of(store, "job:2", Overlap.QUEUE)
    plain = (await store.defer([NewRun(task="t", queue="default", eta=T0)], T0))[0].id
    assert {c.run_id for c in await store.claim(claim(), T0 + 1)} == {other, plain}


async def test_an_after_job_plans_its_next_fire_when_its_run_ends(store: Store) -> None:
    job = await store.put_job(spec(trigger={"kind": "after", "seconds": 5.0}), T0, T0)
    plan = Fire(job_id=job.id, expected=T0, next_fire_at=None, runs=[job_run(job, T0, T0)])
    await store.fire([plan], T0)
    assert (await store.get_job("j")).next_fire_at is None
    (c,) = await store.claim(claim(), T0 + 1)
    ok = Outcome(run_id=c.run_id, attempt_id=c.attempt_id, outcome=AttemptOutcome.SUCCEEDED)
    await store.complete([ok], T0 + 7)
    assert (await store.get_job("j")).next_fire_at == T0 + 12


async def test_children_fire_when_a_run_succeeds(store: Store) -> None:
    parent = await store.put_job(spec("parent", children=("child",)), T0, T0)
    child = await store.put_job(spec("child"), None, T0)
    await store.fire(
        [Fire(job_id=parent.id, expected=T0, next_fire_at=T0 + 10, runs=[job_run(parent, T0, T0)])],
        T0,
    )
    (c,) = await store.claim(claim(), T0)
    ok = Outcome(run_id=c.run_id, attempt_id=c.attempt_id, outcome=AttemptOutcome.SUCCEEDED)
    await store.complete([ok], T0 + 1)
    (child_run,) = await store.list_runs(RunFilter(job_id=child.id))
    assert (child_run.state, child_run.fire_at) == (RunState.QUEUED, T0 + 1)


async def test_calendars(store: Store) -> None:
    await store.put_calendar("fr", ["2026-12-25", "2026-01-01"])
    await store.put_calendar("us", ["2026-07-04"])
    await store.put_calendar("fr", ["2026-12-25"])
    assert await store.get_calendars() == {
        "fr": frozenset({"2026-12-25"}),
        "us": frozenset({"2026-07-04"}),
    }


async def test_a_fire_without_runs_keeps_the_last_fire_time(store: Store) -> None:
    job = await store.put_job(spec(), T0 + 10, T0)
    first = Fire(
        job_id=job.id, expected=T0 + 10, next_fire_at=T0 + 20, runs=[job_run(job, T0 + 10, T0)]
    )
    await store.fire([first], T0 + 10)
    skipped = Fire(job_id=job.id, expected=T0 + 20, next_fire_at=T0 + 100, runs=[])
    assert await store.fire([skipped], T0 + 95) == [True]
    job = await store.get_job("j")
    assert (job.last_fire_at, job.next_fire_at, job.fires) == (T0 + 10, T0 + 100, 1)
