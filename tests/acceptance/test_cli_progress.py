"""Acceptance: progress bars of long commands (``migrate``, ``jobs sync``, ``dlq requeue``,
``subs replay``), the real command line run as subprocesses.

A bar is drawn on stderr only when stderr is a terminal (a pseudo-terminal here) and the
command was not asked for ``--json``; what goes to stdout is the same either way, so scripts
and pipes see what they saw before bars existed.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")

DEADLINE_SECONDS = 60.0
JOBS = 1_500
"""Code jobs: more than one batch of a sync (1,000)."""
DEAD = 600
"""Dead runs: more than one batch of a requeue (500)."""
APP_SOURCE = f"""
from cronbus import App

app = App()


@app.task(name="fail", retries=0)
def fail(n: int) -> None:
    raise ValueError("no")


@app.task(name="tick")
def tick() -> None:
    pass


for i in range({JOBS}):
    app.job(name=f"tick.{{i:04d}}", every=60)(tick)
"""


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit status, stdout, and what reached stderr."""

    status: int
    out: str
    err: str


def _env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    return {**clean, "TERM": "xterm-256color", "COLUMNS": "100", "PYTHONUNBUFFERED": "1"}


def plain(cwd: Path, *args: str) -> Ran:
    """``cronbus ARGS`` with stdout and stderr piped (not a terminal)."""
    done = subprocess.run(
        [sys.executable, "-m", "cronbus", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def on_terminal(cwd: Path, *args: str) -> Ran:
    """``cronbus ARGS`` with stderr on a pseudo-terminal (100 columns) and stdout piped."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "cronbus", *args],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    err = bytearray()
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            err += chunk
        assert process.stdout is not None
        with process.stdout:
            out = process.stdout.read().decode()
        status = process.wait(timeout=DEADLINE_SECONDS)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return Ran(status, out, err.decode(errors="replace"))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the app and a store holding dead runs and a subscription with events
    (the code jobs are left for ``jobs sync`` to write)."""
    folder = tmp_path_factory.mktemp("progress")
    (folder / "progapp.py").write_text(APP_SOURCE)
    asyncio.run(_seed(folder))
    return folder


async def _seed(folder: Path) -> None:
    sys.path.insert(0, str(folder))
    try:
        import progapp  # type: ignore[import-not-found]

        from cronbus import App
        from cronbus.testing import run_until_idle_async
    finally:
        sys.path.remove(str(folder))
    app: App = progapp.app
    app.use_store(f"sqlite:///{folder / 'seed.db'}")
    async with app:
        await app.get_task("fail").defer_many_async([[n] for n in range(DEAD)])
        await run_until_idle_async(app, raise_errors=False)
        await app.subscriptions.add("orders-task", topic="orders", task="tick")
        for n in range(20):
            await app.publish_async("orders", "order.created", {"n": n})


def copy(seeded: Path, tmp_path: Path, name: str) -> Path:
    """A folder of its own holding the app and a copy of the seeded store as ``cronbus.db``
    (stdout names the store, so both runs of a comparison use the same relative path)."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(seeded / "progapp.py", folder / "progapp.py")
    shutil.copy(seeded / "seed.db", folder / "cronbus.db")
    return folder


def same_stdout(a: Ran, b: Ran, *folders: Path) -> None:
    """Both ran fine and printed the same, folder names aside."""
    assert a.status == 0, a.err
    assert b.status == 0, b.err
    texts = [a.out, b.out]
    for folder in folders:
        texts = [t.replace(str(folder), "FOLDER") for t in texts]
    texts = [_TIME.sub("TIME", t) for t in texts]  # a replay's updated_at is its own
    assert texts[0] == texts[1]


COMMANDS = {
    "migrate": (("migrate", "--store", "sqlite:///fresh.db"), "migrating"),
    "jobs sync": (("jobs", "sync", "--app", "progapp:app"), "syncing jobs"),
    "dlq requeue --all": (("dlq", "requeue", "--all"), "requeueing dead letters"),
    "dlq requeue ids": (
        ("dlq", "requeue", *(str(n) for n in range(1, DEAD + 1))),
        "requeueing dead letters",
    ),
    "subs replay": (("subs", "replay", "orders-task", "--from", "1"), "replaying"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_terminal_sees_a_bar_and_stdout_is_unchanged(
    seeded: Path, tmp_path: Path, command: str
) -> None:
    args, label = COMMANDS[command]
    piped, drawn = copy(seeded, tmp_path, "piped"), copy(seeded, tmp_path, "drawn")
    quiet = plain(piped, *args)
    shown = on_terminal(drawn, *args)
    same_stdout(quiet, shown, piped, drawn)
    assert quiet.err == ""  # off a terminal: nothing extra
    assert label in shown.err, shown.err
    assert "\x1b[" in shown.err  # drawn with the terminal's escapes, then cleared


@pytest.mark.parametrize("command", list(COMMANDS))
def test_json_on_a_terminal_has_no_bar(seeded: Path, tmp_path: Path, command: str) -> None:
    args, _ = COMMANDS[command]
    piped, drawn = copy(seeded, tmp_path, "piped"), copy(seeded, tmp_path, "drawn")
    quiet = plain(piped, *args, "--json")
    shown = on_terminal(drawn, *args, "--json")
    same_stdout(quiet, shown, piped, drawn)
    assert shown.err == ""
    json.loads(shown.out)  # one document


def test_the_commands_did_their_work(seeded: Path, tmp_path: Path) -> None:
    # The batched commands give the results the single calls gave: every dead run requeued,
    # every code job written (two batches each).
    folder = copy(seeded, tmp_path, "work")
    requeued = json.loads(on_terminal(folder, "dlq", "requeue", "--all", "--json").out)
    assert requeued["count"] == DEAD
    assert sorted(requeued["requeued"]) == list(range(1, DEAD + 1))
    synced = json.loads(on_terminal(folder, "jobs", "sync", "--app", "progapp:app", "--json").out)
    assert len(synced["added"]) == JOBS
    again = plain(folder, "jobs", "sync", "--app", "progapp:app")
    assert again.out == "jobs up to date: nothing to change\n"
