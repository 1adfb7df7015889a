"""Real HTTP servers on loopback for webhook tests: fast, slow, failing, flaky, 429 and 410.

One asyncio server speaks enough HTTP/1.1 (keep-alive, Content-Length bodies) for the webhook
client; each path picks a behaviour, and every request is recorded with the time it arrived.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int

    @property
    def event(self) -> dict[str, Any]:
        """The CloudEvents document that was posted."""
        doc: dict[str, Any] = json.loads(self.body)
        return doc


Behaviour = Callable[["Received"], "tuple[int, dict[str, str], float]"]


@dataclass
class Targets:
    """A loopback server; ``url(path)`` gives a target, ``received[path]`` what came in."""

    host: str = "127.0.0.1"
    port: int = 0
    received: dict[str, list[Received]] = field(default_factory=lambda: defaultdict(list))
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    _server: asyncio.AbstractServer | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def url(self, path: str) -> str:
        """The URL of ``path`` on this server."""
        return f"http://{self.host}:{self.port}{path}"

    def on(self, path: str, behaviour: Behaviour) -> str:
        """Answer ``path`` with ``behaviour(request) -> (status, headers, delay)``."""
        self.behaviours[path] = behaviour
        return self.url(path)

    def ids(self, path: str, status: int = 200) -> list[str]:
        """Event ids received on ``path`` and answered with ``status``, in arrival order."""
        return [r.event["id"] for r in self.received[path] if r.status == status]

    async def start(self) -> None:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the server and its connections."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):  # Python 3.11 has no Server.close_clients()
                writer.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = raw.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Received(path, headers, body, time.monotonic(), 200)
                behaviour = self.behaviours.get(path, ok)
                status, extra, delay = behaviour(request)
                request.status = status
                self.received[path].append(request)
                if delay:
                    await asyncio.sleep(delay)
                reply = f"status {status}".encode()
                head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(reply)}"]
                head += [f"{k}: {v}" for k, v in extra.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + reply)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()


def ok(request: Received) -> tuple[int, dict[str, str], float]:
    """200 at once."""
    return 200, {}, 0.0


def slow(seconds: float) -> Behaviour:
    """200 after ``seconds``."""
    return lambda request: (200, {}, seconds)


def status(code: int, headers: dict[str, str] | None = None) -> Behaviour:
    """Always ``code``."""
    return lambda request: (code, dict(headers or {}), 0.0)


def flaky(failures: int, code: int = 500, headers: dict[str, str] | None = None) -> Behaviour:
    """``code`` for the first ``failures`` requests of each event, then 200."""
    seen: dict[str, int] = defaultdict(int)

    def behave(request: Received) -> tuple[int, dict[str, str], float]:
        event_id = request.event["id"]
        seen[event_id] += 1
        if seen[event_id] <= failures:
            return code, dict(headers or {}), 0.0
        return 200, {}, 0.0

    return behave


class Switch:
    """Fails with 503 until ``healthy`` is set; counts the requests it got while failing."""

    def __init__(self) -> None:
        self.healthy = False
        self.failed = 0

    def __call__(self, request: Received) -> tuple[int, dict[str, str], float]:
        if self.healthy:
            return 200, {}, 0.0
        self.failed += 1
        return 503, {}, 0.0
