"""Planning a job's fire (pure): on time, misfires by policy, max fires, after and at jobs."""

from __future__ import annotations

from cronbus.jobs import first_fire, plan
from cronbus.model import Job, JobSpec, Misfire, Overlap
from cronbus.triggers import make_trigger, trigger_from_spec

T0 = 1_800_000_000.0  # a multiple of 10 s, so every=10 fires fall on it


def job(next_fire_at: float, fires: int = 0, **options: object) -> Job:
    trigger = options.pop("trigger", make_trigger(every=10))
    spec = JobSpec(name="j", task="t", trigger=trigger.to_spec(), **options)  # type: ignore[arg-type]
    return Job(
        id=7,
        spec=spec,
        enabled=True,
        next_fire_at=next_fire_at,
        fires=fires,
        last_fire_at=None,
        created_at=T0,
        updated_at=T0,
    )


def times(fire: object) -> list[float]:
    return [run.fire_at for run in fire.runs]  # type: ignore[attr-defined]


def test_on_time_fire_is_due_at_its_time_and_plans_the_next() -> None:
    j = job(T0 + 10)
    fire = plan(j, trigger_from_spec(j.spec.trigger), now=T0 + 9.5)  # within the look-ahead
    assert times(fire) == [T0 + 10]
    assert fire.runs[0].eta == T0 + 10
    assert (fire.expected, fire.next_fire_at) == (T0 + 10, T0 + 20)
    assert fire.runs[0].job_id == 7


def test_late_within_grace_is_not_a_misfire() -> None:
    j = job(T0, misfire=Misfire.SKIP, misfire_grace=5.0)
    fire = plan(j, trigger_from_spec(j.spec.trigger), now=T0 + 4)
    assert times(fire) == [T0]
    assert fire.next_fire_at == T0 + 10


def test_misfire_skip_fires_nothing_and_goes_on_after_now() -> None:
    j = job(T0, misfire=Misfire.SKIP)
    fire = plan(j, trigger_from_spec(j.spec.trigger), now=T0 + 95)
    assert fire.runs == []
    assert fire.next_fire_at == T0 + 100


def test_misfire_once_fires_one_catch_up_run_now() -> None:
    j = job(T0, misfire=Misfire.ONCE)
    fire = plan(j, trigger_from_spec(j.spec.trigger), now=T0 + 95)
    assert times(fire) == [T0]
    assert fire.runs[0].eta == T0 + 95
    assert fire.next_fire_at == T0 + 100


def test_misfire_all_fires_every_missed_fire_up_to_the_maximum() -> None:
    j = job(T0, misfire=Misfire.ALL)
    fire = plan(j, trigger_from_spec(j.spec.trigger), now=T0 + 95)
    assert times(fire) == [T0 + 10 * k for k in range(10)]
    bounded = job(T0, misfire=Misfire.ALL, misfire_max=3)
    assert len(plan(bounded, trigger_from_spec(bounded.spec.trigger), now=T0 + 95).runs) == 3


def test_max_fires_ends_the_schedule() -> None:
    j = job(T0, fires=2, max_fires=3)
    fire = plan(j, trigger_from_spec(j.spec.trigger), now=T0)
    assert len(fire.runs) == 1
    assert fire.next_fire_at is None


def test_after_and_at_jobs_wait_for_their_run_or_end() -> None:
    after = job(T0, trigger=make_trigger(after=30))
    fire = plan(after, trigger_from_spec(after.spec.trigger), now=T0)
    assert (times(fire), fire.next_fire_at) == ([T0], None)
    assert first_fire(trigger_from_spec(after.spec.trigger), T0 + 1) == T0 + 1
    at = job(T0 + 50, trigger=make_trigger(at=T0 + 50))
    fire = plan(at, trigger_from_spec(at.spec.trigger), now=T0 + 49.5)
    assert (times(fire), fire.next_fire_at) == ([T0 + 50], None)


def test_overlap_gives_runs_a_concurrency_key() -> None:
    allow = job(T0)
    assert plan(allow, trigger_from_spec(allow.spec.trigger), T0).runs[0].concurrency_key is None
    queued = job(T0, overlap=Overlap.QUEUE)
    run = plan(queued, trigger_from_spec(queued.spec.trigger), T0).runs[0]
    assert (run.concurrency_key, run.overlap) == ("job:7", Overlap.QUEUE)
