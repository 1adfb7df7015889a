"""Tasks with observable effects, for tests that run real workers."""

from __future__ import annotations

import asyncio
import os
import time

from cronbus import App, Retry, current_token

app = App()


def _append(path: str, line: str) -> None:
    # O_APPEND writes of one short line are atomic, even from several processes.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@app.task
def noop() -> None:
    """Does nothing."""


@app.task
def record(n: int, path: str, pause: float = 0.0) -> int:
    """Append ``n`` to ``path`` (one line per execution), then pause."""
    _append(path, str(n))
    if pause:
        time.sleep(pause)
    return n


@app.task
def started_then_sleep(path: str, seconds: float) -> str:
    """Say it started, then sleep (for drains)."""
    _append(path, "started")
    time.sleep(seconds)
    return "slept"


@app.task(timeout=0.3)
def busy_loop(seconds: float) -> None:
    """Spin in Python bytecode: only an exception raised in its thread stops it."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@app.task(timeout=0.3)
def polite_wait(path: str, seconds: float) -> None:
    """Wait on the cancel token and note when it fires."""
    if current_token().wait(seconds):
        _append(path, f"token:{current_token().reason}")


@app.task(timeout=0.3)
async def async_sleep(seconds: float) -> str:
    """Sleep on the event loop."""
    await asyncio.sleep(seconds)
    return "woke"


@app.task(timeout=2.0, isolation="process")  # spawn start-up counts, and CI is busy
def process_sleep(path: str, seconds: float) -> None:
    """Sleep in a child process; writes its pid first."""
    _append(path, str(os.getpid()))
    time.sleep(seconds)


@app.task
def wait_for_cancel(path: str, seconds: float) -> str:
    """Run until cancelled (through the token)."""
    _append(path, "started")
    if current_token().wait(seconds):
        _append(path, "cancelled")
        return "cancelled"
    return "finished"


@app.task(retries=Retry(retries=2, backoff=10.0, factor=3.0, jitter=0.0))
def always_fails(message: str) -> None:
    """Raise every time."""
    raise ValueError(message)


@app.task
def chatty(lines: int) -> int:
    """Print and log ``lines`` lines."""
    import logging

    logger = logging.getLogger("apps.chatty")
    for i in range(lines):
        print(f"line {i}")
        logger.warning("record %d", i)
    return lines
