"""Acceptance: every value seen breaking cronbus (issue 9, "What was seen" 2, 3, 4 and 8) is
refused at the edge with one clear line, on both stores, and the store's listings still work.

The Python API is driven in-process on a SQLite file and on a fresh PostgreSQL schema; the
command line runs as subprocesses (about 0.3 s each), several at once where the cases allow.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acceptance.together import finish_all
from contract.pg import pg_store_url
from cronbus import App
from cronbus.errors import CodeJobError, CronbusError, StoreError
from cronbus.events.event import make_event
from cronbus.events.records import NewEvent
from cronbus.worker.outcomes import RUNS_TOPIC

APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="add")
def add(a, b=0):
    return a


@app.job(every=60, name="tick")
def tick() -> None:
    pass
"""
DEADLINE_SECONDS = 60.0
SHOWN = 80


def _add(a: Any, b: Any = 0) -> Any:
    return a


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind (PostgreSQL: skipped locally when absent, failed in CI)."""
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'edges.db'}"


def make_app(url: str) -> App:
    """An app on ``url`` with the task ``add``."""
    app = App(store=url)
    app.task(name="add")(_add)
    return app


@dataclass(frozen=True)
class Cli:
    """The command line, run in a folder holding ``myapp.py``, against one store."""

    cwd: Path
    url: str
    env: dict[str, str]

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``cronbus ARGS --store URL``."""
        return subprocess.Popen(
            [sys.executable, "-m", "cronbus", *args, "--store", self.url],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run_all(self, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
        """Run commands side by side (they only read, or are refused) and wait for them all."""
        starters = {i: functools.partial(self.start, *c) for i, c in enumerate(commands)}
        return list(finish_all(starters, DEADLINE_SECONDS).values())

    def ok(self, *args: str) -> str:
        """Run ``cronbus ARGS``; check it succeeded without a traceback; return stdout."""
        (done,) = self.run_all(args)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout


@pytest.fixture
def cli(tmp_path: Path, url: str) -> Cli:
    """A folder with ``myapp.py`` and an environment free of CRONBUS_* on the test's store."""
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    return Cli(tmp_path, url, env)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The command failed with status 1 and exactly one ``error:`` line naming ``needles``."""
    assert done.returncode == 1, (done.args, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert_short(lines[0])
    return lines[0]


def assert_short(message: str) -> None:
    """At most 80 characters of any value: no run of 81 equal characters, and a short line."""
    assert len(message) < 400, message
    for char in set(message):
        assert char * (SHOWN + 1) not in message, message


def assert_listings_work(cli: Cli) -> None:
    """Every list and show command of the store still works."""
    checks = [
        ("runs", "list"),
        ("runs", "list", "--json"),
        ("jobs", "list"),
        ("jobs", "list", "--json"),
        ("events", "tail", "t", "--json"),
        ("subs", "list"),
        ("dlq", "list"),
        ("workers", "list"),
    ]
    runs = json.loads(cli.ok("runs", "list", "--json"))
    checks += [("runs", "show", str(run["id"])) for run in runs]
    for done in cli.run_all(*checks):
        assert done.returncode == 0, (done.args, done.stderr)
        assert "Traceback" not in done.stderr


async def refused(call: Callable[[], Awaitable[Any]], *needles: str) -> CronbusError:
    """Await ``call``: it must raise a CronbusError whose message names ``needles``."""
    with pytest.raises(CronbusError) as info:
        await call()
    message = str(info.value)
    for needle in needles:
        assert needle in message, (needle, message)
    assert_short(message)
    return info.value


async def stored(app: App) -> tuple[int, int]:
    """How many runs the store holds, and how many events topic ``t`` holds."""
    runs = sum((await app.store.count_runs()).values())
    events = await app.events.read("t", after=0, limit=1000)
    return runs, len(events)


# -- 2. one value breaks the listings ------------------------------------------------------------
async def test_times_past_9999_are_refused_and_the_listings_still_work(cli: Cli) -> None:
    app = make_app(cli.url)
    add = app.tasks["add"]
    async with app:
        await refused(lambda: add.defer_async(1, eta=1e300), "eta", "9999-12-31")
        await refused(lambda: add.defer_async(1, delay=1e300), "delay", "1e+300")
        await refused(lambda: add.defer_async(1, delay=-1), "delay", "zero or more")
        await refused(lambda: add.defer_async(1, eta=math.nan), "eta")
        await refused(lambda: app.publish_async("t", "a.b", time=1e300), "event time")
        await refused(lambda: app.publish_async("t", "a.b", time=-1.0), "event time", "1970")
        await add.defer_async(1, eta=253_402_300_799)  # the last second of 9999 is fine
        await app.publish_async("t", "a.b", {"x": 1}, time=0)
        assert await stored(app) == (1, 1)
    job = ("jobs", "add", "big", "--app", "myapp", "--task", "add", "--args", "[1]")
    (delay, every, every_1e12) = cli.run_all(
        ("defer", "add", "--app", "myapp", "--args", "[1,2]", "--delay", "1e300"),
        (*job, "--every", "1e308"),
        (*job, "--every", "1e12"),
    )
    assert_one_line_error(delay, "delay", "1e+300")
    # --every's bounds are the triggers' (1 ms to 100 years): refused there.
    assert_one_line_error(every, "every", "1e+308")
    assert_one_line_error(every_1e12, "every", "100 years")
    assert_listings_work(cli)
    assert "big" not in cli.ok("jobs", "list")


# -- 3. tracebacks instead of errors -------------------------------------------------------------
BAD_TEXT = {"NUL": "a\x00b", "surrogate": "a\ud800b"}


def text_cases(app: App, bad: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every string attribute a user gives, each carrying ``bad``."""
    add = app.tasks["add"]
    return {
        "args": lambda: add.defer_async(bad),
        "nested args": lambda: add.defer_async([{"k": [bad]}]),
        "kwargs": lambda: add.defer_async(1, b={"k": bad}),
        "dict key": lambda: add.defer_async({bad: 1}),
        "idempotency_key": lambda: add.defer_async(1, idempotency_key=bad),
        "queue": lambda: add.defer_async(1, queue=bad),
        "defer_many key": lambda: add.defer_many_async([[1]], queue=bad),
        "event data": lambda: app.publish_async("t", "a.b", {"d": bad}),
        "event type": lambda: app.publish_async("t", bad),
        "event source": lambda: app.publish_async("t", "a.b", source=bad),
        "event subject": lambda: app.publish_async("t", "a.b", subject=bad),
        "event key": lambda: app.publish_async("t", "a.b", key=bad),
        "event id": lambda: app.publish_async("t", "a.b", id=bad),
        "topic": lambda: app.publish_async(bad, "a.b"),
        "job name": lambda: app.jobs.add(bad, "add", every=60, args=[1]),
        "job args": lambda: app.jobs.add("j", "add", every=60, args=[bad]),
        "job lookup": lambda: app.jobs.get(bad),
        "subscription name": lambda: app.subscriptions.add(bad, topic="t", task="add"),
        "subscription filter": lambda: app.subscriptions.add(
            "s", topic="t", task="add", subject=bad
        ),
        "subscription lookup": lambda: app.subscriptions.get(bad),
    }


@pytest.mark.parametrize("kind", sorted(BAD_TEXT))
async def test_nul_and_lone_surrogates_are_refused_in_every_string(cli: Cli, kind: str) -> None:
    app = make_app(cli.url)
    async with app:
        for name, call in text_cases(app, BAD_TEXT[kind]).items():
            error = await refused(call)
            # Refused by validation, before any store sees the value.
            assert not isinstance(error, StoreError), (name, error)
        assert await stored(app) == (0, 0)
        assert await app.jobs.list() == []
        assert await app.subscriptions.list() == []


async def seed_event(url: str) -> None:
    """One good event in topic ``t``, so ``events tail t`` has a topic to read."""
    async with make_app(url) as app:
        await app.publish_async("t", "ok")


def test_the_command_line_refuses_nul_and_surrogates_in_one_line(cli: Cli) -> None:
    asyncio.run(seed_event(cli.url))
    cases = cli.run_all(
        ("defer", "add", "--app", "myapp", "--args", '[1, "\\ud800"]'),
        ("defer", "add", "--app", "myapp", "--args", '[{"a": "\\u0000"}]'),
        ("defer", "add", "--app", "myapp", "--args", "[1]", "--idempotency-key", "k\udcff"),
        ("events", "publish", "t", "--type", "a.b", "--subject", "s\udcff"),
        ("events", "publish", "t", "--type", "a.b", "--data", '{"x": "\\ud800"}'),
    )
    for done in cases:
        line = assert_one_line_error(done)
        assert "surrogate" in line or "NUL" in line, line
    assert_listings_work(cli)


def test_json_nested_too_deep_is_one_line(cli: Cli) -> None:
    """A decoder recursing 5,000 levels overflows Python's stack: typed JSON is read with
    cronbus.serialization.parse_json, which says so in one line."""
    asyncio.run(seed_event(cli.url))
    deep = "[" * 5000
    cases = cli.run_all(
        ("jobs", "add", "deep", "--app", "myapp", "--task", "add", "--every", "60", "--args", deep),
        ("defer", "add", "--app", "myapp", "--args", deep),
        ("events", "publish", "t", "--type", "a.b", "--data", deep),
    )
    for done in cases:
        assert_one_line_error(done)
        assert "Recursion" not in done.stderr
    assert_listings_work(cli)


def test_a_bad_setting_names_the_variable(cli: Cli) -> None:
    process = cli.start("runs", "list", "--app", "myapp", env={"CRONBUS_LEASE_SECONDS": "abc"})
    out, err = process.communicate(timeout=DEADLINE_SECONDS)
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    line = assert_one_line_error(done)
    assert line == "error: CRONBUS_LEASE_SECONDS: expected a number of seconds, got 'abc'"


# -- 4. silent wrong results ---------------------------------------------------------------------
async def test_dict_keys_that_are_not_strings_are_refused(url: str) -> None:
    app = make_app(url)
    async with app:
        await refused(
            lambda: app.tasks["add"].defer_async(1, {1: 2, None: 4}),
            "argument 'b'",
            "dict key must be a string, not int",
        )
        await refused(lambda: app.publish_async("t", "a.b", {"a": {(1, 2): 3}}), "at ['a']")
        assert await stored(app) == (0, 0)


async def test_a_code_job_changes_only_by_force_and_says_it_comes_back(cli: Cli) -> None:
    sys.path.insert(0, str(cli.cwd))
    try:
        module = __import__("myapp")
    finally:
        sys.path.remove(str(cli.cwd))
        sys.modules.pop("myapp", None)
    app: App = module.app
    app.use_store(cli.url)
    async with app:
        await app.jobs.sync()
        await refused(lambda: app.jobs.update("tick", every=30), "defined in code", "--force")
        await refused(lambda: app.jobs.remove("tick"), "defined in code")
        assert (await app.jobs.get("tick")).spec.trigger["seconds"] == 60
        with pytest.raises(CodeJobError):
            await app.jobs.remove("tick")
    update, remove = cli.run_all(
        ("jobs", "update", "tick", "--app", "myapp", "--every", "30"),
        ("jobs", "remove", "tick"),
    )
    assert_one_line_error(update, "defined in code", "restores it from the code")
    assert_one_line_error(remove, "defined in code", "--force")
    (forced,) = cli.run_all(
        ("jobs", "update", "tick", "--app", "myapp", "--every", "30", "--force")
    )
    assert forced.returncode == 0, forced.stderr
    assert "warning: job tick is defined in code" in forced.stderr
    assert "restores it from the code" in forced.stderr
    (removed,) = cli.run_all(("jobs", "remove", "tick", "--force"))
    assert removed.returncode == 0, removed.stderr
    assert "adds it again from the code" in removed.stderr
    assert "tick" not in cli.ok("jobs", "list")


# -- 8. limits -----------------------------------------------------------------------------------
async def test_a_200_mb_argument_is_refused(url: str) -> None:
    # How fast is the benchmarks' business (a timed assertion failed on a busy machine): this
    # checks the refusal names the limit and nothing was stored.
    app = make_app(url)
    huge = "x" * 200_000_000
    async with app:
        await refused(lambda: app.tasks["add"].defer_async(huge), "1,048,576 bytes")
        await refused(lambda: app.publish_async("t", "a.b", [huge]), "1,048,576 bytes")
        assert await stored(app) == (0, 0)


async def test_the_payload_limit_is_a_setting(tmp_path: Path) -> None:
    app = App(store=f"sqlite:///{tmp_path / 'limit.db'}")
    app.settings = app.settings.with_overrides(max_payload_bytes=100)
    add = app.task(name="add")(_add)
    async with app:
        await add.defer_async("x" * 50)
        await refused(lambda: add.defer_async("x" * 50, b="y" * 50), "over the limit of 100")


async def test_forged_run_outcomes_are_refused_but_cronbus_still_publishes_them(
    url: str,
) -> None:
    app = make_app(url)
    async with app:
        await refused(lambda: app.publish_async(RUNS_TOPIC, "run.dead"), "cronbus.")
        forged = make_event("run.dead", {"run_id": 1})
        await refused(lambda: app.publish_many_async("cronbus.anything", [forged]), "cronbus.")
        # Reading and subscribing stay open, and the worker's own path (straight to the
        # store, as worker/outcomes.py does) still appends.
        await app.subscriptions.add("alerts", topic=RUNS_TOPIC, task="add")
        own = NewEvent(
            id="run-1-1-run.dead",
            type="run.dead",
            source="cronbus/worker",
            subject="run/1",
            time=time.time(),
            data_json="{}",
            key="1",
        )
        (appended,) = await app.store.append(RUNS_TOPIC, [own], time.time())  # type: ignore[attr-defined]
        assert appended.created
        assert [e.type for e in await app.events.read(RUNS_TOPIC)] == ["run.dead"]


async def test_long_types_keys_and_bad_sources_are_refused(url: str) -> None:
    app = make_app(url)
    async with app:
        await refused(lambda: app.publish_async("t", "a" * 5000), "event type", "at most 200")
        await refused(lambda: app.publish_async("t", "a.b", key="k" * 100_000), "event key")
        await refused(lambda: app.publish_async("t", "order created"), "whitespace")
        await refused(lambda: app.publish_async("t", "a.b", source="not a uri"), "event source")
        await refused(lambda: app.publish_async("t", "a.b", source="1x:y"), "URI reference")
        await refused(lambda: app.publish_async("t", "a.b", subject="s\nt"), "event subject")
        await refused(lambda: app.tasks["add"].defer_async(1, idempotency_key="k" * 501), "500")
        # The longest accepted values are stored on both stores (PostgreSQL indexes keys).
        await app.publish_async("t", "t" * 200, key="鍵" * 500, source="https://x/" + "p" * 900)
        await app.tasks["add"].defer_async(1, idempotency_key="😀" * 500)
        assert await stored(app) == (1, 1)


def test_the_command_line_shows_at_most_80_characters_of_a_value(cli: Cli) -> None:
    asyncio.run(seed_event(cli.url))
    cases = cli.run_all(
        ("events", "publish", "t", "--type", "a" * 5000),
        ("events", "publish", "t", "--type", "a.b", "--key", "k" * 100_000),
        ("events", "publish", RUNS_TOPIC, "--type", "run.dead"),
        ("defer", "add", "--app", "myapp", "--args", "[1]", "--idempotency-key", "i" * 5000),
        ("defer", "add", "--app", "myapp", "--args", "[" + "7," * 50_000 + "7]"),
    )
    needles = ["event type", "event key", "cronbus.", "idempotency_key", "cannot take"]
    for done, needle in zip(cases, needles, strict=True):
        assert_one_line_error(done, needle)
    assert_listings_work(cli)
    assert asyncio.run(_counts(cli.url)) == (0, 1)


async def _counts(url: str) -> tuple[int, int]:
    async with make_app(url) as app:
        return await stored(app)
