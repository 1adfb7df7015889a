"""Acceptance: ``cronbus jobs``, the real command line run as subprocesses on a real SQLite file.

Starting the command line costs about 0.3 s, so the tests share one folder and one store per
module (each test works on jobs of its own names), seed the jobs they only need to exist through
the Python API in-process, and run the refused commands all at once against a second store that
nothing else changes, reading ``jobs list --json`` before and after to prove they changed nothing.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from acceptance.together import finish_all
from cronbus import App
from cronbus.jobs import plan
from cronbus.triggers import trigger_from_spec

APP_SOURCE = """
from cronbus import App
from cronbus.jobs import plan
from cronbus.triggers import trigger_from_spec

app = App()


@app.task(name="add")
def add(a: int, b: int) -> int:
    return a + b


@app.job(every=60)
def tick() -> None:
    pass
"""
CODE_JOB = "myapp.tick"
DEADLINE_SECONDS = 30.0


@dataclass(frozen=True)
class Cli:
    """The command line, run in one folder against one store, with the app ``myapp``."""

    cwd: Path
    url: str
    env: dict[str, str]

    def command(self, *args: str) -> list[str]:
        """The argv of ``cronbus ARGS --store URL``."""
        return [sys.executable, "-m", "cronbus", *args, "--store", self.url]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus ARGS`` on the store to the end."""
        return subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str) -> str:
        """Run ``cronbus ARGS``, check that it succeeded cleanly and return its stdout."""
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        """Run ``cronbus ARGS --json`` and parse its one document."""
        return json.loads(self.ok(*args, "--json"))

    def jobs(self) -> dict[str, Any]:
        """``jobs list --json``, by job name."""
        return {job["name"]: job for job in self.json("jobs", "list")}


def load_app(folder: Path, url: str) -> App:
    """The folder's ``myapp:app``, imported in-process as the CLI imports it, on ``url``."""
    spec = importlib.util.spec_from_file_location("myapp", folder / "myapp.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not put in sys.modules: nothing else imports it
    app: App = module.app
    app.use_store(url)
    return app


async def sync_code_jobs(app: App) -> None:
    """Store the app's code-defined jobs, as a scheduler does when it starts."""
    async with app:
        await app.jobs.sync()


def make_cli(folder: Path, store: str) -> Cli:
    """A folder holding ``myapp.py`` and a store whose code-defined jobs are synced."""
    folder.mkdir(exist_ok=True)
    (folder / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    cli = Cli(folder, f"sqlite:///{folder / store}", env)
    asyncio.run(sync_code_jobs(load_app(folder, cli.url)))
    return cli


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """The module's folder and store; each test uses job names of its own."""
    return make_cli(tmp_path_factory.mktemp("jobs"), "jobs.db")


@pytest.fixture
def app(cli: Cli) -> App:
    """The module's app, in-process, on the module's store, to seed jobs."""
    return load_app(cli.cwd, cli.url)


def iso(text: str) -> datetime:
    """An ISO time printed by the CLI, which must name its offset."""
    parsed = datetime.fromisoformat(text)
    assert parsed.utcoffset() is not None, text
    return parsed


# -- reading -------------------------------------------------------------------------------------
def test_a_code_defined_job_is_listed_with_its_schedule(cli: Cli) -> None:
    job = cli.jobs()[CODE_JOB]

    assert (job["task"], job["source"], job["state"]) == (CODE_JOB, "code", "active")
    assert (job["schedule"], job["trigger"]) == ("every 60s", {"kind": "every", "seconds": 60.0})
    assert iso(job["next_fire"]).timestamp() % 60 == 0
    assert (job["misfire"], job["overlap"], job["fires"]) == ("once", "allow", 0)


def test_add_then_list_show_and_next(cli: Cli) -> None:
    added = cli.json(
        "jobs", "add", "report", "--app", "myapp", "--task", "add", "--args", "[1, 2]",
        "--cron", "30 9 * * *", "--tz", "Europe/Paris", "--misfire", "skip", "--overlap", "queue",
    )  # fmt: skip
    assert (added["name"], added["state"], added["tz"]) == ("report", "active", "Europe/Paris")

    listed = cli.jobs()["report"]
    assert listed == added
    assert listed["schedule"] == "cron '30 9 * * *' in Europe/Paris"
    assert (listed["misfire"], listed["overlap"], listed["args"]) == ("skip", "queue", [1, 2])
    local = iso(listed["next_fire_local"])
    assert (local.hour, local.minute) == (9, 30)
    assert local == iso(listed["next_fire"])

    shown = cli.json("jobs", "show", "report")
    assert {k: v for k, v in shown.items() if k != "runs"} == listed
    assert shown["runs"] == []

    fires = cli.json("jobs", "next", "report", "-n", "3")["fires"]
    times = [iso(fire["utc"]) for fire in fires]
    assert len(times) == 3
    assert times[0] == iso(listed["next_fire"])
    assert times[0] < times[1] < times[2]
    assert [iso(fire["local"]) for fire in fires] == times  # the same instants, in Paris
    assert all(iso(fire["local"]).hour == 9 for fire in fires)


def test_list_show_and_next_as_text(cli: Cli) -> None:
    table = cli.ok("jobs", "list")
    assert re.search(rf"{re.escape(CODE_JOB)} +{re.escape(CODE_JOB)} +every 60s .* active", table)
    assert "no runs" in cli.ok("jobs", "show", CODE_JOB)
    lines = cli.ok("jobs", "next", CODE_JOB, "-n", "2").splitlines()
    assert len(lines) == 2
    assert all(len(line.split()) == 2 for line in lines)  # local, then UTC


async def test_an_after_job_shows_only_its_next_fire(cli: Cli, app: App) -> None:
    async with app:
        job = await app.jobs.add("chained", "add", after=30, args=[1, 2])

    shown = cli.json("jobs", "next", "chained", "-n", "3")

    # The fire after the next one waits for the next one's run to end: it is not known yet.
    assert [iso(f["utc"]).timestamp() for f in shown["fires"]] == [
        pytest.approx(job.next_fire_at, abs=1e-3)
    ]


async def test_fired_jobs_show_waiting_and_finished(cli: Cli, app: App) -> None:
    async with app:
        now = app.clock.now()
        chained = await app.jobs.add("chain", "add", after=30, args=[1, 2])
        once = await app.jobs.add("once", "add", at=now + 3600, args=[1, 2])
        # Fire both as a scheduler would, an hour from now.
        fires = [
            plan(job, trigger_from_spec(job.spec.trigger), now + 3600) for job in (chained, once)
        ]
        assert await app.store.fire(fires, now) == [True, True]

    listed = cli.jobs()

    # `chain` waits for its run to end before it plans its next fire; `once` has none left.
    assert {name: (listed[name]["state"], listed[name]["fires"]) for name in ("chain", "once")} == {
        "chain": ("waiting", 1),
        "once": ("finished", 1),
    }
    assert listed["chain"]["next_fire"] is None
    assert listed["once"]["next_fire"] is None


# -- changing ------------------------------------------------------------------------------------
async def test_pause_then_resume(cli: Cli, app: App) -> None:
    async with app:
        await app.jobs.add("pausable", "add", every=60, args=[1, 2])

    assert "job pausable paused" in cli.ok("jobs", "pause", "pausable")
    paused = cli.jobs()["pausable"]
    assert (paused["state"], paused["paused"], paused["next_fire"]) == ("paused", True, None)
    assert cli.json("jobs", "next", "pausable")["fires"] == []

    # Changing a paused job leaves it paused, with no next fire.
    cli.ok("jobs", "update", "pausable", "--app", "myapp", "--priority", "5")
    changed = cli.jobs()["pausable"]
    assert (changed["state"], changed["next_fire"], changed["priority"]) == ("paused", None, 5)

    resumed = cli.json("jobs", "resume", "pausable")
    assert (resumed["state"], resumed["paused"]) == ("active", False)
    assert iso(resumed["next_fire"]) > datetime.now().astimezone()
    assert cli.jobs()["pausable"] == resumed


async def test_update_every_changes_the_schedule_and_keeps_the_rest(cli: Cli, app: App) -> None:
    async with app:
        await app.jobs.add("rate", "add", every=60, args=[1, 2], priority=3, overlap="skip")

    updated = cli.json("jobs", "update", "rate", "--app", "myapp", "--every", "30")

    assert (updated["schedule"], updated["trigger"]["seconds"]) == ("every 30s", 30.0)
    assert (updated["priority"], updated["overlap"], updated["args"]) == (3, "skip", [1, 2])
    assert cli.jobs()["rate"] == updated
    first, second = (iso(f["utc"]) for f in cli.json("jobs", "next", "rate", "-n", "2")["fires"])
    assert second - first == timedelta(seconds=30)


async def test_trigger_creates_a_run_now(cli: Cli, app: App) -> None:
    async with app:
        await app.jobs.add("fire-now", "add", every=3600, args=[2, 3], queue="reports")
    before = cli.jobs()["fire-now"]

    out = cli.ok("jobs", "trigger", "fire-now", "--app", "myapp")

    match = re.fullmatch(r"run (\d+) created for job fire-now\n", out)
    assert match, out
    run = cli.json("runs", "show", match[1])
    assert (run["task"], run["args"], run["queue"], run["state"]) == (
        "add",
        [2, 3],
        "reports",
        "queued",
    )
    shown = cli.json("jobs", "show", "fire-now")
    assert [r["id"] for r in shown["runs"]] == [run["id"]]
    # A fire outside the schedule: the schedule is unchanged.
    assert {k: v for k, v in shown.items() if k != "runs"} == before


async def test_remove_deletes_the_job(cli: Cli, app: App) -> None:
    async with app:
        await app.jobs.add("doomed", "add", every=60, args=[1, 2])

    assert cli.ok("jobs", "remove", "doomed").strip() == "job doomed removed (its runs are kept)"

    assert "doomed" not in cli.jobs()
    gone = cli.run("jobs", "show", "doomed")
    assert (gone.returncode, gone.stderr) == (1, "error: no job named 'doomed'\n")


# -- bad input -----------------------------------------------------------------------------------
ADD = ("jobs", "add", "new", "--app", "myapp", "--task", "add", "--args", "[1, 2]")
UPDATE = ("jobs", "update", CODE_JOB, "--app", "myapp")
BAD_INPUT: dict[str, tuple[tuple[str, ...], str]] = {
    "bad cron expression": (
        (*ADD, "--cron", "61 * * * *"),
        "invalid cron expression '61 * * * *'",
    ),
    "cron expression with 3 fields": ((*ADD, "--cron", "* * *"), "expression '* * *'"),
    "bad cron expression in update": ((*UPDATE, "--cron", "0 0 31 2 *"), "'0 0 31 2 *'"),
    "unknown time zone": (
        (*ADD, "--cron", "0 9 * * *", "--tz", "Mars/Olympus"),
        "unknown time zone 'Mars/Olympus'",
    ),
    "two triggers": ((*ADD, "--every", "60", "--cron", "* * * * *"), "--cron and --every"),
    "no trigger": (ADD, "give a trigger: --cron, --every, --after or --at"),
    "no task": (("jobs", "add", "new", "--app", "myapp", "--every", "60"), "--task"),
    "unknown task": (
        ("jobs", "add", "new", "--app", "myapp", "--task", "nope", "--every", "60"),
        "no task named 'nope'",
    ),
    "args not JSON": ((*ADD, "--every", "60", "--args", "[1,"), "'--args': '[1,' is not JSON"),
    "kwargs not an object": ((*ADD, "--every", "60", "--kwargs", "[]"), "must be a JSON object"),
    "args the task cannot take": ((*ADD, "--every", "60", "--args", "[1]"), "cannot take"),
    "a name that exists": (
        (
            "jobs",
            "add",
            CODE_JOB,
            "--app",
            "myapp",
            "--task",
            "add",
            "--args",
            "[1, 2]",
            "--every",
            "5",
        ),
        f"a job named {CODE_JOB!r} exists",
    ),
    "at in the past": ((*ADD, "--at", "2001-01-01T00:00:00Z"), "the job would never run"),
    "at not a time": ((*ADD, "--at", "tomorrow"), "'--at': 'tomorrow' is not an ISO-8601"),
    "zero seconds": ((*ADD, "--every", "0"), "'--every'"),
    "bad misfire": ((*ADD, "--every", "60", "--misfire", "never"), "'--misfire'"),
    "add without --app": (("jobs", "add", "new", "--task", "add", "--every", "5"), "'--app'"),
    "calendars on an after job": (
        (*ADD, "--after", "60", "--calendar", "holidays"),
        "skip dates of cron and every jobs only",
    ),
    "update to an after job with calendars": (
        ("jobs", "update", "weekdays", "--app", "myapp", "--after", "60"),
        "calendars (holidays) skip dates",
    ),
    "update with nothing": (UPDATE, "give at least one option to change"),
    "update a time zone alone": ((*UPDATE, "--tz", "UTC"), "to change a job's schedule"),
    "update an unknown job": (
        ("jobs", "update", "nope", "--app", "myapp", "--every", "5"),
        "no job named 'nope'",
    ),
    "show an unknown job": (("jobs", "show", "nope"), "no job named 'nope'"),
    "pause an unknown job": (("jobs", "pause", "nope"), "no job named 'nope'"),
    "resume an unknown job": (("jobs", "resume", "nope"), "no job named 'nope'"),
    "remove an unknown job": (("jobs", "remove", "nope"), "no job named 'nope'"),
    "trigger an unknown job": (
        ("jobs", "trigger", "nope", "--app", "myapp"),
        "no job named 'nope'",
    ),
    "next of an unknown job": (("jobs", "next", "nope"), "no job named 'nope'"),
}


@dataclass(frozen=True)
class Refusals:
    """What each bad command printed, and the jobs before and after all of them."""

    done: dict[str, subprocess.CompletedProcess[str]]
    before: dict[str, Any]
    after: dict[str, Any]


async def seed_calendar_job(app: App) -> None:
    """A job ``weekdays`` that skips the dates of the calendar ``holidays``."""
    async with app:
        await app.store.put_calendar("holidays", ["2030-12-25"])
        await app.jobs.add(
            "weekdays", "add", cron="0 9 * * 1-5", args=[1, 2], calendars=["holidays"]
        )


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Refusals:
    """Every bad command, run at once on a store that nothing else changes."""
    cli = make_cli(tmp_path_factory.mktemp("refused"), "refused.db")
    asyncio.run(seed_calendar_job(load_app(cli.cwd, cli.url)))
    before = cli.jobs()
    starters = {
        case: functools.partial(
            subprocess.Popen,
            cli.command(*argv),
            cwd=cli.cwd,
            env=cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, (argv, _) in BAD_INPUT.items()
    }
    done = finish_all(starters, DEADLINE_SECONDS)
    return Refusals(done=done, before=before, after=cli.jobs())


# One worker takes every case: each worker given one would run all the refusals again (30 s
# on a busy machine).
@pytest.mark.xdist_group("cli_jobs_refusals")
@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_and_changes_nothing(refusals: Refusals, case: str) -> None:
    done, message = refusals.done[case], BAD_INPUT[case][1]

    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert refusals.after == refusals.before
    assert list(refusals.before) == [CODE_JOB, "weekdays"]
