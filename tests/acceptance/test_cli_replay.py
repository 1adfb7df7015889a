"""Acceptance (both stores): the data loss of issue #9 item 1, replayed with the real CLI.

A topic with 3 events; `cronbus subs replay SUB --from 500` used to print "cursor moved from 0
to 499", and the next 2 events were never delivered while `subs show` said lag 0. Now the
cursor stops at the topic's end with a message, the next events count as lag, and a real
dispatcher process delivers them to a webhook on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from contract.pg import pg_store_url

DEADLINE_SECONDS = 30.0
APP_SOURCE = "from cronbus import App\n\napp = App()\n"


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one store."""

    cwd: Path
    url: str
    env: dict[str, str]

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cronbus", *args, "--store", self.url]

    def ok(self, *args: str) -> str:
        """Run ``cronbus ARGS --store URL``; check it succeeded quietly; return its stdout."""
        done = subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))


@pytest.fixture(params=["sqlite", "postgres"])
async def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    """The command line on a fresh SQLite file or PostgreSQL schema."""
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 't.db'}"
    return Cli(tmp_path, url, env)


@dataclass
class Receiver:
    """A webhook receiver on loopback: the CloudEvents it was sent, in arrival order."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def offsets(self) -> list[int]:
        with self.lock:
            return [int(event["offset"]) for event in self.received]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    target = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            with target.lock:
                target.received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    target.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield target
    finally:
        server.shutdown()
        server.server_close()


def publish(cli: Cli, count: int) -> None:
    for _ in range(count):
        cli.ok("events", "publish", "orders", "--type", "order.created", "--data", "{}")


def test_a_replay_past_the_end_loses_nothing(cli: Cli, receiver: Receiver) -> None:
    publish(cli, 3)
    cli.ok("subs", "add", "hook", "--topic", "orders", "--webhook", receiver.url, "--start",
           "earliest")  # fmt: skip

    said = cli.ok("subs", "replay", "hook", "--from", "500")

    assert "the topic ends at offset 3; cursor moved to 3" in said
    publish(cli, 2)
    shown = cli.json("subs", "show", "hook")
    assert (shown["cursor"], shown["topic_end"], shown["lag"]) == (3, 5, 2)
    assert "lag 2" in cli.ok("subs", "show", "hook")

    dispatcher = subprocess.Popen(
        cli.command("dispatcher", "--app", "myapp:app"),
        cwd=cli.cwd,
        env=cli.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while len(receiver.offsets()) < 2 and dispatcher.poll() is None:
            assert time.monotonic() < deadline, "the events after the replay were not delivered"
            time.sleep(0.05)
    finally:
        dispatcher.send_signal(signal.SIGTERM)
        _, errors = dispatcher.communicate(timeout=DEADLINE_SECONDS)
    assert sorted(receiver.offsets()) == [4, 5], errors
    after = cli.json("subs", "show", "hook")
    assert (after["cursor"], after["lag"]) == (5, 0)


def test_a_replay_from_a_future_time_stops_at_the_end_too(cli: Cli) -> None:
    publish(cli, 3)
    cli.ok("subs", "add", "hook", "--topic", "orders", "--task", "ship", "--start", "earliest")
    future = f"@{time.time() + 86_400:.0f}"

    said = cli.ok("subs", "replay", "hook", "--from", future)

    assert "no event of orders was published at or after" in said
    assert "cursor moved to 3, the topic's end" in said
    replayed = cli.json("subs", "replay", "hook", "--from", "2")
    assert (replayed["cursor"], replayed["lag"], replayed["clamped"]) == (1, 2, False)
    clamped = cli.json("subs", "replay", "hook", "--from", "500")
    assert (clamped["cursor"], clamped["previous_cursor"], clamped["clamped"]) == (3, 1, True)
    publish(cli, 2)
    assert cli.json("subs", "show", "hook")["lag"] == 2
