"""Acceptance: ``cronbus tokens create|list|revoke`` on a real SQLite store.

A token is printed once (``--json``: its ``token`` field) and stored only hashed: no listing
shows it again, and the store file does not hold it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DEADLINE_SECONDS = 60.0
TOKEN = re.compile(r"cb_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one store."""

    cwd: Path
    store: str
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus ARGS --store STORE`` to the end."""
        return subprocess.run(
            [sys.executable, "-m", "cronbus", *args, "--store", self.store],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str) -> str:
        """Run a command that must succeed; its stdout."""
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        """Run a command with ``--json``; its document."""
        return json.loads(self.ok(*args, "--json"))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A folder with a migrated store and an environment free of CRONBUS_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    cli = Cli(tmp_path, f"sqlite:///{tmp_path / 't.db'}", env)
    cli.ok("migrate")
    return cli


def test_create_prints_the_token_once_and_lists_it_without_it(cli: Cli) -> None:
    created = cli.json("tokens", "create", "--scope", "write", "--namespace", "default")
    plain = cli.run("tokens", "create", "--scope", "read", "--namespace", "*", "--name", "ci")

    match = TOKEN.fullmatch(created["token"])
    assert match is not None
    assert match[1] == created["id"]
    assert (created["scope"], created["namespaces"], created["state"]) == (
        "write",
        ["default"],
        "active",
    )
    assert TOKEN.fullmatch(plain.stdout.strip()) is not None  # stdout: the token alone
    assert "not shown again" in plain.stderr
    listed = cli.json("tokens", "list")
    assert [t["id"] for t in listed] == [created["id"], plain.stdout.strip()[3:15]]
    assert [t["name"] for t in listed][1] == "ci"
    table = cli.ok("tokens", "list")
    for secret in (created["token"], plain.stdout.strip()):
        assert secret not in json.dumps(listed)
        assert secret not in table
        assert secret.encode() not in (cli.cwd / "t.db").read_bytes()


def test_revoke_marks_the_token_revoked(cli: Cli) -> None:
    created = cli.json("tokens", "create", "--scope", "admin", "--namespace", "*")

    assert cli.ok("tokens", "revoke", created["id"]).strip() == f"token {created['id']} revoked"

    (listed,) = cli.json("tokens", "list")
    assert (listed["state"], listed["revoked_at"] is not None) == ("revoked", True)


def test_expires_sets_an_expiry(cli: Cli) -> None:
    created = cli.json(
        "tokens", "create", "--scope", "read", "--namespace", "default", "--expires", "3600"
    )

    assert created["expires_at"] is not None
    assert "never" not in cli.ok("tokens", "list")


BAD = {
    "unknown scope": (("tokens", "create", "--scope", "root", "--namespace", "default"), "root"),
    "no namespace": (("tokens", "create", "--scope", "read"), "--namespace"),
    "unknown namespace": (
        ("tokens", "create", "--scope", "read", "--namespace", "nope"),
        "nope",
    ),
    "bad expiry": (
        ("tokens", "create", "--scope", "read", "--namespace", "default", "--expires", "0"),
        "--expires",
    ),
    "revoke an unknown token": (("tokens", "revoke", "0123456789ab"), "0123456789ab"),
    "revoke a malformed id": (("tokens", "revoke", "nope"), "token_id"),
}


@pytest.mark.parametrize(("argv", "word"), BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_and_creates_no_token(
    cli: Cli, argv: tuple[str, ...], word: str
) -> None:
    done = cli.run(*argv)

    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.startswith("error: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert word in done.stderr
    assert cli.json("tokens", "list") == []
