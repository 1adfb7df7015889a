"""Where deliveries go: webhooks, tasks (event → run) and in-process handlers.

A target pushes one event and reports what happened as a :class:`PushResult`; it never raises
for the target's own failures, and it never decides about retries: the dispatcher does, from
the result and the subscription's policy.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from ..errors import InvalidArgumentError, UnknownTaskError
from ..model import NewRun
from .event import Event
from .pacing import retry_after
from .records import Delivery, EventRecord, SubscriptionSpec, TargetKind
from .signing import decode_secrets, webhook_headers

if TYPE_CHECKING:
    from ..app import App

SNIPPET = 512
"""Characters of a target's response kept with each attempt."""

Handler = Callable[[Event], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class PushResult:
    """What one push did."""

    ok: bool
    status: int | None = None
    response: str | None = None
    error: str | None = None
    retry_after: float | None = None
    """Seconds the target asked to wait (``Retry-After`` of a 429 or 503)."""
    gone: bool = False
    """The target said it no longer exists (HTTP 410): the subscription is disabled."""


class Target(Protocol):
    """Pushes events of one subscription."""

    async def push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """Push one event; report the outcome instead of raising."""
        ...


def to_event(record: EventRecord) -> Event:
    """The user-facing :class:`Event` of a stored event (its data decoded)."""
    return Event(
        id=record.id,
        source=record.source,
        type=record.type,
        time=record.time,
        subject=record.subject,
        datacontenttype=record.datacontenttype,
        data=record.data,
        key=record.key,
        topic=record.topic,
        offset=record.offset,
        published_at=record.published_at,
    )


def check_target(target: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a target definition, returning it normalised, or raise saying what is wrong."""
    kind = target.get("kind")
    if kind == TargetKind.WEBHOOK:
        url = target.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"a webhook target needs an http(s) url, not {url!r}")
        headers = target.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise InvalidArgumentError("webhook headers must map names to text values")
        secrets = target.get("secrets") or []
        if isinstance(secrets, str):
            secrets = [secrets]
        if secrets:
            decode_secrets(list(secrets))  # raises InvalidArgumentError for a malformed secret
        return {"kind": kind, "url": url, "headers": dict(headers), "secrets": list(secrets)}
    if kind == TargetKind.TASK:
        task = target.get("task")
        if not isinstance(task, str) or not task:
            raise InvalidArgumentError(f"a task target needs a task name, not {task!r}")
        queue = target.get("queue")
        if queue is not None and not isinstance(queue, str):
            raise InvalidArgumentError(f"a task target's queue must be text, not {queue!r}")
        return {"kind": kind, "task": task, "queue": queue}
    if kind == TargetKind.HANDLER:
        handler = target.get("handler")
        if not isinstance(handler, str) or not handler:
            raise InvalidArgumentError(f"a handler target needs a handler name, not {handler!r}")
        return {"kind": kind, "handler": handler}
    known = ", ".join(k.value for k in TargetKind)
    raise InvalidArgumentError(f"unknown target kind {kind!r} (known: {known})")


class WebhookTarget:
    """POSTs the CloudEvents JSON, signed as Standard Webhooks define it; 2xx acknowledges."""

    def __init__(self, client: aiohttp.ClientSession, target: Mapping[str, Any]) -> None:
        self.client = client
        self.url: str = target["url"]
        self.headers: dict[str, str] = dict(target.get("headers") or {})
        self.secrets: list[str] = list(target.get("secrets") or [])

    async def push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """POST the event; the event id is the ``webhook-id``, the receiver's idempotency key."""
        body = json.dumps(to_event(event).to_cloudevent(), separators=(",", ":")).encode()
        headers = {"content-type": "application/cloudevents+json", **self.headers}
        if self.secrets:
            headers.update(webhook_headers(self.secrets, event.id, _now(), body))
        else:
            headers["webhook-id"] = event.id
        try:
            async with self.client.post(self.url, data=body, headers=headers) as response:
                status = response.status
                # A snippet is enough; a longer body closes the connection instead of being read.
                raw = await response.content.read(SNIPPET)
                asked = response.headers.get("retry-after")
        except (aiohttp.ClientError, OSError) as exc:
            return PushResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:SNIPPET])
        snippet = raw.decode("utf-8", "replace") if raw else None
        if 200 <= status < 300:
            return PushResult(ok=True, status=status, response=snippet)
        return PushResult(
            ok=False,
            status=status,
            response=snippet,
            error=f"HTTP {status}",
            retry_after=retry_after(asked, _now()) if status in (429, 503) else None,
            gone=status == 410,
        )


class TaskTarget:
    """Defers a run of a task with the event (as its CloudEvents document) as argument.

    The run's idempotency key is the delivery's id, so a push repeated after a dispatcher died
    defers one run, while a replay (a new delivery) defers a new one.
    """

    def __init__(self, app: App, target: Mapping[str, Any]) -> None:
        self.app = app
        self.task: str = target["task"]
        self.queue: str | None = target.get("queue")

    async def push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """Defer the run durably; acknowledged once the run is stored."""
        doc = to_event(event).to_cloudevent()
        key = f"delivery:{delivery.id}"
        now = self.app.clock.now()
        try:
            task = self.app.get_task(self.task)
        except UnknownTaskError:
            run = NewRun(
                task=self.task,
                queue=self.queue or "default",
                args_json=json.dumps([doc]),
                kwargs_json="{}",
                eta=now,
                idempotency_key=key,
            )
        else:
            run = task.prepare([doc], {}, now=now, queue=self.queue, idempotency_key=key)
        (deferred,) = await self.app.store.defer([run], now)
        return PushResult(ok=True, response=f"run {deferred.id}")


class HandlerTarget:
    """Calls a function of the dispatcher's app (``@app.subscribe``); returning acknowledges."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)

    async def push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """Call the handler (sync ones in a thread); an exception is a failed push."""
        value = to_event(event)
        try:
            if self.is_async:
                await self.handler(value)
            else:
                await asyncio.to_thread(self.handler, value)
        except Exception as exc:
            return PushResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:SNIPPET])
        return PushResult(ok=True)


def build_target(
    spec: SubscriptionSpec,
    *,
    app: App,
    client: aiohttp.ClientSession,
    handlers: Mapping[str, Handler],
) -> Target | None:
    """The target of a subscription, or None when this process cannot push to it (a handler
    that is not in this app)."""
    kind = spec.kind
    if kind is TargetKind.WEBHOOK:
        return WebhookTarget(client, spec.target)
    if kind is TargetKind.TASK:
        return TaskTarget(app, spec.target)
    handler = handlers.get(str(spec.target.get("handler")))
    return HandlerTarget(handler) if handler is not None else None


def _now() -> float:
    # Webhook timestamps are wall-clock time for the receiver's tolerance check.
    return time.time()
