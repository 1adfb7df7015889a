"""The jobs service on a real SQLite file: create, read, update, delete, pause, resume,
trigger, next fires; each refusal names its field; code jobs need force; namespaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.errors import (
    CodeJobError,
    ConflictError,
    ForbiddenError,
    InvalidArgumentError,
    JobExistsError,
    JobNotFoundError,
    UnknownTaskError,
)
from cronbus.job_specs import JobOptions
from cronbus.services import LOCAL, RunQuery, Services
from integration.test_services_fixtures import OTHER, READER, STORES, open_on


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


@pytest.fixture
def services(opened: App) -> Services:
    """Local services in ``default``."""
    return Services(opened, LOCAL)


async def test_create_get_list_in_pages(services: Services) -> None:
    for name in ("c", "a", "b"):
        job = await services.jobs.create(name, "add", JobOptions(every=60, args=[1, 2]))
        assert job.spec.namespace == "default"
        assert job.next_fire_at is not None
    first = await services.jobs.list(limit=2)
    assert [j.name for j in first.items] == ["a", "b"]
    rest = await services.jobs.list(limit=2, cursor=first.next)
    assert [j.name for j in rest.items] == ["c"]
    assert rest.next is None
    assert (await services.jobs.get("b")).spec.task == "add"


async def test_create_refusals_name_the_field(services: Services) -> None:
    cases = [
        (("bad name", "add", JobOptions(every=60, args=[1, 2])), "name"),
        (("j", "add", JobOptions(args=[1, 2])), "trigger"),
        (("j", "add", JobOptions(cron="61 * * * *", args=[1, 2])), "cron"),
        (("j", "add", JobOptions(every=60, tz="Europe/Pariss", args=[1, 2])), "tz"),
        (("j", "add", JobOptions(every=60, jitter=-1, args=[1, 2])), "jitter"),
        (("j", "add", JobOptions(every=60, queue="a b", args=[1, 2])), "queue"),
        (("j", "add", JobOptions(every=60, misfire="later", args=[1, 2])), "misfire"),
        (("j", "add", JobOptions(every=60, args=[1])), "args"),
        (("j", "add", JobOptions(at=1.0, args=[1, 2])), "at"),
        (("j", "add", JobOptions(after=5, calendars=["hol"], args=[1, 2])), "calendars"),
        (("j", "", JobOptions(every=60)), "task"),
    ]
    for args, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.jobs.create(*args)
        assert caught.value.field == field, (args, str(caught.value))
    with pytest.raises(UnknownTaskError):
        await services.jobs.create("j", "nope", JobOptions(every=60))
    assert (await services.jobs.list()).items == []


async def test_create_twice_is_a_conflict(services: Services) -> None:
    await services.jobs.create("j", "add", JobOptions(every=60, args=[1, 2]))
    with pytest.raises(JobExistsError, match="exists; use update"):
        await services.jobs.create("j", "add", JobOptions(every=30, args=[1, 2]))


async def test_update_keeps_what_is_not_given(services: Services) -> None:
    job = await services.jobs.create("j", "add", JobOptions(every=60, args=[1, 2], priority=3))
    changed = await services.jobs.update("j", {"priority": 7})
    assert changed.spec.priority == 7
    assert changed.spec.trigger == job.spec.trigger
    assert changed.next_fire_at == job.next_fire_at
    retimed = await services.jobs.update("j", {"cron": "0 0 * * *"})
    assert retimed.spec.trigger["kind"] == "cron"
    assert retimed.spec.priority == 7
    cases = [
        ({}, "changes"),
        ({"nope": 1}, "nope"),
        ({"tz": "UTC"}, "tz"),
        ({"jitter": -1}, "jitter"),
    ]
    for changes, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.jobs.update("j", changes)
        assert caught.value.field == field, changes


async def test_pause_resume_trigger_next_delete(services: Services) -> None:
    await services.jobs.create("j", "add", JobOptions(every=60, args=[1, 2]))
    assert len(await services.jobs.next_fires("j", 3)) == 3
    paused = await services.jobs.pause("j")
    assert paused.spec.paused
    assert await services.jobs.next_fires("j") == []
    resumed = await services.jobs.resume("j")
    assert not resumed.spec.paused
    assert resumed.next_fire_at is not None
    run = await services.jobs.trigger("j")
    assert run.job_id == resumed.id
    assert [r.id for r in (await services.runs.list(RunQuery(job="j"))).items] == [run.id]
    assert [r.id for r in await services.jobs.recent_runs("j")] == [run.id]
    with pytest.raises(InvalidArgumentError) as caught:
        await services.jobs.next_fires("j", 0)
    assert caught.value.field == "count"
    gone = await services.jobs.delete("j")
    assert gone.name == "j"
    with pytest.raises(JobNotFoundError):
        await services.jobs.get("j")
    assert (await services.runs.get(run.id)).id == run.id  # its runs stay


async def test_code_job_needs_force(opened: App, services: Services) -> None:
    await opened.jobs.sync()  # no code jobs in this app: nothing happens
    spec_job = await services.jobs.create("code", "add", JobOptions(every=60, args=[1, 2]))
    from dataclasses import replace

    # Make it a code job the way a scheduler's sync stores one.
    code_spec = replace(spec_job.spec, source="code")
    await opened.store.put_job(code_spec, spec_job.next_fire_at, opened.clock.now())
    with pytest.raises(CodeJobError, match="defined in code"):
        await services.jobs.update("code", {"priority": 5})
    with pytest.raises(CodeJobError):
        await services.jobs.delete("code")
    assert (await services.jobs.update("code", {"priority": 5}, force=True)).spec.priority == 5
    await services.jobs.delete("code", force=True)


async def test_access_and_namespaces(opened: App, services: Services) -> None:
    await services.jobs.create("j", "add", JobOptions(every=60, args=[1, 2]))
    reader = Services(opened, READER)
    assert (await reader.jobs.get("j")).name == "j"
    for change in (
        reader.jobs.pause("j"),
        reader.jobs.trigger("j"),
        reader.jobs.delete("j"),
        reader.jobs.create("k", "add", JobOptions(every=60, args=[1, 2])),
    ):
        with pytest.raises(ForbiddenError):
            await change
    other = Services(opened, OTHER, namespace="other")
    assert (await other.jobs.list()).items == []
    for call in (other.jobs.get, other.jobs.pause, other.jobs.trigger, other.jobs.delete):
        with pytest.raises(JobNotFoundError):
            await call("j")
    with pytest.raises(ConflictError):
        # Names are unique per store: a job name taken in another namespace is a conflict.
        await other.jobs.create("j", "add", JobOptions(every=60, args=[1, 2]))
    mine = await other.jobs.create("k", "add", JobOptions(every=60, args=[1, 2]))
    assert mine.spec.namespace == "other"
    assert [j.name for j in (await services.jobs.list()).items] == ["j"]
