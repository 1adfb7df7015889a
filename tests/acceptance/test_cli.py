"""Acceptance: the real ``cronbus`` command line, run as subprocesses on a real SQLite file.

Each test works in its own folder holding a small app module (``myapp.py``) and a store file.
Data a test only needs to read is seeded in-process through the Python API, because starting
the command line costs about 0.3 s each time.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import click
import pytest
from click.testing import CliRunner

from acceptance.together import finish_all
from cronbus import App, ErrorInfo, RunState
from cronbus.cli import cronbus as cli_group
from cronbus.model import ClaimRequest, Outcome, QueueShare
from cronbus.states import AttemptOutcome

APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="add")
def add(a: int, b: int) -> int:
    return a + b


@app.task(name="send_email", queue="emails")
def send_email(to: str) -> str:
    print(f"sending to {to}")
    return f"sent to {to}"
"""
DEADLINE_SECONDS = 30.0


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one store."""

    cwd: Path
    url: str
    env: dict[str, str]

    def spawn(
        self, *args: str, stdout: IO[Any] | int = subprocess.PIPE, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``cronbus ARGS`` without waiting for it."""
        return subprocess.Popen(
            [sys.executable, "-m", "cronbus", *args],
            cwd=self.cwd,
            env=env or self.env,
            stdout=stdout,
            stderr=subprocess.PIPE if stdout == subprocess.PIPE else subprocess.STDOUT,
            text=True,
        )

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus ARGS`` to the end."""
        return subprocess.run(
            [sys.executable, "-m", "cronbus", *args],
            cwd=self.cwd,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run ``cronbus ARGS``, check that it succeeded quietly and return its stdout."""
        done = self.run(*args, env=env)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        """Run ``cronbus ARGS --json`` against the test's store and parse its one document."""
        return json.loads(self.ok(*args, "--store", self.url, "--json", env=env))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A folder with ``myapp.py``, a store URL in it, and an environment free of CRONBUS_*."""
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    return Cli(tmp_path, f"sqlite:///{tmp_path / 't.db'}", env)


def _add(a: int, b: int) -> int:
    return a + b


async def seed(url: str, count: int = 1) -> list[int]:
    """Defer ``count`` runs of ``add`` through the Python API; return their ids."""
    app = App(store=url)
    add = app.task(name="add")(_add)
    async with app:
        return [(await add.defer_async(1, 2)).id for _ in range(count)]


async def seed_dead(url: str) -> int:
    """Make one dead run, with an error, the way a worker would: claim it, then fail it."""
    (run_id,) = await seed(url)
    async with App(store=url) as app:
        now = app.clock.now()
        request = ClaimRequest(
            worker_id="w1", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=30
        )
        (claimed,) = await app.store.claim(request, now)
        failure = Outcome(
            run_id=run_id,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.FAILED,
            error=ErrorInfo(type="ValueError", message="card declined"),
        )
        assert await app.store.complete([failure], now) == [True]
    return run_id


async def counts(url: str) -> dict[RunState, int]:
    """How many runs the store holds in each state."""
    async with App(store=url) as app:
        return await app.store.count_runs()


async def state_of(url: str, run_id: int) -> RunState:
    """A run's state, read through the Python API."""
    async with App(store=url) as app:
        return (await app.store.get_run(run_id)).state


def all_commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of the CLI, groups included, so a new command is tested too."""
    yield path
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from all_commands(command, (*path, name))
        else:
            yield (*path, name)


def poll(read: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
    """Call ``read`` until ``done`` accepts its value; fail after the deadline."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"still waiting after {DEADLINE_SECONDS}s: {value}"


# -- help ----------------------------------------------------------------------------------------
def test_every_command_has_help(cli: Cli) -> None:
    # Every command's help through Click's runner (one process: a subprocess per command cost
    # a minute of the suite), and the real entry point's for the groups, which import the most.
    runner = CliRunner()
    for path in all_commands(cli_group):
        result = runner.invoke(cli_group, [*path, "--help"], prog_name="cronbus")
        assert result.exit_code == 0, (path, result.output)
        assert result.output.startswith(f"Usage: {' '.join(('cronbus', *path))}"), path
    groups = [path for path in all_commands(cli_group) if len(path) <= 1]
    done = finish_all(
        {path: functools.partial(cli.spawn, *path, "--help") for path in groups},
        DEADLINE_SECONDS,
    )
    for path, finished in done.items():
        assert finished.returncode == 0, (path, finished.stderr)
        assert finished.stdout.startswith(f"Usage: {' '.join(('cronbus', *path))}"), path
    top = done[()].stdout
    for name in ("server", "worker", "runs", "dlq", "defer"):
        assert f"\n  {name} " in top


def test_version(cli: Cli) -> None:
    assert cli.ok("--version").startswith("cronbus, version ")


# -- runs ----------------------------------------------------------------------------------------
def test_defer_then_list_shows_the_run_queued(cli: Cli) -> None:
    created = cli.json("defer", "send_email", "--app", "myapp:app", "--kwargs", '{"to": "a@b.c"}')
    assert created == {"id": 1, "created": True, "task": "send_email"}

    (run,) = cli.json("runs", "list", "--state", "queued,scheduled")
    assert (run["id"], run["task"], run["queue"], run["state"]) == (
        1,
        "send_email",
        "emails",
        "queued",
    )
    assert run["kwargs"] == {"to": "a@b.c"}
    assert cli.json("runs", "list", "--state", "dead") == []


def test_defer_with_an_idempotency_key_returns_the_first_run(cli: Cli) -> None:
    args = ("defer", "add", "--app", "myapp", "--args", "[1, 2]", "--idempotency-key", "k1")
    first = cli.json(*args)
    assert cli.json(*args) == {**first, "created": False}


async def test_runs_show_json_shape(cli: Cli) -> None:
    (run_id,) = await seed(cli.url)

    run = cli.json("runs", "show", str(run_id))

    expected = {"id", "task", "queue", "state", "priority", "eta", "args", "kwargs", "result"}
    assert expected | {"error", "attempts"} <= set(run)
    assert (run["id"], run["task"], run["state"], run["priority"]) == (run_id, "add", "queued", 0)
    assert (run["args"], run["kwargs"], run["result"], run["error"]) == ([1, 2], {}, None, None)
    assert run["attempts"] == []
    assert datetime.fromisoformat(run["eta"]).utcoffset() is not None


async def test_cancel_a_queued_run_then_retry_it(cli: Cli) -> None:
    (run_id,) = await seed(cli.url)

    assert cli.ok("runs", "cancel", str(run_id), "--store", cli.url).split() == [
        "run",
        "1:",
        "cancelled",
    ]
    assert await state_of(cli.url, run_id) is RunState.CANCELLED

    assert cli.ok("runs", "retry", str(run_id), "--store", cli.url).split() == [
        "run",
        "1:",
        "queued",
    ]
    assert await state_of(cli.url, run_id) is RunState.QUEUED


def test_the_store_comes_from_store_then_the_app_then_cronbus_store(
    cli: Cli, tmp_path: Path
) -> None:
    cli.ok("defer", "add", "--app", "myapp", "--args", "[1, 2]", "--store", cli.url)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    cli.ok("migrate", "--store", other)  # commands that only read create no store
    (tmp_path / "pinned.py").write_text(f"from cronbus import App\napp = App(store={cli.url!r})\n")

    def listed(*args: str, store: str) -> int:
        env = {**cli.env, "CRONBUS_STORE": store}
        return len(json.loads(cli.ok("runs", "list", "--json", *args, env=env)))

    assert listed(store=cli.url) == 1
    assert listed("--store", other, store=cli.url) == 0
    assert listed("--app", "pinned", store=other) == 1
    assert listed("--app", "pinned", "--store", other, store=cli.url) == 0


# -- dlq -----------------------------------------------------------------------------------------
def test_dlq_requeue_all_with_no_dead_runs_prints_zero(cli: Cli) -> None:
    cli.ok("migrate", "--store", cli.url)  # requeue changes what exists: it creates no store
    assert cli.ok("dlq", "requeue", "--all", "--store", cli.url).strip() == "requeued 0 runs"


async def test_dlq_lists_a_dead_run_and_requeues_it(cli: Cli) -> None:
    run_id = await seed_dead(cli.url)

    (dead,) = cli.json("dlq", "list")
    assert (dead["id"], dead["state"]) == (run_id, "dead")
    assert dead["error"]["type"] == "ValueError"
    assert dead["error"]["message"] == "card declined"
    assert "card declined" in cli.ok("dlq", "list", "--store", cli.url)

    assert cli.json("dlq", "requeue", str(run_id))["requeued"] == [run_id]
    assert await state_of(cli.url, run_id) is RunState.QUEUED


# -- bad input -----------------------------------------------------------------------------------
DEFER_ADD = ("defer", "add", "--app", "myapp:app")
BAD_INPUT: dict[str, tuple[tuple[str, ...], str]] = {
    "args not JSON": ((*DEFER_ADD, "--args", "nope"), "'--args': 'nope' is not JSON"),
    "args not an array": ((*DEFER_ADD, "--args", "{}"), "'--args': must be a JSON array"),
    "unknown task": (("defer", "nope", "--app", "myapp:app"), "no task named 'nope'"),
    "arguments the task cannot take": ((*DEFER_ADD, "--args", "[1]"), "cannot take these"),
    "negative delay": ((*DEFER_ADD, "--args", "[1, 2]", "--delay", "-5"), "'--delay'"),
    "bad store URL": (("runs", "list", "--store", "nope://x"), "unknown scheme 'nope'"),
    "missing app module": (
        ("defer", "add", "--app", "nosuchmodule:app"),
        "cannot import module 'nosuchmodule': No module named 'nosuchmodule'",
    ),
    "app attribute missing": (("runs", "list", "--app", "myapp:nope"), "no attribute 'nope'"),
    "app attribute not an App": (("runs", "list", "--app", "myapp:add"), "not a cronbus App"),
    "unknown run id": (("runs", "show", "42"), "no run has id 42"),
    "cancel an unknown run": (("runs", "cancel", "42"), "no run has id 42"),
    "retry a queued run": (("runs", "retry", "1"), "run 1 is queued"),
    "requeue ids and --all": (("dlq", "requeue", "1", "--all"), "exactly one"),
    "unknown state": (("runs", "list", "--state", "done"), "unknown state 'done'"),
}


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
async def test_bad_input_is_one_line_and_changes_nothing(
    cli: Cli, argv: tuple[str, ...], message: str
) -> None:
    await seed(cli.url)
    before = await counts(cli.url)
    store = () if "--store" in argv else ("--store", cli.url)

    done = cli.run(*argv, *store)

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert await counts(cli.url) == before


# -- roles ---------------------------------------------------------------------------------------
def test_worker_runs_a_deferred_run_and_stops_cleanly_on_sigterm(cli: Cli) -> None:
    with (cli.cwd / "worker.log").open("w") as log:
        worker = cli.spawn("worker", "--app", "myapp:app", "--store", cli.url, stdout=log)
        try:
            _defer_and_wait(cli)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=DEADLINE_SECONDS) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert "Traceback" not in (cli.cwd / "worker.log").read_text()


def _defer_and_wait(cli: Cli) -> None:
    """Defer ``send_email`` (on the emails queue, served by default) and wait for success."""
    created = cli.json("defer", "send_email", "--app", "myapp", "--kwargs", '{"to": "ada"}')
    show = ("runs", "show", str(created["id"]))
    run = poll(lambda: cli.json(*show), lambda run: run["state"] == "succeeded")

    assert run["result"] == "sent to ada"
    (attempt,) = run["attempts"]
    assert (attempt["number"], attempt["outcome"], attempt["error"]) == (1, "succeeded", None)
    assert attempt["result"] == "sent to ada"
    assert "sending to ada" in attempt["logs"]
    assert attempt["worker_id"]
    started = datetime.fromisoformat(attempt["started_at"])
    assert datetime.fromisoformat(attempt["finished_at"]) >= started
