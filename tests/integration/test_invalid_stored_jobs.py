"""A job stored with a trigger this cronbus refuses (stored by an older version, or by hand)
breaks neither the scheduler, nor the listings, nor the end of its run: on SQLite and
PostgreSQL, the bad trigger is written straight into the jobs table of a real store."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from contract.pg import pg_store_url
from cronbus import App, RunState
from cronbus.cli import cronbus
from cronbus.model import RunFilter
from cronbus.scheduler import Scheduler
from cronbus.testing import FakeClock

T0 = 1_800_000_000.0
BAD_TRIGGERS = [
    {"kind": "every", "seconds": 1e308},
    {"kind": "cron", "expr": "0 5-5 * * * * * *", "tz": "UTC"},
    {"kind": "every", "seconds": 60, "tz": "Mars/Olympus"},
    {"kind": "sometimes"},
    "not JSON {",  # a damaged row: read as a trigger nothing accepts
    [1, 2],  # JSON, but not an object
]


def kind(trigger: object) -> str:
    return str(trigger["kind"]) if isinstance(trigger, dict) else repr(trigger)


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: an SQLite file, or a new schema on the test PostgreSQL."""
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def make_app(url: str, clock: FakeClock) -> App:
    app = App(store=url, clock=clock)

    @app.task(name="work")
    def work() -> None: ...

    return app


def write_trigger(url: str, name: str, trigger: object, next_fire_at: float | None) -> None:
    """Store ``trigger`` for job ``name`` by hand, as an older cronbus might have."""
    text = trigger if isinstance(trigger, str) else json.dumps(trigger)
    if url.startswith("sqlite:"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "UPDATE jobs SET trigger = ?, next_fire_at = ? WHERE name = ?",
                (text, next_fire_at, name),
            )
        return
    parts = urlsplit(url)
    schema = dict(parse_qsl(parts.query))["schema"]
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.jobs SET trigger = %s, next_fire_at = %s WHERE name = %s").format(
                sql.Identifier(schema)
            ),
            (text, next_fire_at, name),
        )


@pytest.mark.parametrize("bad", BAD_TRIGGERS, ids=kind)
async def test_scheduler_pauses_the_invalid_job_once_and_fires_the_others(
    url: str, bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(start=T0)
    app = make_app(url, clock)
    async with app:
        await app.jobs.add("bad", "work", every=10)
        await app.jobs.add("good", "work", every=10)
        write_trigger(url, "bad", bad, T0 + 10)
        scheduler = Scheduler(app, lookahead=0.0, sync=False)
        with caplog.at_level(logging.ERROR, logger="cronbus.scheduler"):
            for _ in range(3):
                clock.advance(10)
                await scheduler.tick()
        bad_job, good_job = await app.jobs.get("bad"), await app.jobs.get("good")
        assert bad_job.spec.paused
        assert bad_job.next_fire_at is None
        assert await app.store.list_runs(RunFilter(job_id=bad_job.id)) == []
        assert len(await app.store.list_runs(RunFilter(job_id=good_job.id))) == 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "job 'bad' has an invalid trigger and is paused" in errors[0].getMessage()


def test_listings_show_the_invalid_trigger(url: str) -> None:
    # Not a coroutine: the commands run their own event loops.
    app = make_app(url, FakeClock(start=T0))
    with app:
        app.blocking(app.jobs.add("bad", "work", every=10))
        app.blocking(app.jobs.add("good", "work", cron="0 9 * * *"))
    write_trigger(url, "bad", {"kind": "every", "seconds": 1e308}, T0 + 10)
    runner = CliRunner()
    listed = runner.invoke(cronbus, ["jobs", "list", "--store", url], env={"COLUMNS": "250"})
    assert listed.exit_code == 0, listed.output
    assert "invalid trigger: Every.seconds must be" in listed.output
    assert "cron '0 9 * * *'" in listed.output  # the other job is listed as before
    shown = runner.invoke(cronbus, ["jobs", "show", "bad", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "invalid trigger:" in shown.output
    as_json = runner.invoke(cronbus, ["jobs", "list", "--json", "--store", url])
    assert as_json.exit_code == 0, as_json.output
    schedules = {job["name"]: job["schedule"] for job in json.loads(as_json.output)}
    assert schedules["bad"].startswith("invalid trigger: ")
    nexts = runner.invoke(cronbus, ["jobs", "next", "bad", "--store", url])
    assert nexts.exit_code == 1
    assert nexts.output.startswith("error: ")
    assert "Traceback" not in nexts.output


async def test_an_after_jobs_run_ends_although_its_trigger_is_now_invalid(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(start=T0)
    app = make_app(url, clock)
    async with app:
        await app.jobs.add("later", "work", after=5)
        scheduler = Scheduler(app, lookahead=0.0, sync=False)
        clock.advance(10)
        await scheduler.tick()
        job = await app.jobs.get("later")
        (run,) = await app.store.list_runs(RunFilter(job_id=job.id))
        write_trigger(url, "later", {"kind": "after", "seconds": -1}, None)
        with caplog.at_level(logging.ERROR, logger="cronbus.store"):
            # Ending the run plans the job's next fire in the same transaction.
            assert await app.store.cancel(run.id, clock.now()) is RunState.CANCELLED
        assert (await app.store.get_run(run.id)).state is RunState.CANCELLED
        assert (await app.jobs.get("later")).next_fire_at is None
    assert any(
        "has an invalid trigger, so its next fire is not planned" in r.getMessage()
        for r in caplog.records
    )
