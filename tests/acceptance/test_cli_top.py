"""Acceptance: ``cronbus top`` as a subprocess on a real SQLite store.

``--once`` prints one frame (or the figures as JSON): the queues with their depths and oldest
age, the dead runs, the subscriptions. The live view is driven under a pseudo-terminal and read
until it has drawn its frame twice, then stopped with Ctrl-C, which ends it with status 0.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cronbus import App
from cronbus.services import Services
from cronbus.services.views import SubscriptionInput
from cronbus.testing import run_until_idle_async

DEADLINE = 30.0


@pytest.fixture
async def url(tmp_path: Path) -> str:
    """A store holding 3 queued runs in `emails`, 1 in `reports` and 1 dead run of `boom`."""
    url = f"sqlite:///{tmp_path / 'top.db'}"
    app = App(store=url)

    @app.task(queue="emails")
    def send(to: str) -> None:
        """Never run here."""

    @app.task(queue="reports")
    def report() -> None:
        """Never run here."""

    @app.task(queue="chores")
    def boom() -> None:
        raise RuntimeError("broken on purpose")

    async with app:
        hook = SubscriptionInput(name="orders-hook", topic="orders", webhook="http://127.0.0.1:9/h")
        await Services(app).subscriptions.create(hook)
        await boom.defer_async()
        await run_until_idle_async(app, queues=["chores"], raise_errors=False)
        for to in ("a", "b", "c"):
            await send.defer_async(to)
        await report.defer_async()
        await app.publish_async("orders", type="order.created", data={"id": 1})
    return url


def cronbus(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    return subprocess.run(
        [sys.executable, "-m", "cronbus", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE,
        check=False,
    )


def test_once_prints_queues_subscriptions_and_dead_runs(url: str) -> None:
    done = cronbus("top", "--once", "--store", url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    emails = next(line for line in lines if "emails" in line)
    assert emails.split("│")[2].strip() == "3"  # QUEUED
    assert any("reports" in line for line in lines)
    assert any("orders-hook" in line for line in lines)
    assert any("RuntimeError" in line and "boom" in line for line in lines)
    assert "dead letters 1" in done.stdout


def test_once_json_gives_the_figures(url: str) -> None:
    done = cronbus("top", "--once", "--json", "--store", url)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    queues = {q["queue"]: q for q in figures["queues"]}
    assert queues["emails"]["queued"] == 3
    assert queues["reports"]["queued"] == 1
    assert queues["emails"]["oldest_age"] >= 0
    assert queues["emails"]["rate"] is None  # one frame: no rate yet
    assert figures["dead_letters"] == 1
    assert [run["task"] for run in figures["dead_runs"]] == [figures["dead_runs"][0]["task"]]
    assert figures["dead_runs"][0]["state"] == "dead"
    (sub,) = figures["subscriptions"]
    assert (sub["name"], sub["lag"]) == ("orders-hook", 1)


def test_bad_uses_get_clear_errors(url: str, tmp_path: Path) -> None:
    alone = cronbus("top", "--json", "--store", url)
    assert alone.returncode == 1
    assert "--json prints one set of figures" in alone.stderr
    remote = cronbus("top", "--once", "--url", "http://127.0.0.1:9")
    assert remote.returncode == 1
    assert "not --url" in remote.stderr
    missing = cronbus("top", "--once", "--store", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.returncode == 1
    assert "no such store" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    fast = cronbus("top", "--interval", "0.01", "--store", url)
    assert fast.returncode == 1
    assert "--interval" in fast.stderr


def test_live_view_redraws_and_quits_on_ctrl_c(url: str) -> None:
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronbus", "top", "--interval", "0.2", "--store", url],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        # faulthandler: a view that does not stop is made to print where it is (SIGABRT).
        env={**env, "COLUMNS": "120", "LINES": "60", "PYTHONFAULTHANDLER": "1"},
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + DEADLINE
    try:
        # Each redraw prints the queue table again: wait for at least two frames.
        while seen.count(b"QUEUED") < 2 and time.monotonic() < deadline:
            seen += _read_some(leader)
        assert seen.count(b"QUEUED") >= 2, seen.decode(errors="replace")
        assert b"emails" in seen
        proc.send_signal(signal.SIGINT)
        # Keep reading while it stops: a redraw into a full terminal buffer blocks the view
        # (and its exit) until someone reads, as a real terminal always does.
        deadline = time.monotonic() + DEADLINE
        while proc.poll() is None and time.monotonic() < deadline:
            _read_some(leader)
        if proc.poll() is None:
            proc.send_signal(signal.SIGABRT)
            stacks = b"".join(_read_some(leader) for _ in range(50)).decode(errors="replace")
            raise AssertionError(f"still running {DEADLINE} s after Ctrl-C; its threads:\n{stacks}")
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)


def _read_some(fd: int) -> bytes:
    """What the terminal's other end wrote within 0.1 s (b"" if nothing, or once it closed)."""
    ready, _, _ = select.select([fd], [], [], 0.1)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: every process closed its end of the terminal
        return b""
