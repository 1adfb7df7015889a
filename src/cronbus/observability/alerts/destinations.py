"""Sending notices: a signed JSON webhook, an email over SMTP, a Slack-compatible chat message.

:class:`Sender` sends one :class:`Notice` to one :class:`~.records.Destination` and returns
None when it arrived, else why not; it never raises for a destination's failure, so the
evaluator can tell the other destinations and retry this one at its next evaluation.

Webhooks are signed as event deliveries are (Standard Webhooks headers from
:mod:`cronbus.events.signing`; receivers check them with :func:`cronbus.webhooks.verify`), the
notice's id is the ``webhook-id`` (the same on every retry of one notice: the receiver's
idempotency key), and the network policy of webhooks applies (``CRONBUS_WEBHOOK_DENY``...).
Redirects are not followed, as for event deliveries. Email goes through the stdlib's
:mod:`smtplib` on a thread (one message per notice, to every recipient of the destination).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import smtplib
import time
from dataclasses import dataclass
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...events.netpolicy import NetPolicy, literal_address
from ...events.signing import webhook_headers
from .records import Destination, DestinationKind, NoticeKind
from .settings import AlertSettings

if TYPE_CHECKING:
    import aiohttp

ERROR_LENGTH = 300
"""Characters of a failure's description kept in the history."""
_WORDS = {
    NoticeKind.FIRED: "FIRING",
    NoticeKind.REPEATED: "STILL FIRING",
    NoticeKind.RESOLVED: "RESOLVED",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """What one alert says at one moment: it fired, still holds, or resolved."""

    rule: str
    kind: str
    """The rule's kind (``queue-depth``...)."""
    namespace: str
    subject: str
    notice: NoticeKind
    message: str
    since: float
    """When the alert started to fire."""
    at: float
    """When this notice was decided (the same on every retry of it)."""

    @property
    def id(self) -> str:
        """A stable id of this notice (the webhook's ``webhook-id``)."""
        text = f"{self.namespace}|{self.rule}|{self.subject}|{self.notice}|{self.at!r}"
        return "alert_" + hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def title(self) -> str:
        """A one-line summary: ``[cronbus] FIRING queue-depth-emails (emails)``."""
        subject = "" if self.subject == "*" else f" ({self.subject})"
        where = "" if self.namespace == "default" else f" [{self.namespace}]"
        return f"[cronbus] {_WORDS[self.notice]} {self.rule}{subject}{where}"

    def document(self) -> dict[str, Any]:
        """The webhook's JSON body."""
        return {
            "type": f"cronbus.alert.{self.notice.value}",
            "id": self.id,
            "rule": self.rule,
            "kind": self.kind,
            "namespace": self.namespace,
            "subject": self.subject,
            "state": "resolved" if self.notice is NoticeKind.RESOLVED else "firing",
            "message": self.message,
            "since": _iso(self.since),
            "at": _iso(self.at),
        }

    def text(self) -> str:
        """The notice as plain text (the chat message, the email's body)."""
        return (
            f"{self.title}\n{self.message}\n"
            f"firing since {_iso(self.since)}; this notice at {_iso(self.at)}"
        )


class Sender:
    """Sends notices; one HTTP session for every webhook and chat (open it with ``async
    with``)."""

    def __init__(self, settings: AlertSettings, policy: NetPolicy | None = None) -> None:
        self.settings = settings
        self.policy = policy if policy is not None else NetPolicy.from_env()
        self._client: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Sender:
        import aiohttp

        from ...events.resolvers import FilteringResolver

        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=FilteringResolver(self.policy)),
            timeout=aiohttp.ClientTimeout(total=self.settings.alert_send_seconds),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def send(self, destination: Destination, notice: Notice) -> str | None:
        """Send ``notice``; None when it arrived, else what went wrong (never raises for the
        destination's failure)."""
        try:
            if destination.kind is DestinationKind.EMAIL:
                return await self._email(destination, notice)
            if destination.kind is DestinationKind.CHAT:
                body = json.dumps({"text": notice.text()}).encode()
                return await self._post(destination, body, {"content-type": "application/json"})
            return await self._webhook(destination, notice)
        except Exception as exc:  # a destination's failure must not stop the others
            return f"{type(exc).__name__}: {exc}"[:ERROR_LENGTH]

    async def _webhook(self, destination: Destination, notice: Notice) -> str | None:
        body = json.dumps(notice.document(), separators=(",", ":")).encode()
        headers = {"content-type": "application/json"}
        if destination.secrets:
            # Wall-clock time: the receiver checks the timestamp against its own clock.
            headers.update(webhook_headers(list(destination.secrets), notice.id, time.time(), body))
        else:
            headers["webhook-id"] = notice.id
        return await self._post(destination, body, headers)

    async def _post(
        self, destination: Destination, body: bytes, headers: dict[str, str]
    ) -> str | None:
        import aiohttp

        url = destination.url or ""
        address = literal_address(urlsplit(url).hostname or "")
        if address is not None and not self.policy.allows(address):
            return f"the address {address} is in a denied network (see CRONBUS_WEBHOOK_ALLOW)"
        if self._client is None:
            raise RuntimeError("the sender is not open: use `async with Sender(...)`")
        try:
            async with self._client.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                await response.content.read(512)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # aiohttp may quote the URL, whose path or query may hold a credential.
            text = f"{type(exc).__name__}: {exc}".replace(url, destination.label)
            return text[:ERROR_LENGTH]
        return None if 200 <= status < 300 else f"HTTP {status}"

    async def _email(self, destination: Destination, notice: Notice) -> str | None:
        message = EmailMessage()
        message["Subject"] = notice.title
        message["From"] = destination.sender or self.settings.smtp_from
        message["To"] = ", ".join(destination.to)
        message["Message-ID"] = f"<{notice.id}@cronbus>"
        message.set_content(notice.text() + "\n")
        await asyncio.to_thread(self._smtp, destination, message)
        return None

    def _smtp(self, destination: Destination, message: EmailMessage) -> None:
        settings = self.settings
        host = destination.host or settings.smtp_host
        port = destination.port or settings.smtp_port
        starttls = settings.smtp_starttls if destination.starttls is None else destination.starttls
        username = destination.username or settings.smtp_user
        password = destination.password or settings.smtp_password
        with smtplib.SMTP(host, port, timeout=settings.alert_send_seconds) as smtp:
            if starttls:
                smtp.starttls()
            if username:
                smtp.login(username, password or "")
            smtp.send_message(message)


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat().replace("+00:00", "Z")
