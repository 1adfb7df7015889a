"""Shared pieces of the alert tests: real receivers on loopback (an aiohttp server for the
webhook and the chat destinations, an aiosmtpd server for email), an app on a real SQLite file
or PostgreSQL schema with a fake clock, and an engine driven by ``evaluate_once``."""

from __future__ import annotations

import contextlib
import email
import email.message
import email.policy
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiosmtpd.controller import Controller

from contract.pg import pg_store_url
from cronbus import App
from cronbus.config import Settings
from cronbus.observability.alerts import Destination, chat, webhook
from cronbus.observability.alerts import email as email_to
from cronbus.observability.alerts.engine import AlertEngine
from cronbus.observability.alerts.settings import AlertSettings
from cronbus.testing import FakeClock
from cronbus.webhooks import verify

T0 = 1_800_000_000.0
SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ="
STORES = ("sqlite", "postgres")


@dataclass
class Posted:
    """One request the HTTP receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        """The JSON body."""
        doc: dict[str, Any] = json.loads(self.body)
        return doc


@dataclass
class Receiver:
    """An aiohttp server on 127.0.0.1 recording every POST; paths in ``failing`` answer 500."""

    posted: list[Posted] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)
    port: int = 0
    _runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        """The URL of ``path`` here."""
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, path: str) -> list[Posted]:
        """What ``path`` received (answered or not), in order."""
        return [p for p in self.posted if p.path == path]

    async def start(self) -> None:
        """Listen on a free loopback port."""
        application = web.Application()
        application.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(application)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        """Close the server."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.posted.append(Posted(request.path, dict(request.headers), await request.read()))
        return web.Response(status=500 if request.path in self.failing else 204)


class Mailbox:
    """What an aiosmtpd server on 127.0.0.1 received, as parsed messages."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        """Keep the message."""
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, email.message.EmailMessage)
        self.messages.append(parsed)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 OK"


def free_port() -> int:
    """A free TCP port on loopback (aiosmtpd's controller needs one named)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Rig:
    """An app with a fake clock, receivers, the three destinations and an engine."""

    app: App
    clock: FakeClock
    receiver: Receiver
    mailbox: Mailbox
    engine: AlertEngine

    @property
    def destinations(self) -> list[Destination]:
        """A signed webhook at /hook, a chat at /chat and an email to ops@example.com."""
        return [
            webhook(self.receiver.url("/hook"), secret=SECRET),
            chat(self.receiver.url("/chat")),
            email_to("ops@example.com"),
        ]

    async def evaluate(self, advance: float = 0.0) -> None:
        """Move the clock, then evaluate once."""
        self.clock.advance(advance)
        await self.engine.evaluate_once(self.clock.now())

    def told(self) -> tuple[list[dict[str, Any]], list[str], list[email.message.EmailMessage]]:
        """What the three receivers got so far: verified webhook bodies, chat texts, mails."""
        hooks = [
            verify(p.body, p.headers, SECRET, now=float(p.headers["webhook-timestamp"]))
            for p in self.receiver.on("/hook")
        ]
        texts = [p.json["text"] for p in self.receiver.on("/chat")]
        return hooks, texts, list(self.mailbox.messages)


@contextlib.asynccontextmanager
async def rig_on(store: str) -> AsyncIterator[Rig]:
    """A :class:`Rig` on the store URL ``store``."""
    clock = FakeClock(T0)
    app = App(store=store, clock=clock, settings=Settings(lease_seconds=3.0))

    @app.task(name="flaky", queue="work")
    def flaky() -> None:
        raise ValueError("boom")

    receiver, mailbox = Receiver(), Mailbox()
    await receiver.start()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings = AlertSettings(smtp_host="127.0.0.1", smtp_port=port, smtp_from="cronbus@test")
    try:
        async with app:
            yield Rig(app, clock, receiver, mailbox, AlertEngine(app, settings=settings))
    finally:
        controller.stop()
        await receiver.stop()


@pytest.fixture(params=STORES, name="rig")
async def rig_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    """A :class:`Rig` on a fresh SQLite file or PostgreSQL schema."""
    url = f"sqlite:///{tmp_path / 'alerts.db'}"
    if request.param == "postgres":
        url = await pg_store_url(request)
    async with rig_on(url) as made:
        yield made
