"""Acceptance: ``cronbus alerts add|list|silence|history|remove`` as subprocesses on a real
SQLite store: text and ``--json``, secrets never shown, code rules listed with ``--app``, the
history an evaluation left, and one-line errors for bad input."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cronbus import App
from cronbus.model import WorkerInfo
from cronbus.observability.alerts import chat, webhook
from cronbus.observability.alerts.engine import AlertEngine
from cronbus.observability.alerts.settings import AlertSettings
from cronbus.services import Services
from cronbus.services.alerts import AlertsService

DEADLINE_SECONDS = 60.0
SECRET = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
APP_SOURCE = """
from cronbus import App
from cronbus.observability.alerts import chat

app = App()
app.alerts.add("worker-lost", name="lost", to=[chat("https://hooks.example.com/T/B/XYZ")])
"""


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one store."""

    cwd: Path
    store: str
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus alerts ARGS --store STORE`` to the end."""
        return subprocess.run(
            [sys.executable, "-m", "cronbus", "alerts", *args, "--store", self.store],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str) -> str:
        """Run and expect success; the output."""
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        """Run with ``--json`` and parse the output."""
        return json.loads(self.ok(*args, "--json"))

    def fails(self, *args: str) -> str:
        """Run and expect a one-line error (exit 1 or click's 2); the line."""
        done = self.run(*args)
        assert done.returncode in (1, 2), done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: ")
        return lines[0]


def seed(cli: Cli, kind: str, **params: Any) -> None:
    """Store a rule in-process (a CLI call costs seconds on a busy machine)."""

    async def add() -> None:
        app = App(store=cli.store)
        async with app:
            to = [chat("http://127.0.0.1:9/c")]
            await AlertsService(Services(app).context).add(kind, to=to, **params)

    asyncio.run(add())


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The CLI on a fresh SQLite file, with an app module in its folder."""
    (tmp_path / "ops_app.py").write_text(APP_SOURCE)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CRONBUS_") and k not in ("COLUMNS", "LINES")
    }
    env["PYTHONPATH"] = str(tmp_path)
    made = Cli(tmp_path, f"sqlite:///{tmp_path / 'cronbus.db'}", env)
    asyncio.run(_create(made.store))
    return made


async def _create(store: str) -> None:
    async with App(store=store):
        pass


def test_add_and_list_in_text_and_json_without_secrets(cli: Cli) -> None:
    added = cli.ok(
        "add", "queue-depth", "--queue", "emails", "--threshold", "100", "--repeat", "30m",
        "--webhook", "http://127.0.0.1:9/hook?token=abc", "--secret", SECRET,
        "--email", "ops@example.com", "--chat", "https://hooks.example.com/T/B/XYZ",
    )  # fmt: skip
    assert added.strip() == (
        "alert rule queue-depth-emails added: queue-depth threshold=100 queue=emails"
    )
    made = cli.json("add", "worker-lost", "--name", "lost", "--webhook", "http://127.0.0.1:9/w")
    assert (made["name"], made["kind"], made["source"]) == ("lost", "worker-lost", "store")

    listed = cli.json("list")
    assert [r["name"] for r in listed["rules"]] == ["lost", "queue-depth-emails"]
    rule = listed["rules"][1]
    assert rule["params"] == {"threshold": 100.0, "queue": "emails"}
    assert rule["repeat"] == 1800.0
    assert rule["destinations"][0]["secrets"] == 1
    assert listed["firing"] == []
    text = cli.ok("list")
    assert "queue-depth-emails" in text
    assert "email ops@example.com" in text
    for secret in ("abc", "XYZ", SECRET):
        assert secret not in text
        assert secret not in json.dumps(listed)


def test_silence_a_rule_or_every_rule_and_end_it(cli: Cli) -> None:
    seed(cli, "worker-lost", name="lost")
    silenced = cli.json("silence", "lost", "--for", "2h", "--reason", "deploy")
    assert silenced["silenced"] is True
    assert silenced["reason"] == "deploy"
    assert "silenced until" in cli.ok("silence", "*", "--for", "10m")
    assert [s["rule"] for s in cli.json("list")["silences"]] == ["*", "lost"]
    assert cli.ok("silence", "*", "--for", "0").strip() == "alert rule * is not silenced"


def test_remove_a_stored_rule(cli: Cli) -> None:
    seed(cli, "worker-lost", name="lost")
    seed(cli, "queue-unserved", name="idle")
    assert cli.json("remove", "lost") == {"name": "lost", "removed": True}
    assert cli.ok("remove", "idle").strip() == "alert rule idle removed"
    assert cli.ok("list").strip() == "no alert rules"


def test_code_rules_are_listed_with_the_app_and_cannot_be_removed(cli: Cli) -> None:
    seed(cli, "queue-unserved", queue="mail")
    listed = cli.json("list", "--app", "ops_app")
    assert [(r["name"], r["source"]) for r in listed["rules"]] == [
        ("lost", "code"),
        ("queue-unserved-mail", "store"),
    ]
    assert "XYZ" not in json.dumps(listed)
    assert "defined in the app's code" in cli.fails(
        "add", "worker-lost", "--name", "lost", "--chat", "http://127.0.0.1:9/c", "--app", "ops_app"
    )
    assert "remove it there" in cli.fails("remove", "lost", "--app", "ops_app")
    assert "silenced until" in cli.ok("silence", "lost", "--for", "1h", "--app", "ops_app")


async def _evaluate(store: str) -> None:
    """One evaluation on the store, with a lost worker and a rule whose webhook is down."""
    app = App(store=store)
    async with app:
        down = [webhook("http://127.0.0.1:9/down")]
        await AlertsService(Services(app).context).add("worker-lost", name="lost", to=down)
        now = app.clock.now()
        await app.store.register_worker(
            WorkerInfo(
                id="w-gone",
                host="h",
                pid=1,
                queues=["*"],
                concurrency=1,
                version="t",
                started_at=now - 600,
                heartbeat_at=now - 600,
            )
        )
        await AlertEngine(app, settings=AlertSettings(alert_send_seconds=2)).evaluate_once()


async def test_history_shows_what_an_evaluation_did(cli: Cli) -> None:
    await _evaluate(cli.store)
    entries = cli.json("history")
    assert [(e["rule"], e["subject"], e["kind"]) for e in entries] == [
        ("lost", "w-gone", "failed"),
        ("lost", "w-gone", "fired"),
    ]
    assert "no heartbeat since" in entries[1]["message"]
    assert entries[0]["detail"].startswith("webhook 127.0.0.1:9: ")
    firing = cli.json("list")["firing"]
    assert [(f["rule"], f["subject"], f["pending"]) for f in firing] == [("lost", "w-gone", 1)]
    text = cli.ok("history", "--rule", "lost", "--limit", "1")
    assert "failed" in text
    assert "fired" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "queue-size", "--chat", "http://127.0.0.1:9/c"), "Invalid value for 'KIND'"),
        (("add", "queue-depth", "--chat", "http://127.0.0.1:9/c"), "needs a threshold"),
        (("add", "worker-lost"), "at least one destination"),
        (("add", "worker-lost", "--email", "nobody"), "not an email address"),
        (("add", "worker-lost", "--chat", "ftp://x/y"), "http(s)"),
        (("add", "worker-lost", "--secret", SECRET), "--secret signs webhooks"),
        (("add", "worker-lost", "--webhook", "http://127.0.0.1:9/w", "--secret", "x"), "whsec_"),
        (("add", "worker-lost", "--queue", "a", "--chat", "http://127.0.0.1:9/c"),
         "queue does not apply"),
        (("add", "queue-age", "--threshold", "soon", "--chat", "http://127.0.0.1:9/c"),
         "threshold must be"),
        (("add", "worker-lost", "--repeat", "-1", "--chat", "http://127.0.0.1:9/c"),
         "repeat must be"),
        (("silence", "nope", "--for", "1h"), "no alert rule named 'nope'"),
        (("silence", "x"), "Missing option '--for'"),
        (("remove", "nope"), "no alert rule named 'nope'"),
        (("history", "--limit", "0"), "--limit"),
        (("list", "--url", "http://127.0.0.1:9"), "--url works through a server"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_in_one_line(cli: Cli, args: tuple[str, ...], message: str) -> None:
    assert message in cli.fails(*args)
