"""Acceptance: ``cronbus namespaces list|create|delete`` and ``--namespace`` on the resource
commands, on a real SQLite store: what lives in one namespace is not seen from another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DEADLINE_SECONDS = 60.0
APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="add")
def add(a: int, b: int) -> int:
    return a + b
"""


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one store."""

    cwd: Path
    store: str
    env: dict[str, str]

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus ARGS --store STORE`` to the end."""
        return subprocess.run(
            [sys.executable, "-m", "cronbus", *args, "--store", self.store],
            cwd=self.cwd,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run a command that must succeed; its stdout."""
        done = self.run(*args, env=env)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        """Run a command with ``--json``; its document."""
        return json.loads(self.ok(*args, "--json", env=env))

    def refused(self, *args: str) -> str:
        """Run a command that must be refused in one line; its stderr."""
        done = self.run(*args)
        assert (done.returncode, done.stdout) == (1, ""), done
        assert done.stderr.startswith("error: "), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        return done.stderr


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A folder with ``myapp.py``, a migrated store and an environment free of CRONBUS_*."""
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    cli = Cli(tmp_path, f"sqlite:///{tmp_path / 't.db'}", env)
    cli.ok("migrate")
    return cli


def test_create_list_and_delete_a_namespace(cli: Cli) -> None:
    assert [ns["name"] for ns in cli.json("namespaces", "list")] == ["default"]

    assert cli.ok("namespaces", "create", "shop").strip() == "namespace shop created"
    assert [ns["name"] for ns in cli.json("namespaces", "list")] == ["default", "shop"]
    assert "shop" in cli.ok("namespaces", "list")

    assert cli.ok("namespaces", "delete", "shop").strip() == "namespace shop deleted"
    assert [ns["name"] for ns in cli.json("namespaces", "list")] == ["default"]


def test_runs_of_one_namespace_are_not_seen_from_another(cli: Cli) -> None:
    cli.ok("namespaces", "create", "shop")
    created = cli.json("defer", "add", "--app", "myapp", "--args", "[1, 2]", "--namespace", "shop")
    run_id = str(created["id"])

    assert [r["id"] for r in cli.json("runs", "list", "--namespace", "shop")] == [created["id"]]
    assert cli.json("runs", "list") == []
    assert f"no run has id {run_id}" in cli.refused("runs", "show", run_id)
    env = {**cli.env, "CRONBUS_NAMESPACE": "shop"}
    assert cli.json("runs", "show", run_id, env=env)["id"] == created["id"]
    # A namespace still holding a run stays.
    assert "shop" in cli.refused("namespaces", "delete", "shop")
    assert [ns["name"] for ns in cli.json("namespaces", "list")] == ["default", "shop"]


BAD = {
    "delete default": (("namespaces", "delete", "default"), "default"),
    "create one that exists": (("namespaces", "create", "default"), "default"),
    "a name that is not one": (("namespaces", "create", "Shop!"), "Shop!"),
    "delete an unknown one": (("namespaces", "delete", "nope"), "nope"),
    "--namespace not a name": (("runs", "list", "--namespace", "NOPE"), "--namespace"),
}


@pytest.mark.parametrize(("argv", "word"), BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line(cli: Cli, argv: tuple[str, ...], word: str) -> None:
    assert word in cli.refused(*argv)
    assert [ns["name"] for ns in cli.json("namespaces", "list")] == ["default"]
