"""``cronbus api`` and ``cronbus server`` serve the HTTP API: the URL printed once listening
(port 0 picks a free one), health and readiness over real HTTP, a clean stop on SIGTERM, and a
port in use refused in one line before anything starts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

TESTS = Path(__file__).resolve().parents[1]
URL = re.compile(r"cronbus API listening on (http://127\.0\.0\.1:\d+)")


@contextmanager
def command(*args: str, cwd: Path = TESTS) -> Iterator[subprocess.Popen[str]]:
    """``cronbus ARGS`` as a child process, stopped (SIGTERM, then SIGKILL) however the block
    ends."""
    env = {
        **os.environ,
        "CRONBUS_API_RATE": "100000",
        "CRONBUS_API_AUTH_FAILURE_BURST": "100000",
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "cronbus", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)


def url_of(child: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The URL the command prints once it listens."""
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        found = URL.search(line)
        if found:
            return found[1]
        if not line and child.poll() is not None:
            raise AssertionError(
                f"exited {child.returncode}: {child.stderr and child.stderr.read()}"
            )
    raise AssertionError("no URL printed")


def wait_ready(url: str, timeout: float = 60.0) -> httpx.Response:
    """Poll ``/v1/ready`` until it answers 200."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(f"{url}/v1/ready", timeout=5)
            if response.status_code == 200:
                return response
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("not ready in time")
        time.sleep(0.05)


def stop(child: subprocess.Popen[str]) -> int:
    child.send_signal(signal.SIGTERM)
    return child.wait(timeout=60)


def test_cronbus_api_serves_until_sigterm(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'api.db'}"
    with command("api", "--store", store, "--port", "0") as child:
        url = url_of(child)
        assert wait_ready(url).json()["status"] == "ready"
        assert httpx.get(f"{url}/v1/health").json()["status"] == "ok"
        assert httpx.get(f"{url}/v1/runs").status_code == 401
        assert stop(child) == 0


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = str(taken.getsockname()[1])
    try:
        with command("api", "--store", f"sqlite:///{tmp_path / 'a.db'}", "--port", port) as child:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 1
            lines = err.strip().splitlines()
            assert len(lines) == 1
            assert lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}")
    finally:
        taken.close()


def test_cronbus_server_serves_the_api_beside_every_role(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'server.db'}"
    args = ("server", "--app", "apps.worker_app", "--store", store, "--api-port", "0")
    with command(*args) as child:
        url = url_of(child)
        wait_ready(url)
        assert httpx.get(f"{url}/openapi.json").json()["info"]["title"] == "cronbus"
        assert stop(child) == 0


def test_cronbus_server_without_the_api(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'server.db'}"
    args = ("server", "--app", "apps.worker_app", "--store", store, "--no-api")
    with command(*args) as child:
        assert child.stderr is not None
        deadline = time.monotonic() + 60
        # The roles log once they run; then stop it and check it never listened.
        while "started" not in child.stderr.readline():
            assert time.monotonic() < deadline
        assert stop(child) == 0
        assert child.stdout is not None
        assert "listening" not in child.stdout.read()
