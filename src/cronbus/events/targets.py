"""Where deliveries go: webhooks, tasks (event → run) and in-process handlers.

A target pushes one event and reports what happened as a :class:`PushResult`; it never raises
for the target's own failures, and it never decides about retries: the dispatcher does, from
the result and the subscription's policy. Each target has a ``label`` that logs may show: a
webhook's ``host:port`` (never its URL, which may hold credentials), ``task NAME``, ``handler
NAME``.

Webhooks do not follow redirects: a 3xx is a failed attempt whose error names the Location
(following one would send the signed body to a host nobody subscribed, and turn a POST into a
GET). Their addresses must pass the network policy (:mod:`.netpolicy`), at creation for a
literal IP and at every push after DNS resolution.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from ..errors import InvalidArgumentError, UnknownTaskError
from ..model import NewRun
from ..observability import tracing
from ..validation import DEFAULT_NAMESPACE
from .event import Event
from .handlers import HandlerPool
from .masking import host_label, mask_url
from .netpolicy import NetPolicy, literal_address, numeric_lookalike
from .pacing import retry_after
from .records import Delivery, EventRecord, SubscriptionSpec, TargetKind
from .signing import decode_secrets, webhook_headers

if TYPE_CHECKING:
    import aiohttp

    from ..app import App

SNIPPET = 512
"""Characters of a target's response kept with each attempt."""
MAX_URL = 2048
"""Characters of a webhook URL at most."""

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

    label: str
    """What logs call the target: a webhook's host, ``task NAME`` or ``handler NAME``."""

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
        url = check_url(target.get("url"))
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


def check_url(url: object, policy: NetPolicy | None = None) -> str:
    """A webhook URL: http(s), a host, no whitespace, a literal address the policy allows.

    ``policy`` defaults to the environment's (:meth:`NetPolicy.from_env`). Host names are
    checked after resolution, at every push.
    """
    if not isinstance(url, str):
        raise InvalidArgumentError(f"a webhook target needs an http(s) url, not {url!r:.80}")
    shown = mask_url(url)[:80]
    if not url or len(url) > MAX_URL:
        raise InvalidArgumentError(f"a webhook url has 1 to {MAX_URL} characters, not {len(url)}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InvalidArgumentError(
            f"a webhook url may not contain spaces or control characters: {shown!r} "
            "(percent-encode them, e.g. %20)"
        )
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # reading it checks it (ValueError when out of range)
    except ValueError as exc:
        raise InvalidArgumentError(f"a webhook url does not parse ({exc}): {shown!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidArgumentError(
            f"{shown!r} is not an http(s) URL with a host, like https://example.com/hooks"
        )
    address = literal_address(host)
    if address is None and numeric_lookalike(host):
        raise InvalidArgumentError(
            f"a webhook url's host {host[:80]!r} looks like an address but is not one; write "
            "IPv4 addresses as four decimal numbers (127.0.0.1)"
        )
    if address is not None:
        (policy or NetPolicy.from_env()).check(address, f"webhook url {shown!r}")
    return url


class WebhookTarget:
    """POSTs the CloudEvents JSON, signed as Standard Webhooks define it; 2xx acknowledges."""

    def __init__(
        self,
        client: aiohttp.ClientSession,
        target: Mapping[str, Any],
        policy: NetPolicy | None = None,
    ) -> None:
        self.client = client
        self.url: str = target["url"]
        self.headers: dict[str, str] = dict(target.get("headers") or {})
        self.secrets: list[str] = list(target.get("secrets") or [])
        self.policy = policy if policy is not None else NetPolicy.from_env()
        self.label = host_label(self.url)

    def __repr__(self) -> str:
        return f"<WebhookTarget {mask_url(self.url)}>"

    async def push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """POST the event; the event id is the ``webhook-id``, the receiver's idempotency key."""
        return await self.send(to_event(event))

    async def send(self, event: Event) -> PushResult:
        """POST ``event`` as a signed CloudEvent and report the answer (what :meth:`push` does
        for a delivery; the ``http-sink`` connector sends its records through it too)."""
        denied = self._denied()
        if denied is not None:
            return PushResult(ok=False, error=denied)
        body = json.dumps(event.to_cloudevent(), separators=(",", ":")).encode()
        headers = {"content-type": "application/cloudevents+json", **self.headers}
        if self.secrets:
            headers.update(webhook_headers(self.secrets, event.id, _now(), body))
        else:
            headers["webhook-id"] = event.id
        tracing.inject(headers)  # the delivery's span, as traceparent
        # Imported here, not at the top: only a dispatcher (which has imported it already for
        # its client) pushes, and every `cronbus` command imports this module.
        import aiohttp

        try:
            async with self.client.post(
                self.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                # A snippet is enough; a longer body closes the connection instead of being read.
                raw = await response.content.read(SNIPPET)
                asked = response.headers.get("retry-after")
                location = response.headers.get("location")
        except (aiohttp.ClientError, OSError) as exc:
            return PushResult(ok=False, error=self._clean(f"{type(exc).__name__}: {exc}"))
        snippet = raw.decode("utf-8", "replace") if raw else None
        if 200 <= status < 300:
            return PushResult(ok=True, status=status, response=snippet)
        error = f"HTTP {status}"
        if 300 <= status < 400:
            where = mask_url(location) if location else "no Location header"
            error = f"HTTP {status}: redirect to {where[:200]} not followed"
        return PushResult(
            ok=False,
            status=status,
            response=snippet,
            error=error,
            retry_after=retry_after(asked, _now()) if status in (429, 503) else None,
            gone=status == 410,
        )

    def _denied(self) -> str | None:
        """Why a literal address is refused (resolved names are checked by the resolver)."""
        address = literal_address(urlsplit(self.url).hostname or "")
        if address is None or self.policy.allows(address):
            return None
        return f"the address {address} is in a denied network (see CRONBUS_WEBHOOK_ALLOW)"

    def _clean(self, error: str) -> str:
        """An error message without the URL's secrets (aiohttp may quote the URL)."""
        return error.replace(self.url, mask_url(self.url))[:SNIPPET]


class TaskTarget:
    """Defers a run of a task with the event (as its CloudEvents document) as argument.

    The run's idempotency key is the delivery's id, so a push repeated after a dispatcher died
    defers one run, while a replay (a new delivery) defers a new one. The run belongs to the
    subscription's namespace (a dispatcher serves every namespace).
    """

    def __init__(
        self, app: App, target: Mapping[str, Any], namespace: str = DEFAULT_NAMESPACE
    ) -> None:
        self.app = app
        self.namespace = namespace
        self.task: str = target["task"]
        self.queue: str | None = target.get("queue")
        self.label = f"task {self.task}"

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
                namespace=self.namespace,
                trace=tracing.capture(),  # the delivery's span: the run continues its trace
            )
        else:
            run = task.prepare(
                [doc], {}, now=now, queue=self.queue, idempotency_key=key, namespace=self.namespace
            )
        (deferred,) = await self.app.store.defer([run], now)
        return PushResult(ok=True, response=f"run {deferred.id}")


class HandlerTarget:
    """Calls a function of the dispatcher's app (``@app.subscribe``); returning acknowledges.

    Sync functions run on the dispatcher's :class:`~.handlers.HandlerPool`, where the push's
    timeout interrupts them.
    """

    def __init__(self, handler: Handler, name: str, pool: HandlerPool) -> None:
        self.handler = handler
        self.name = name
        self.pool = pool
        self.is_async = inspect.iscoroutinefunction(handler)
        self.label = f"handler {name}"

    async def push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """Call the handler; an exception is a failed push."""
        value = to_event(event)
        try:
            if self.is_async:
                await self.handler(value)
            else:
                await self.pool.call(self.handler, value, delivery.subscription)
        except Exception as exc:
            return PushResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:SNIPPET])
        return PushResult(ok=True)


def build_target(
    spec: SubscriptionSpec,
    *,
    app: App,
    client: aiohttp.ClientSession,
    handlers: Mapping[str, Handler],
    handler_pool: HandlerPool,
    policy: NetPolicy,
) -> Target | None:
    """The target of a subscription, or None when this process cannot push to it (a handler
    that is not in this app)."""
    kind = spec.kind
    if kind is TargetKind.WEBHOOK:
        return WebhookTarget(client, spec.target, policy)
    if kind is TargetKind.TASK:
        return TaskTarget(app, spec.target, spec.namespace)
    name = str(spec.target.get("handler"))
    handler = handlers.get(name)
    return HandlerTarget(handler, name, handler_pool) if handler is not None else None


def _now() -> float:
    # Webhook timestamps are wall-clock time for the receiver's tolerance check.
    return time.time()
