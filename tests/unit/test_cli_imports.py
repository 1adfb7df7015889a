"""What starting ``cronbus`` imports: the command line loads a command's module when that command
runs, and ``import cronbus`` loads a public name's module when it is first used, so a command
pays for itself only (every test and script that runs ``cronbus ...`` pays its start-up).

The guards count modules, not seconds: a timing would fail on a busy machine, while a web
framework or a PostgreSQL driver back on the import path of ``cronbus --help`` is a plain fact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import cronbus
from cronbus.cli import COMMANDS
from cronbus.cli import cronbus as cli_group
from cronbus.cli.lazy import LazyCommand, LazyGroup

# The HTTP API's, the client's and PostgreSQL's packages: no command on a SQLite store needs one.
WEB_AND_POSTGRES = {"fastapi", "uvicorn", "starlette", "pydantic", "httpx", "aiohttp", "psycopg"}
# What opening a store costs: `cronbus --help` and `cronbus --version` open none.
STORE_SIDE = {"cronbus.app", "cronbus.store", "cronbus.services", "asyncio", "rich"}
DEADLINE_SECONDS = 60


def imported_by(*args: str, cwd: Path | None = None) -> tuple[set[str], str]:
    """The modules ``python -m cronbus ARGS`` imports (from ``-X importtime``), and its stdout."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("CRONBUS_URL", None)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cronbus", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        env=env,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = {
        line.split("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "cronbus.cli" in modules  # the parse read the report: the checks below are not vacuous
    return modules, done.stdout


def roots(modules: set[str]) -> set[str]:
    """Each module's top-level package, and cronbus's subpackages by their own names."""
    found = {name.split(".")[0] for name in modules}
    found |= {".".join(name.split(".")[:2]) for name in modules if name.startswith("cronbus.")}
    return found


@pytest.mark.parametrize("args", [("--help",), ("--version",)])
def test_help_and_version_import_no_app_store_or_server(args: tuple[str, ...]) -> None:
    modules, out = imported_by(*args)
    assert out.startswith(("Usage: cronbus", "cronbus, version"))
    assert roots(modules) & (WEB_AND_POSTGRES | STORE_SIDE) == set()


def test_importing_the_cli_imports_no_app_store_or_server() -> None:
    heavy = sorted(WEB_AND_POSTGRES | STORE_SIDE)
    code = (
        "import sys, cronbus.cli\n"
        f"heavy = {heavy!r}\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_a_resource_command_on_sqlite_imports_no_web_or_postgres_package(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cronbus.db'}"
    made = CliRunner().invoke(cli_group, ["migrate", "--store", url], prog_name="cronbus")
    assert made.exit_code == 0, made.output
    modules, out = imported_by("runs", "list", "--json", "--store", url, cwd=tmp_path)
    assert out.strip() == "[]"
    assert "cronbus.store.sqlite" in modules  # it did open the store
    assert roots(modules) & WEB_AND_POSTGRES == set()
    # Only the runs commands' module of the command line, not every command's.
    assert {"cronbus.cli.roles", "cronbus.cli.jobs", "cronbus.cli.subs"} & modules == set()


def test_import_cronbus_imports_its_public_names_on_first_use() -> None:
    code = (
        "import sys, cronbus\n"
        "before = sorted(m for m in sys.modules if m.startswith('cronbus'))\n"
        "from cronbus import App\n"
        "print(before, 'cronbus.app' in sys.modules, App.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        check=True,
    )
    assert done.stdout.split() == ["['cronbus',", "'cronbus._version']", "True", "cronbus.app"]


def test_every_public_name_has_a_source_and_dir_lists_them() -> None:
    assert set(cronbus._SOURCES) | {"__version__"} == set(cronbus.__all__)
    assert set(cronbus.__all__) <= set(dir(cronbus))
    for name, source in cronbus._SOURCES.items():
        assert getattr(cronbus, name).__module__ == f"cronbus{source}", name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        cronbus.Nope  # type: ignore[attr-defined]  # noqa: B018


# -- the lazy command table ----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_commands_own_short_help(name: str) -> None:
    entry = COMMANDS[name]
    command = entry.load()
    assert command.name == name
    assert not command.hidden
    assert not command.deprecated
    stand_in = click.Command(name, help=entry.summary)
    for limit in (20, 45, 60, 80, 1000):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), limit


def test_the_table_holds_every_command() -> None:
    assert list(cli_group.commands) == list(COMMANDS)
    # Every command is in the table: a few that came late, and the first ones.
    assert {"server", "worker", "runs", "connectors", "top"} <= set(cli_group.commands)


def lazy_group(table: dict[str, LazyCommand]) -> click.Group:
    @click.group(cls=LazyGroup, table=table)
    def group() -> None:
        """A group for the test."""

    return group


def test_the_groups_help_lists_commands_without_importing_them() -> None:
    group = lazy_group({"ghost": LazyCommand(".no_such_module", "ghost", "Haunt the store.")})
    result = CliRunner().invoke(group, ["--help"])
    assert result.exit_code == 0, result.output
    assert "  ghost  Haunt the store." in result.output


def test_running_a_command_whose_module_is_missing_fails_loudly() -> None:
    group = lazy_group({"ghost": LazyCommand(".no_such_module", "ghost", "Haunt the store.")})
    result = CliRunner().invoke(group, ["ghost"])
    assert isinstance(result.exception, ModuleNotFoundError)


def test_an_entry_that_names_no_command_is_refused() -> None:
    with pytest.raises(TypeError, match="not a click command"):
        LazyCommand(".loading", "APP_HELP", "Not a command.").load()


def test_an_unknown_command_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(cli_group, ["runz"], prog_name="cronbus")
    assert result.exit_code == 1
    # The suggestion reads the names from the table, importing nothing.
    assert "No such command 'runz'. Did you mean 'runs'?" in result.output
