"""Acceptance: `cronbus subs` shows no secret (tables and --json alike), reads at 80 columns,
refuses unsafe webhook URLs with one line, and documents every option of `subs add`.

The command line runs as real subprocesses on an SQLite file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from cronbus.cli.subs import subs
from cronbus.events import generate_secret

SECRET = generate_secret()
PASSWORD = "pa55-w0rd"
TOKEN = "t0ken-q"
BEARER = "b3arer-xyz"
URL = f"https://alice:{PASSWORD}@hooks.example.com/in/orders/abc?token={TOKEN}"
SECRETS = (SECRET, PASSWORD, TOKEN, BEARER)


class Cli:
    """``cronbus`` in one folder against one SQLite store, with a fixed terminal width."""

    def __init__(self, tmp_path: Path) -> None:
        self.url = f"sqlite:///{tmp_path / 'subs.db'}"
        self.cwd = tmp_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
        self.env = {**env, "COLUMNS": "80"}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cronbus", *args, "--store", self.url],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The command line on a fresh SQLite file."""
    return Cli(tmp_path)


def no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_secrets_are_masked_in_tables_and_json(cli: Cli) -> None:
    added = cli.ok(
        "subs",
        "add",
        "orders-hook",
        "--topic",
        "orders",
        "--webhook",
        URL,
        "--header",
        f"Authorization: Bearer {BEARER}",
        "--header",
        "X-Team: billing",
        "--secret",
        SECRET,
        "--json",
    )
    no_secret(added)
    shown: dict[str, Any] = json.loads(cli.ok("subs", "show", "orders-hook", "--json"))
    listed: list[dict[str, Any]] = json.loads(cli.ok("subs", "list", "--json"))
    table = cli.ok("subs", "list")
    text = cli.ok("subs", "show", "orders-hook")
    for output in (json.dumps(shown), json.dumps(listed), table, text):
        no_secret(output)
    target = shown["target"]
    assert target["url"] == "https://***@hooks.example.com/in/orders/abc?token=***"
    assert target["headers"] == {"Authorization": "***", "X-Team": "***"}
    assert target["secret_count"] == 1
    assert "secrets" not in target
    assert listed[0]["target"] == target
    assert "hooks.example.com" in text
    assert "Authorization: ***" in text


def test_subs_list_at_80_columns_shows_whole_states_and_a_readable_target(cli: Cli) -> None:
    cli.ok("subs", "add", "orders-hook", "--topic", "orders", "--webhook", URL)
    cli.ok(
        "subs",
        "add",
        "paused-one",
        "--topic",
        "orders",
        "--webhook",
        "http://127.0.0.1:8080/hooks/paused",
    )
    cli.ok("subs", "pause", "paused-one")
    table = cli.ok("subs", "list")
    lines = table.splitlines()
    assert all(len(line) <= 80 for line in lines), table
    assert lines[0].split() == [
        "NAME",
        "STATE",
        "TOPIC",
        "TARGET",
        "FILTER",
        "CURSOR",
        "LAG",
        "HOLDER",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["orders-hook"][1] == "active"
    assert rows["paused-one"][1] == "paused"
    # The target is readable: masked, without its scheme, its host whole.
    assert rows["orders-hook"][3].startswith("***@hooks.example")
    assert rows["paused-one"][3].startswith("127.0.0.1:8080/")
    no_secret(table)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://169.254.169.254/latest/meta-data/", "denied network"),
        ("http://0.0.0.0:8080/", "denied network"),
        ("http://[::]/x", "denied network"),
        ("http://127.0.0.1:1/a b", "spaces"),
    ],
)
def test_unsafe_urls_are_one_line_errors(cli: Cli, url: str, message: str) -> None:
    done = cli.run("subs", "add", "bad", "--topic", "orders", "--webhook", url)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    # Refused before the store was opened: not even the store was created.
    listed = cli.run("subs", "list")
    assert listed.returncode == 1
    assert "no such store" in listed.stderr


def test_every_option_of_subs_add_has_help() -> None:
    command = subs.commands["add"]
    missing = [
        p.name
        for p in command.params
        if isinstance(p, click.Option) and not (p.help and p.help.strip())
    ]
    assert missing == []


def test_a_malformed_header_is_refused_without_echoing_it(cli: Cli) -> None:
    done = cli.run(
        *("subs", "add", "bad", "--topic", "orders", "--webhook", "https://a.example/"),
        *("--header", f"Authorization Bearer {BEARER}"),
    )
    assert done.returncode == 1
    assert "is not a header" in done.stderr
    no_secret(done.stderr)
