"""Real worker processes started through the CLI, and ways to watch the store they share."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent


class Workers:
    """Starts ``cronbus worker`` subprocesses and makes sure none outlives the test."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        *,
        concurrency: int = 8,
        queues: str = "default",
        args: Sequence[str] = (),
        **env: str,
    ) -> subprocess.Popen[bytes]:
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            **env,
        }
        log = open(self.logs / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115 - outlives this call
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cronbus",
                "worker",
                "--app",
                "apps.worker_app:app",
                "--store",
                self.url,
                "--concurrency",
                str(concurrency),
                "--queues",
                queues,
                *args,
            ],
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def workers(sqlite_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker subprocesses on the test's SQLite file, all killed at the end."""
    pool = Workers(sqlite_url, tmp_path)
    try:
        yield pool
    finally:
        pool.stop_all()


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds, failing after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait for a process to exit without blocking the loop; its exit code."""
    await until(lambda: _exited(proc), timeout)
    return int(proc.returncode)


async def _exited(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is not None
