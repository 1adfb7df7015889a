"""A minimal, fast webhook receiver for the delivery benchmark, run as its own process.

It runs in a process of its own so that its CPU never competes inside the dispatcher's event
loop, nor inside the benchmark's loop that times the publish calls. It speaks just enough
HTTP/1.1 for httpx (keep-alive, ``Content-Length`` bodies) on an :class:`asyncio.Protocol`
(no stream objects, one ``write`` per answer), and records each request's path, its
``webhook-id`` header (the event id) and its arrival time (``time.time()``: the same machine
clock as the benchmark's, so publish-to-arrival latency can be taken across processes).

Paths starting with ``/slow`` answer 200 after ``--slow`` seconds; every other path answers 200
at once. ``GET /_arrivals?path=/x`` returns the arrivals of ``/x`` as JSON
``[[event_id, time], ...]`` (and forgets them); ``GET /_count?path=/x`` returns how many came.

It prints ``ready <port>`` once it listens, and stops on SIGTERM. :class:`HttpProcess` is the
parent side.

Example: ``python bench/_http.py --slow 1.0``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from _common import worker_env
from _subprocess import ChildProcess
from _worker import _die_with_parent

HTTP_SCRIPT = __file__
_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class Arrivals:
    """What came in, per path: (event id, arrival time)."""

    def __init__(self) -> None:
        self.by_path: dict[str, list[tuple[str, float]]] = defaultdict(list)

    def take(self, path: str) -> list[tuple[str, float]]:
        """The arrivals of ``path``, forgotten here."""
        return self.by_path.pop(path, [])


class Receiver(asyncio.Protocol):
    """One connection: parses requests as they come and answers each one.

    httpx sends one request at a time on a connection (no pipelining), so a slow answer
    simply goes out later.
    """

    def __init__(self, arrivals: Arrivals, slow: float) -> None:
        self.arrivals = arrivals
        self.slow = slow
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            method, target, _ = head[0].split(" ", 2)
            self._answer(method, target, headers.get("webhook-id", ""))

    def _answer(self, method: str, target: str, event_id: str) -> None:
        parts = urlsplit(target)
        if method == "GET" and parts.path in ("/_arrivals", "/_count"):
            wanted = dict(parse_qsl(parts.query)).get("path", "")
            if parts.path == "/_count":
                body = str(len(self.arrivals.by_path.get(wanted, []))).encode()
            else:
                body = json.dumps(self.arrivals.take(wanted)).encode()
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\n\r\n"
            self._send(head.encode() + body)
            return
        self.arrivals.by_path[parts.path].append((event_id, time.time()))
        if parts.path.startswith("/slow") and self.slow > 0:
            asyncio.get_running_loop().call_later(self.slow, self._send, _OK)
        else:
            self._send(_OK)

    def _send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(args: argparse.Namespace) -> None:
    """Listen on loopback, print ``ready <port>``, serve until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    arrivals = Arrivals()
    server = await loop.create_server(
        lambda: Receiver(arrivals, args.slow), "127.0.0.1", args.port, backlog=1024
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"ready {port}\n")
    sys.stdout.flush()
    await stop.wait()
    server.close()


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    parser.add_argument(
        "--slow", type=float, default=1.0, help="seconds /slow* paths wait before answering"
    )
    parser.add_argument(
        "--parent", type=int, default=0, help="pid of the benchmark; exit when it dies"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse the options and serve."""
    args = build_parser().parse_args(argv)
    _die_with_parent(args.parent)
    asyncio.run(serve(args))


# -- the parent side -----------------------------------------------------------------------------
class HttpProcess(ChildProcess):
    """The receiver as a subprocess: ``url(path)`` for targets, ``arrivals(path)`` to read."""

    def __init__(self, *, slow: float = 1.0) -> None:
        command = [sys.executable, HTTP_SCRIPT, "--slow", str(slow)]
        super().__init__("http receiver", command, env=worker_env())
        self.port = 0

    def on_ready(self, line: str) -> None:
        """``ready <port>``."""
        self.port = int(line.split()[1])

    def url(self, path: str) -> str:
        """The URL of ``path``."""
        return f"http://127.0.0.1:{self.port}{path}"

    def arrivals(self, path: str) -> list[tuple[str, float]]:
        """The (event id, arrival time) of every request to ``path`` so far (then forgotten)."""
        return [(str(i), float(t)) for i, t in self._get("/_arrivals", path)]

    def count(self, path: str) -> int:
        """How many requests to ``path`` came so far."""
        return int(self._get("/_count", path))

    def _get(self, what: str, path: str) -> Any:
        import urllib.request  # only the parent reads
        from urllib.parse import urlencode

        with urllib.request.urlopen(f"{self.url(what)}?{urlencode({'path': path})}") as answer:
            return json.loads(answer.read())


if __name__ == "__main__":
    main()
