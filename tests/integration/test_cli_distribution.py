"""The command line of distribution on a real SQLite file, through Click's runner: ``runs show``
prints a run's route, labels, limit keys and parent, and a parent's counters, first children
and the command that lists the rest; ``runs children`` pages by index; ``workers list`` ends
with the tasks no live worker knows; ``jobs add/update --broadcast/--shards``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from cronbus import App
from cronbus.cli import cronbus
from cronbus.model import FanOut, FanOutKind, NewRun, WorkerInfo

T = TypeVar("T")
SHARDS = 25
APP = "apps.api_app:app"
"""The app whose tasks ``jobs add`` names (``noop``...)."""


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A fresh SQLite store, migrated."""
    found = f"sqlite:///{tmp_path / 'cli.db'}"
    on_store(found, lambda app: asyncio.sleep(0))
    return found


def on_store(url: str, work: Callable[[App], Awaitable[T]]) -> T:
    """``work(app)`` with an app open on the store, on a loop of its own (the CLI runs its
    own loops: the tests are plain functions)."""

    async def main() -> T:
        async with App(store=url) as app:
            return await work(app)

    return asyncio.run(main())


def cli(*args: str) -> Result:
    """``cronbus ARGS`` through Click's runner; fails the test on a non-zero exit."""
    result = CliRunner().invoke(cronbus, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result


def defer(url: str, *runs: NewRun) -> list[int]:
    """Store ``runs`` as the store's defer does; their ids."""

    async def work(app: App) -> list[int]:
        now = app.clock.now()
        done = await app.store.defer([run_at(run, now) for run in runs], now)
        return [d.id for d in done]

    return on_store(url, work)


def run_at(run: NewRun, now: float) -> NewRun:
    """``run`` due at ``now``."""
    return replace(run, eta=now)


def new(task: str = "noop", **fields: Any) -> NewRun:
    """A run of ``task`` in ``default`` with ``fields`` (due when stored)."""
    return NewRun(task=task, queue="default", eta=0.0, **fields)


def register(url: str, worker_id: str, tasks: tuple[str, ...]) -> None:
    """A live worker serving every queue, knowing ``tasks``."""

    async def work(app: App) -> None:
        now = app.clock.now()
        info = WorkerInfo(
            id=worker_id,
            host="h",
            pid=1,
            queues=("*",),
            concurrency=2,
            version="t",
            started_at=now,
            heartbeat_at=now,
            tasks=tasks,
            lease_seconds=300.0,
        )
        await app.store.register_worker(info)

    on_store(url, work)


def test_runs_show_a_parent_with_its_first_children(url: str) -> None:
    (parent,) = defer(url, new(fanout=FanOut(kind=FanOutKind.SHARDS, shards=SHARDS)))
    text = cli("runs", "show", str(parent), "--store", url).output
    assert f"waiting for children: 0 of {SHARDS} ended, 0 succeeded" in text
    assert "warning:" not in text  # a parent waits for its children by design
    assert f"children: 0 of {SHARDS} ended, 0 succeeded (shards)" in text
    assert f"showing 20 of {SHARDS} children: cronbus runs children {parent} --after 19" in text
    assert [int(row[0]) for row in child_rows(text)] == list(range(20))

    document = json.loads(cli("runs", "show", str(parent), "--json", "--store", url).output)
    assert document["state"] == "waiting"
    assert document["fanout"] == {
        "kind": "shards",
        "total": SHARDS,
        "ended": 0,
        "succeeded": 0,
        "reduce_run_id": None,
        "note": "",
    }
    assert [c["child_index"] for c in document["children"]] == list(range(20))
    assert document["warnings"] == [f"waiting for children: 0 of {SHARDS} ended, 0 succeeded"]


def test_runs_show_a_child_names_its_parent_and_why_it_waits(url: str) -> None:
    (parent,) = defer(url, new(fanout=FanOut(kind=FanOutKind.SHARDS, shards=4)))
    children = json.loads(cli("runs", "children", str(parent), "--json", "--store", url).output)
    child = children[3]
    assert (child["parent_id"], child["child_index"], child["shard_total"]) == (parent, 3, 4)
    text = cli("runs", "show", str(child["id"]), "--store", url).output
    (line,) = [line for line in fields_of(text) if line.startswith("parent")]
    assert line.split(None, 1)[1].strip() == f"{parent} (index 3 of 4)"
    assert "warning: no live worker serves queue 'default'" in text


def test_runs_show_route_labels_and_limit_keys(url: str) -> None:
    register(url, "w1", ("noop",))
    routed = new(
        route="hash",
        route_key="acme",
        target_worker="w1",
        route_labels=("gpu",),
        limit_key="default:noop",
        limit_max=2,
        rate_key="default:noop:acme",
        rate_max=10,
        rate_period=60.0,
    )
    plain, routed_id = defer(url, new(), routed)
    text = cli("runs", "show", str(routed_id), "--store", url).output
    fields = {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in fields_of(text)}
    assert fields["route"] == "hash"
    assert fields["target worker"] == "w1"
    assert fields["labels"] == "gpu"
    assert fields["limit key"] == "default:noop"
    assert fields["rate key"] == "default:noop:acme"
    # The one live worker carries no label gpu: that is why the run waits.
    assert "warning: needs labels gpu: no live worker" in text
    document = json.loads(cli("runs", "show", str(routed_id), "--json", "--store", url).output)
    assert (document["route"], document["route_labels"]) == ("hash", ["gpu"])
    assert (document["limit_key"], document["rate_key"]) == ("default:noop", "default:noop:acme")
    # A run on the shared queue prints no route, and waits for nothing in particular.
    text = cli("runs", "show", str(plain), "--store", url).output
    assert not any(line.startswith(("route", "labels", "limit key")) for line in fields_of(text))
    assert "warning" not in text


def child_rows(text: str) -> list[list[str]]:
    """The rows of a children table: INDEX, ID, TASK, STATE..."""
    rows = [line.split() for line in text.splitlines()]
    return [row for row in rows if len(row) > 3 and row[0].isdigit() and row[3] == "queued"]


def fields_of(text: str) -> list[str]:
    """The lines of ``runs show`` that are fields (``name  value``)."""
    return [line for line in text.splitlines()[1:] if "  " in line and line[:1].isalpha()]


def test_runs_children_pages_by_index(url: str) -> None:
    (parent,) = defer(url, new(fanout=FanOut(kind=FanOutKind.SHARDS, shards=SHARDS)))
    listed = json.loads(cli("runs", "children", str(parent), "--json", "--store", url).output)
    assert [c["child_index"] for c in listed] == list(range(SHARDS))
    after = cli("runs", "children", str(parent), "--after", "19", "--json", "--store", url)
    assert [c["child_index"] for c in json.loads(after.output)] == list(range(20, SHARDS))
    few = cli("runs", "children", str(parent), "--limit", "5", "--json", "--store", url)
    assert [c["child_index"] for c in json.loads(few.output)] == list(range(5))
    text = cli("runs", "children", str(parent), "--after", "22", "--store", url).output
    assert f"children: 0 of {SHARDS} ended, 0 succeeded (shards)" in text
    assert [int(row[0]) for row in child_rows(text)] == [23, 24]
    (lone,) = defer(url, new())
    text = cli("runs", "children", str(lone), "--store", url).output
    assert f"run {lone} has no children" in text


def test_runs_children_of_an_unknown_run_fails(url: str) -> None:
    result = CliRunner().invoke(cronbus, ["runs", "children", "999", "--store", url])
    assert result.exit_code != 0
    assert "no run has id 999" in result.output


def test_workers_list_ends_with_the_tasks_no_live_worker_knows(url: str) -> None:
    defer(url, new("noop"), new("send"), new("add"))
    register(url, "w1", ("send",))
    text = cli("workers", "list", "--store", url).output
    lines = text.strip().splitlines()
    assert lines[-2:] == [
        "no worker knows task add (runs waiting)",
        "no worker knows task noop (runs waiting)",
    ]
    assert "w1" in text
    register(url, "w2", ("noop", "add"))
    assert "no worker knows" not in cli("workers", "list", "--store", url).output
    # The JSON listing stays a list of workers.
    listed = json.loads(cli("workers", "list", "--json", "--store", url).output)
    assert sorted(w["id"] for w in listed) == ["w1", "w2"]


def test_jobs_take_broadcast_and_shards(url: str) -> None:
    where = ("--app", APP, "--store", url)
    cli("jobs", "add", "fan", "--task", "noop", "--every", "60", "--broadcast", *where)
    shown = json.loads(cli("jobs", "show", "fan", "--json", "--store", url).output)
    assert (shown["broadcast"], shown["shards"]) == (True, None)
    assert "broadcast: one child run per live worker" in cli("jobs", "show", "fan", *where).output

    refused = CliRunner().invoke(
        cronbus, ["jobs", "update", "fan", "--shards", "4", *where], env={"COLUMNS": "200"}
    )
    assert refused.exit_code != 0
    assert "not both" in refused.output
    cli("jobs", "update", "fan", "--no-broadcast", "--shards", "4", *where)
    shown = json.loads(cli("jobs", "show", "fan", "--json", "--store", url).output)
    assert (shown["broadcast"], shown["shards"]) == (False, 4)
    assert "4 shards" in cli("jobs", "show", "fan", "--store", url).output
    cli("jobs", "update", "fan", "--shards", "0", *where)
    shown = json.loads(cli("jobs", "show", "fan", "--json", "--store", url).output)
    assert (shown["broadcast"], shown["shards"]) == (False, None)

    too_many = CliRunner().invoke(
        cronbus, ["jobs", "add", "big", "--task", "noop", "--every", "60", "--shards", "10001"]
    )
    assert too_many.exit_code != 0
    assert "10001 is not in the range 0<=x<=10000" in too_many.output


def test_defer_makes_a_parent_of_shards(url: str) -> None:
    made = cli("defer", "noop", "--shards", "3", "--json", "--app", APP, "--store", url)
    parent = json.loads(made.output)["id"]
    document = json.loads(cli("runs", "show", str(parent), "--json", "--store", url).output)
    assert (document["state"], document["fanout"]["total"]) == ("waiting", 3)
    assert [c["child_index"] for c in document["children"]] == [0, 1, 2]
