"""Acceptance: the resource commands through a server (``--url``, ``--token``) print what they
print on the store itself.

One ``cronbus api`` runs on 127.0.0.1 (a free port) over one SQLite store for the whole module;
each command runs twice, once with ``--store`` and once with ``--url``, and the two outputs
must be the same, byte for byte. Refusals by the server (401, 403, 404) come back as the
one-line ``error: ...`` the local commands print, with exit status 1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="add")
def add(a: int, b: int) -> int:
    return a + b


@app.task(name="send_email", queue="emails")
def send_email(to: str) -> str:
    return f"sent to {to}"
"""
pytestmark = [
    pytest.mark.timeout(600),  # the first test also starts and seeds the server
    # One worker runs the module: each worker given a test of it would start its own server
    # (about 20 s on a busy machine).
    pytest.mark.xdist_group("cli_remote"),
]
_LISTEN = ("--host", "127.0.0.1")
DEADLINE_SECONDS = 60.0
"""The machine running the suite may be busy: a command or a server start gets this long."""


@dataclass(frozen=True)
class Server:
    """A ``cronbus api`` on one store, and the command line to drive both."""

    cwd: Path
    store: str
    url: str
    admin: str
    env: dict[str, str]

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

    def local(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``cronbus ARGS`` on the store itself."""
        return self.run(*args, "--store", self.store)

    def remote(self, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        """``cronbus ARGS`` through the server, with the admin token unless told."""
        return self.run(*args, "--url", self.url, "--token", token or self.admin)

    def ok(self, done: subprocess.CompletedProcess[str]) -> str:
        """The stdout of a command that succeeded."""
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    """Poll /v1/health until it answers 200, the server dies, or the deadline passes."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"cronbus api exited with status {process.returncode}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.05)
    raise AssertionError(f"cronbus api did not answer /v1/health within {DEADLINE_SECONDS} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A migrated store with an admin token, served by ``cronbus api`` on a free port."""
    cwd = tmp_path_factory.mktemp("remote")
    (cwd / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    env["CRONBUS_CONNECTOR_FILES"] = str(cwd)  # the operator allows the folder's files
    store = f"sqlite:///{cwd / 'remote.db'}"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    setup = Server(cwd, store, url, "", env)
    setup.ok(setup.run("migrate", "--store", store))
    created = json.loads(
        setup.ok(setup.local("tokens", "create", "--scope", "admin", "--namespace", "*", "--json"))
    )
    command = ["api", "--app", "myapp", "--store", store, *_LISTEN, "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "cronbus", *command],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_healthy(url, process)
        yield Server(cwd, store, url, created["token"], env)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def seeded(server: Server) -> Server:
    """Runs, a job, a topic with an event and a subscription, all made through the server."""
    server.ok(server.remote("defer", "add", "--args", "[1, 2]"))
    server.ok(server.remote("defer", "send_email", "--kwargs", '{"to": "ada"}'))
    server.ok(
        server.remote(
            "jobs",
            "add",
            "nightly",
            "--task",
            "add",
            "--args",
            "[1, 2]",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Paris",
        )
    )
    server.ok(server.remote("events", "publish", "orders", "--type", "order.paid", "--data", "{}"))
    server.ok(server.remote("subs", "add", "mail", "--topic", "orders", "--task", "send_email"))
    return server


SAME_OUTPUT = (
    ("runs", "list"),
    ("runs", "list", "--json"),
    ("runs", "list", "--state", "queued", "--task", "add"),
    ("runs", "show", "1"),
    ("runs", "show", "2", "--json"),
    ("jobs", "list"),
    ("jobs", "list", "--json"),
    ("jobs", "show", "nightly", "--json"),
    ("jobs", "next", "nightly", "-n", "3"),
    ("events", "topics", "--json"),
    ("events", "tail", "orders", "--json"),
    ("events", "retention", "orders"),
    ("subs", "list", "--json"),
    ("subs", "show", "mail", "--json"),
    ("subs", "deliveries", "mail"),
    ("dlq", "list", "--json"),
    ("workers", "list", "--json"),
    ("namespaces", "list", "--json"),
)


@pytest.mark.parametrize("argv", SAME_OUTPUT, ids=" ".join)
def test_a_command_prints_the_same_through_the_server_as_on_the_store(
    seeded: Server, argv: tuple[str, ...]
) -> None:
    local, remote = seeded.local(*argv), seeded.remote(*argv)

    assert (remote.returncode, remote.stderr) == (0, "")
    assert seeded.ok(local) != ""
    assert remote.stdout == local.stdout


def test_changes_made_through_the_server_are_in_the_store(seeded: Server) -> None:
    created = json.loads(seeded.ok(seeded.remote("defer", "add", "--args", "[2, 3]", "--json")))
    run_id = str(created["id"])

    assert seeded.ok(seeded.remote("runs", "cancel", run_id)).strip() == f"run {run_id}: cancelled"
    assert json.loads(seeded.ok(seeded.local("runs", "show", run_id, "--json")))["state"] == (
        "cancelled"
    )
    assert seeded.ok(seeded.remote("runs", "retry", run_id)).strip() == f"run {run_id}: queued"
    assert "paused" in seeded.ok(seeded.remote("jobs", "pause", "nightly"))
    assert json.loads(seeded.ok(seeded.local("jobs", "show", "nightly", "--json")))["paused"]
    assert "resumed" in seeded.ok(seeded.remote("jobs", "resume", "nightly"))
    assert not json.loads(seeded.ok(seeded.local("jobs", "show", "nightly", "--json")))["paused"]


ERRORS = {
    "unknown run": (("runs", "show", "999"), "error: no run has id 999"),
    "unknown job": (("jobs", "pause", "nope"), "error: no job named 'nope'"),
    "retry a queued run": (("runs", "retry", "1"), "error: run 1 is queued"),
    "unknown subscription": (("subs", "show", "nope"), "error: no subscription named 'nope'"),
    "purge an unknown run": (
        ("dlq", "purge", "999", "--yes"),
        "error: not purged: no run has id 999",
    ),
    "drain an unknown worker": (("workers", "drain", "w9"), "error: no worker has id 'w9'"),
}


@pytest.mark.parametrize(("argv", "start"), ERRORS.values(), ids=ERRORS.keys())
def test_a_refusal_reads_the_same_through_the_server(
    seeded: Server, argv: tuple[str, ...], start: str
) -> None:
    local, remote = seeded.local(*argv), seeded.remote(*argv)

    assert (local.returncode, remote.returncode) == (1, 1)
    assert local.stderr.startswith(start), local.stderr
    assert remote.stderr == local.stderr
    assert remote.stdout == local.stdout


def _refused(done: subprocess.CompletedProcess[str], start: str) -> None:
    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.startswith(start), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_without_a_token_or_with_a_wrong_one_the_server_refuses_in_one_line(
    server: Server,
) -> None:
    no_token = server.run("runs", "list", "--url", server.url)
    wrong = server.remote("runs", "list", token="cb_000000000000_nope")

    _refused(no_token, "error: unauthorized: ")
    assert "token" in no_token.stderr
    _refused(wrong, "error: unauthorized: ")


def test_a_token_beyond_its_scope_or_namespace_is_forbidden(server: Server) -> None:
    server.ok(server.local("namespaces", "create", "shop"))
    reader = json.loads(
        server.ok(
            server.remote("tokens", "create", "--scope", "read", "--namespace", "default", "--json")
        )
    )["token"]
    shop = json.loads(
        server.ok(
            server.remote("tokens", "create", "--scope", "write", "--namespace", "shop", "--json")
        )
    )["token"]

    assert server.ok(server.remote("runs", "list", token=reader)) != ""
    _refused(server.remote("defer", "add", "--args", "[1, 2]", token=reader), "error: forbidden: ")
    _refused(server.remote("tokens", "list", token=shop), "error: forbidden: ")
    _refused(
        server.remote("runs", "list", "--namespace", "default", token=shop), "error: forbidden: "
    )
    # Without --namespace the server acts in the token's only namespace, which is empty.
    assert server.ok(server.remote("runs", "list", token=shop)).strip() == "no runs"


def test_a_revoked_token_is_refused(server: Server) -> None:
    created = json.loads(
        server.ok(server.local("tokens", "create", "--scope", "read", "--namespace", "*", "--json"))
    )
    assert server.remote("runs", "list", token=created["token"]).returncode == 0

    server.ok(server.remote("tokens", "revoke", created["id"]))

    _refused(server.remote("runs", "list", token=created["token"]), "error: unauthorized: ")


def test_a_server_that_does_not_answer_is_one_line(server: Server) -> None:
    done = server.run("runs", "list", "--url", f"http://127.0.0.1:{_free_port()}", "--token", "x")

    _refused(done, "error: cannot reach the cronbus API at http://127.0.0.1:")


def test_url_and_store_on_one_command_line_are_refused(server: Server) -> None:
    done = server.run("runs", "list", "--url", server.url, "--store", server.store)

    _refused(done, "error: --url works through a server")


def test_a_token_from_the_environment_is_used(server: Server) -> None:
    env = {**server.env, "CRONBUS_URL": server.url, "CRONBUS_TOKEN": server.admin}

    done = server.run("namespaces", "list", "--json", env=env)

    assert done.returncode == 0, done.stderr
    assert "default" in [ns["name"] for ns in json.loads(done.stdout)]


def test_job_definitions_read_the_same_through_the_server(seeded: Server) -> None:
    at = ("--at", "2031-05-01T12:00:00", "--tz", "Europe/Paris")  # naive: read in --tz
    window = ("--every", "600", "--start", "2031-01-01T00:00:00", "--end", "2032-01-01T00:00")
    local = seeded.local(
        "jobs", "add", "once_l", "--app", "myapp", "--task", "add", "--args", "[1, 2]", *at
    )
    remote = seeded.remote("jobs", "add", "once_r", "--task", "add", "--args", "[1, 2]", *at)
    assert seeded.ok(remote).replace("once_r", "once_l") == seeded.ok(local)
    changes = ("--kwargs", "{}", *window, "--child", "nightly")
    local = seeded.local("jobs", "update", "once_l", "--app", "myapp", *changes)
    remote = seeded.remote("jobs", "update", "once_r", *changes)
    assert seeded.ok(remote).replace("once_r", "once_l") == seeded.ok(local)
    shown = [
        json.loads(seeded.ok(seeded.local("jobs", "show", name, "--json")))
        for name in ("once_l", "once_r")
    ]
    for job in shown:
        for key in ("id", "name", "created_at", "updated_at", "runs"):
            job.pop(key)
    assert shown[0] == shown[1]
    assert shown[0]["children"] == ["nightly"]


def test_replay_and_requeue_read_the_same_through_the_server(seeded: Server) -> None:
    seeded.ok(seeded.local("subs", "replay", "mail", "--from", "2"))  # cursor at the end, 1
    remote = seeded.ok(seeded.remote("subs", "replay", "mail", "--from", "1"))
    seeded.ok(seeded.local("subs", "replay", "mail", "--from", "2"))  # back at 1
    local = seeded.ok(seeded.local("subs", "replay", "mail", "--from", "1"))
    assert remote == local
    assert "cursor moved from 1 to 0" in remote
    local = seeded.local("dlq", "requeue", "1", "2")
    remote = seeded.remote("dlq", "requeue", "1", "2")
    assert (remote.returncode, remote.stdout, remote.stderr) == (
        local.returncode,
        local.stdout,
        local.stderr,
    )
    assert remote.stderr.startswith("error: not requeued: run 1 is ")


def test_a_store_on_the_command_line_beats_cronbus_url(server: Server) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    env = {**server.env, "CRONBUS_URL": dead, "CRONBUS_TOKEN": "x"}

    local = server.run("namespaces", "list", "--json", "--store", server.store, env=env)
    remote = server.run("namespaces", "list", "--json", env=env)

    assert local.returncode == 0, local.stderr
    _refused(remote, f"error: cannot reach the cronbus API at {dead}")


CONNECTOR_OUTPUT = (
    ("connectors", "list"),
    ("connectors", "list", "--json"),
    ("connectors", "show", "out"),
    ("connectors", "show", "out", "--json"),
    ("connectors", "dead", "out", "--json"),
)


def test_connectors_read_the_same_through_the_server(seeded: Server) -> None:
    config = json.dumps({"topic": "orders", "path": str(seeded.cwd / "out.jsonl")})
    add = ("connectors", "add", "out", "--kind", "file-sink", "--config", config, "--json")
    created = json.loads(seeded.ok(seeded.remote(*add)))
    assert (created["created"], created["state"]) == (True, "unassigned")
    assert json.loads(seeded.ok(seeded.local(*add)))["created"] is False
    for argv in CONNECTOR_OUTPUT:
        local, remote = seeded.local(*argv), seeded.remote(*argv)
        assert (remote.returncode, remote.stderr) == (0, ""), argv
        assert remote.stdout == seeded.ok(local), argv

    assert seeded.ok(seeded.remote("connectors", "pause", "out")).strip() == "connector out: paused"
    shown = json.loads(seeded.ok(seeded.local("connectors", "show", "out", "--json")))
    assert shown["state"] == "paused"
    bad = ("connectors", "add", "bad", "--kind", "file-sink", "--config", '{"topic": "orders"}')
    for argv in (
        bad,
        ("connectors", "show", "nope"),
        ("connectors", "restart", "out", "--task", "3"),
    ):
        local, remote = seeded.local(*argv), seeded.remote(*argv)
        assert (local.returncode, remote.returncode) == (1, 1), argv
        assert remote.stderr == local.stderr, argv
    assert (
        seeded.ok(seeded.remote("connectors", "remove", "out")).strip() == "connector out removed"
    )
    assert seeded.ok(seeded.local("connectors", "list")).strip() == "no connectors"
