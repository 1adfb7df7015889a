"""Acceptance: ``cronbus connectors`` as real subprocesses on an SQLite store: create (idempotent,
conflicting, from a file), list, show, pause, resume, stop, restart, remove and dead records,
every bad input refused in one line, and a ``cronbus worker`` moving a JSON lines file through
a topic into another file.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acceptance.test_cli_namespaces import Cli, cli

__all__ = ["cli"]  # fixtures

DEADLINE_SECONDS = 60.0


@pytest.fixture(autouse=True)
def allowed(cli: Cli, tmp_path: Path) -> None:
    """The operator lets file connectors use the test's folder."""
    cli.env["CRONBUS_CONNECTOR_FILES"] = str(tmp_path)


def test_a_connector_is_created_once_commanded_and_removed(cli: Cli, tmp_path: Path) -> None:
    sink = json.dumps({"topic": "orders", "path": str(tmp_path / "out.jsonl")})
    said = cli.ok("connectors", "add", "out", "--kind", "file-sink", "--config", sink)
    assert said.strip() == "connector out created: 1 task(s), file-sink -> orders"
    again = cli.json("connectors", "add", "out", "--kind", "file-sink", "--config", sink)
    assert again["created"] is False
    assert again["tasks"][0]["state"] == "unassigned"
    other = json.dumps({"topic": "orders", "path": str(tmp_path / "elsewhere.jsonl")})
    refused = cli.refused("connectors", "add", "out", "--kind", "file-sink", "--config", other)
    assert "exists" in refused, refused
    source = {"topic": "orders", "path": str(tmp_path / "in.jsonl")}
    (tmp_path / "in.json").write_text(json.dumps(source))
    from_file = cli.json(
        "connectors", "add", "in", "--kind", "file-source", "--config", f"@{tmp_path / 'in.json'}"
    )
    assert (from_file["created"], from_file["direction"]) == (True, "source")
    assert from_file["config"]["poll_seconds"] == 1.0  # the kind's defaults are filled in

    listed = cli.json("connectors", "list")
    assert [c["name"] for c in listed] == ["in", "out"]
    shown = cli.json("connectors", "show", "out")
    assert (shown["kind"], shown["topic"], shown["tolerance"]) == ("file-sink", "orders", "none")
    assert shown["tasks"][0]["lag"] == 0

    assert cli.json("connectors", "pause", "out")["state"] == "paused"
    assert cli.json("connectors", "resume", "out")["state"] == "unassigned"
    assert cli.json("connectors", "stop", "out")["state"] == "stopped"
    assert cli.ok("connectors", "restart", "out", "--task", "0").strip() == (
        "connector out: unassigned"
    )
    assert "task must be between 0 and 0, got 3" in cli.refused(
        "connectors", "restart", "out", "--task", "3"
    )
    assert cli.ok("connectors", "remove", "out").strip() == "connector out removed"
    assert "no connector named 'out'" in cli.refused("connectors", "show", "out")
    assert cli.ok("connectors", "list").startswith("NAME")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--kind", "no-such", "--config", '{"topic": "t"}'], "unknown connector kind 'no-such'"),
        (["--kind", "file-sink", "--config", "{nope"], "--config: not JSON"),
        (["--kind", "file-sink", "--config", "[1]"], "--config: must be a JSON object"),
        (["--kind", "file-sink", "--config", '{"path": "/tmp/x"}'], "config.topic"),
        (["--kind", "file-sink", "--config", '{"topic": "t"}'], "config.path"),
        (["--kind", "file-sink", "--config", "@/no/such/file.json"], "cannot read it"),
        (
            ["--kind", "file-sink", "--config", '{"topic": "t", "path": "/x"}', "--tasks", "0"],
            "max_tasks",
        ),
    ],
    ids=["unknown kind", "not json", "not an object", "no topic", "no path", "no file", "tasks"],
)
def test_bad_input_is_one_line_and_stores_nothing(cli: Cli, args: list[str], expected: str) -> None:
    assert expected in cli.refused("connectors", "add", "bad", *args)
    assert cli.ok("connectors", "list").strip() == "no connectors"


def test_a_worker_moves_a_file_through_a_topic_into_another_file(cli: Cli, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    rows = [json.dumps({"n": n}) for n in range(1, 201)]
    rows[49] = "{not json"  # the 50th line is bad: a dead record, the rest goes on
    source.write_text("\n".join(rows) + "\n")
    target = tmp_path / "out.jsonl"
    cli.ok(
        "connectors", "add", "in", "--kind", "file-source", "--tolerance", "all",
        "--config", json.dumps({"topic": "lines", "path": str(source), "poll_seconds": 0.1}),
    )  # fmt: skip
    cli.ok(
        "connectors", "add", "out", "--kind", "file-sink",
        "--config", json.dumps({"topic": "lines", "path": str(target)}),
    )  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "cronbus", "worker", "--app", "myapp:app", "--store", cli.store],
        cwd=cli.cwd,
        env={**cli.env, "CRONBUS_POLL_SECONDS": "0.2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            shown = cli.json("connectors", "show", "out")
            if shown["tasks"][0]["lag"] == 0 and shown["topic_end"] == 199:
                break
            assert worker.poll() is None, worker.communicate()[1]
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        source_view = cli.json("connectors", "show", "in")
        assert source_view["tasks"][0]["worker"] is not None
        assert (source_view["tasks"][0]["delivered"], source_view["tasks"][0]["dead"]) == (199, 1)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=DEADLINE_SECONDS)
    assert worker.returncode == 0, err
    written = [json.loads(line) for line in target.read_text().splitlines()]
    assert [e["data"]["n"] for e in written] == [n for n in range(1, 201) if n != 50]
    assert all(e["specversion"] == "1.0" and e["topic"] == "lines" for e in written)
    dead = cli.json("connectors", "dead", "in")
    assert len(dead) == 1
    assert dead[0]["record"]["data"]["line"] == "{not json"
    assert "line at byte" in dead[0]["error"]
    # A stopped worker gives its tasks back at once.
    after = cli.json("connectors", "show", "in")
    assert (after["tasks"][0]["state"], after["tasks"][0]["worker"]) == ("unassigned", None)


def test_a_file_outside_the_allowed_folders_is_refused_in_one_line(
    cli: Cli, tmp_path: Path
) -> None:
    outside = json.dumps({"topic": "orders", "path": "/etc/passwd"})
    refused = cli.refused("connectors", "add", "in", "--kind", "file-source", "--config", outside)
    assert "config.path: '/etc/passwd' is outside the directories" in refused, refused
    dotted = json.dumps({"topic": "orders", "path": f"{tmp_path}/../../etc/passwd"})
    refused = cli.refused("connectors", "add", "in", "--kind", "file-source", "--config", dotted)
    assert "must not contain '..'" in refused, refused
    inside = json.dumps({"topic": "orders", "path": str(tmp_path / "in.jsonl")})
    unset = {k: v for k, v in cli.env.items() if k != "CRONBUS_CONNECTOR_FILES"}
    add = ("connectors", "add", "in", "--kind", "file-source", "--config", inside)
    off = cli.run(*add, env=unset)
    assert (off.returncode, off.stderr.count("\n")) == (1, 1), off
    assert "CRONBUS_CONNECTOR_FILES" in off.stderr, off
    assert cli.ok("connectors", "list").strip() == "no connectors"
