"""Acceptance: everyday friction of the command line (issue 9, item 11), the real ``cronbus``
run as subprocesses on real SQLite files: arguments from standard input, an unknown topic,
and tables at 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cronbus import App, make_event

APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="add")
def add(a: int, b: int = 0) -> int:
    return a + b
"""
DEADLINE_SECONDS = 30.0


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one SQLite store."""

    cwd: Path
    url: str

    def run(
        self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus ARGS`` to the end, with ``stdin`` as its standard input."""
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"
        }
        return subprocess.run(
            [sys.executable, "-m", "cronbus", *args],
            cwd=self.cwd,
            env={**environ, **(env or {})},
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """Run ``cronbus ARGS``; check it succeeded and return its stdout."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    def error(self, *args: str, stdin: str | None = None) -> str:
        """Run ``cronbus ARGS``; check it failed with one ``error:`` line and return it."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert done.stdout == ""
        assert done.stderr.startswith("error: "), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        return done.stderr.strip()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A folder with ``myapp.py`` and a store URL in it."""
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    return Cli(tmp_path, f"sqlite:///{tmp_path / 't.db'}")


async def stored_run(url: str, run_id: int) -> tuple[list[Any], dict[str, Any]]:
    """A run's arguments as the store holds them."""
    async with App(store=url) as app:
        run = await app.store.get_run(run_id)
        return run.args, run.kwargs


# -- defer --args - ------------------------------------------------------------------------------
async def test_defer_reads_args_from_standard_input(cli: Cli) -> None:
    out = cli.ok("defer", "add", "--app", "myapp:app", "--store", cli.url, "--args", "-",
                 "--json", stdin="[2, 3]\n")  # fmt: skip
    run_id = json.loads(out)["id"]
    assert await stored_run(cli.url, run_id) == ([2, 3], {})


async def test_defer_reads_kwargs_from_standard_input(cli: Cli) -> None:
    out = cli.ok("defer", "add", "--app", "myapp:app", "--store", cli.url, "--args", "[1]",
                 "--kwargs", "-", "--json", stdin='{"b": 41}')  # fmt: skip
    assert await stored_run(cli.url, json.loads(out)["id"]) == ([1], {"b": 41})


def test_defer_refuses_two_reads_of_standard_input(cli: Cli) -> None:
    message = cli.error("defer", "add", "--app", "myapp:app", "--store", cli.url,
                        "--args", "-", "--kwargs", "-", stdin="[1]")  # fmt: skip
    assert "standard input was already read by --args" in message


def test_defer_says_when_standard_input_is_not_json(cli: Cli) -> None:
    bad = "not json " * 50
    message = cli.error("defer", "add", "--app", "myapp:app", "--store", cli.url, "--args", "-",
                        stdin=bad)  # fmt: skip
    assert "from standard input is not JSON" in message
    assert bad not in message  # at most 80 characters of the value are shown
    assert "'not json not json" in message
    wrong_kind = cli.error("defer", "add", "--app", "myapp:app", "--store", cli.url, "--args",
                           "-", stdin='{"a": 1}')  # fmt: skip
    assert "must be a JSON array" in wrong_kind
    assert "from standard input" in wrong_kind


# -- events tail on an unknown topic -------------------------------------------------------------
async def publish(url: str, topic: str) -> None:
    """Publish one event to ``topic``."""
    async with App(store=url) as app:
        await app.events.publish_many(topic, [make_event("order.created", {"id": 1})])


async def test_tail_of_an_unknown_topic_is_an_error(cli: Cli) -> None:
    await publish(cli.url, "orders")
    message = cli.error("events", "tail", "nosuchtopic", "--store", cli.url)
    assert message == "error: no such topic: nosuchtopic"
    message = cli.error("events", "tail", "nosuchtopic", "--follow", "--store", cli.url)
    assert message == "error: no such topic: nosuchtopic"
    assert "order.created" in cli.ok("events", "tail", "orders", "--store", cli.url)


async def test_tail_of_a_subscribed_topic_without_events_prints_nothing(cli: Cli) -> None:
    async with App(store=cli.url) as app:
        await app.subscriptions.add("audit", topic="audit", task="add")
    done = cli.run("events", "tail", "audit", "--store", cli.url)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


# -- tables at 80 columns ------------------------------------------------------------------------
async def register_workers(url: str, queues: Sequence[str]) -> None:
    """Register one long-named worker per state, the way ``cronbus worker`` names them."""
    from cronbus.model import WorkerInfo, WorkerState

    async with App(store=url) as app:
        now = app.clock.now()
        for i, state in enumerate((WorkerState.ALIVE, WorkerState.DRAINING)):
            await app.store.register_worker(
                WorkerInfo(
                    id=f"build-server-eu-west-{i}.example.internal-123456-a1b2c3",
                    host="build-server-eu-west.example.internal",
                    pid=123456,
                    queues=list(queues),
                    labels=["gpu", "eu-west"],
                    concurrency=16,
                    version="0.1.0",
                    started_at=now,
                    heartbeat_at=now,
                    state=state,
                )
            )


async def test_workers_list_at_80_columns_shows_whole_states(cli: Cli) -> None:
    await register_workers(cli.url, ["default", "emails", "reports"])
    done = cli.run("workers", "list", "--store", cli.url, env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), done.stdout
    assert "STATE" in lines[0]
    assert any(" alive " in f"{line} " for line in lines[1:]), done.stdout
    assert any(" draining " in f"{line} " for line in lines[1:]), done.stdout
