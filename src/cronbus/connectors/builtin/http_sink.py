"""``http-sink``: a topic's events POSTed to an HTTP endpoint, exactly as webhooks are sent.

Config (``validate`` fills in the defaults)::

    url            http(s)://…: where each event is POSTed
    topic          the topic to read
    headers        {}: extra request headers (an object of strings)
    secret         []: a Standard Webhooks secret (whsec_…), or a list of them while rotating
    timeout        10.0 seconds per request
    max_in_flight  8 requests at once per task

Each record goes through the subscriptions' webhook target
(:meth:`~cronbus.events.targets.WebhookTarget.send`), so a receiver cannot tell the two apart:
the body is the event's structured CloudEvent (``application/cloudevents+json``), the event id
is the ``webhook-id`` (the receiver's idempotency key), with a ``secret`` the request carries
the ``webhook-timestamp`` and ``webhook-signature`` headers that :func:`cronbus.webhooks.verify`
checks, and redirects are not followed. The URL passes the same checks as a subscription's
(:func:`~cronbus.events.targets.check_url`) and the same network policy
(:mod:`~cronbus.events.netpolicy`, ``CRONBUS_WEBHOOK_DENY`` / ``_ALLOW``): a literal address at
creation and again when the task starts on its worker, a host name after every resolution.

``put`` pushes the batch concurrently, at most ``max_in_flight`` requests at once, and answers
each record by the response:

* 2xx: delivered;
* 408, 429, 5xx, a connection failure or a timeout: :class:`RetriableError`, so the runtime
  puts the record again with its backoff (five times, 0.5 s doubling), then counts it failed.
  A ``Retry-After`` header is not honoured beyond that backoff;
* 410 Gone: a :class:`~cronbus.connectors.api.TaskError`: the task fails saying the
  endpoint is gone, whatever the tolerance (as a 410 disables a subscription), rather than
  dead-lettering every event after it;
* any other status (4xx, or a 3xx, which is never followed): a :class:`PushRefused`, a bad
  record (the connector's dead letters with tolerance ``all``);
* a record that cannot be sent at all (an event id that is not a valid ``webhook-id``) fails
  alone.

Each push is acknowledged by the target before ``put`` answers, so there is nothing left for
``flush`` to make durable: it does nothing, and no :class:`~cronbus.connectors.api.RecordErrors`
is ever raised. Delivery is at least once (a crash between the pushes and the committed
position pushes them again, with the same ``webhook-id``). Within a batch requests run
concurrently, and retried records go after the others: set ``max_in_flight`` to 1 when the
receiver needs topic order, and even then a retried record arrives after later ones.

``--tasks N`` splits the topic by key over N tasks (each with its own ``max_in_flight``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import ConnectorConfigError, InvalidArgumentError
from ...events.netpolicy import NetPolicy
from ...events.signing import HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, decode_secrets
from ...events.targets import PushResult, WebhookTarget, check_url
from ..api import JSON, Config, RetriableError, SinkConnector, SinkRecord, SinkTask, TaskError
from .config import Fields, config_error

if TYPE_CHECKING:
    import aiohttp
    from aiohttp.abc import AbstractResolver

MAX_IN_FLIGHT = 1000
"""The highest ``max_in_flight`` accepted."""
RESERVED_HEADERS = frozenset(
    {HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE, "content-length", "transfer-encoding", "host"}
)
"""Headers cronbus or the HTTP client sets: a configured one would be overwritten, or would
break the request's framing."""
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP header name (RFC 9110 token)."""
_SHOWN_RESPONSE = 200
"""Characters of a refusing response kept in the record's error."""


class PushRefused(Exception):
    """The endpoint refused the event with a status that retrying will not change."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSinkConfig:
    """A validated ``http-sink`` config."""

    url: str
    topic: str
    headers: dict[str, str]
    secret: list[str]
    timeout: float
    max_in_flight: int

    @classmethod
    def read(cls, config: Config, policy: NetPolicy | None = None) -> HttpSinkConfig:
        """Check ``config`` (a literal address against ``policy``, by default the
        environment's); :class:`~cronbus.errors.ConnectorConfigError` names the field."""
        fields = _HttpFields(config)
        settings = cls(
            url=fields.webhook_url("url", policy),
            topic=fields.topic(publish=False),
            headers=fields.headers("headers"),
            secret=fields.secrets("secret"),
            timeout=fields.number("timeout", 10.0),
            max_in_flight=fields.integer("max_in_flight", 8, high=MAX_IN_FLIGHT),
        )
        fields.done()
        return settings

    def target(self) -> dict[str, JSON]:
        """The webhook target definition these settings describe."""
        return {"kind": "webhook", "url": self.url, "headers": self.headers, "secrets": self.secret}


class _HttpFields(Fields):
    """:class:`Fields` plus the webhook's own: its URL, headers and signing secrets."""

    def webhook_url(self, name: str, policy: NetPolicy | None) -> str:
        value = self.text(name)
        try:
            return check_url(value, policy)
        except InvalidArgumentError as exc:
            raise ConnectorConfigError(f"config.{name}: {exc}", field=f"config.{name}") from None

    def headers(self, name: str) -> dict[str, str]:
        value = self._get(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise config_error(name, "must be an object of header names to text values", value)
        for header, text in value.items():
            _check_header(name, header, text)
        return dict(value)

    def secrets(self, name: str) -> list[str]:
        value = self._get(name)
        if value is None:
            return []
        listed = [value] if isinstance(value, str) else value
        if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
            # The value is not shown: it may be a secret.
            raise ConnectorConfigError(
                f"config.{name}: must be a whsec_… secret or a list of them, not a "
                f"{type(value).__name__}",
                field=f"config.{name}",
            )
        if listed:
            try:
                decode_secrets(listed)
            except InvalidArgumentError as exc:
                raise ConnectorConfigError(
                    f"config.{name}: {exc}", field=f"config.{name}"
                ) from None
        return list(listed)


def _check_header(name: str, header: object, text: object) -> None:
    """Refuse a header that is not a token with a one-line text value (values are never
    shown: they may be credentials)."""
    where = f"config.{name}"
    if not isinstance(header, str) or not _TOKEN.fullmatch(header):
        raise config_error(name, "names must be HTTP header names (letters, digits, -)", header)
    if header.lower() in RESERVED_HEADERS:
        raise ConnectorConfigError(
            f"{where}: {header!r} is set by cronbus, not by the config", field=where
        )
    if not isinstance(text, str):
        raise ConnectorConfigError(
            f"{where}: the value of {header!r} must be text, not {type(text).__name__}",
            field=where,
        )
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
        raise ConnectorConfigError(
            f"{where}: the value of {header!r} holds a control character (a line break?)",
            field=where,
        )


class HttpSinkConnector(SinkConnector):
    """POSTs each event of a topic to an HTTP endpoint as a signed CloudEvent."""

    kind = "http-sink"

    def validate(self, config: Config) -> dict[str, JSON]:
        """The config checked, with its defaults filled in."""
        return dataclasses.asdict(HttpSinkConfig.read(config))

    def task_configs(self, config: Config, max_tasks: int) -> list[dict[str, JSON]]:
        """``max_tasks`` tasks, each taking its keys' share of the topic."""
        return [dict(config) for _ in range(max_tasks)]

    def task(self) -> HttpSinkTask:
        """A new, unstarted task."""
        return HttpSinkTask()


class HttpSinkTask(SinkTask):
    """Pushes records through one webhook target over its own HTTP session.

    ``policy`` and ``resolver`` are the dispatcher's options of the same names (tests inject
    them); by default the environment's policy and the system's resolver.
    """

    def __init__(
        self, policy: NetPolicy | None = None, resolver: AbstractResolver | None = None
    ) -> None:
        self._policy = policy
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._target: WebhookTarget | None = None
        self._slots = asyncio.Semaphore(1)
        self._timeout = 10.0

    async def start(self, config: Config) -> None:
        """Check the config against this worker's policy and open the HTTP session."""
        # Imported here: every `cronbus` command imports the built-in connectors.
        import aiohttp

        from ...events.resolvers import FilteringResolver

        policy = self._policy if self._policy is not None else NetPolicy.from_env()
        settings = HttpSinkConfig.read(config, policy)
        # The policy decides after every resolution; timeouts are put's (one per request);
        # no cookie set by the endpoint is sent back.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=settings.max_in_flight,
                limit_per_host=0,
                resolver=FilteringResolver(policy, self._resolver),
            ),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        self._target = WebhookTarget(self._session, settings.target(), policy)
        self._slots = asyncio.Semaphore(settings.max_in_flight)
        self._timeout = settings.timeout

    async def put(self, records: Sequence[SinkRecord]) -> list[BaseException | None]:
        """Push ``records`` concurrently; one outcome per record, in their order."""
        target = self._open_target()
        return list(await asyncio.gather(*(self._push(target, r) for r in records)))

    async def flush(self, positions: Mapping[str, int]) -> None:
        """Nothing to do: each record was acknowledged by the endpoint when put answered."""

    async def stop(self) -> None:
        """Close the HTTP session."""
        self._target = None
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def _push(self, target: WebhookTarget, record: SinkRecord) -> BaseException | None:
        async with self._slots:
            try:
                async with asyncio.timeout(self._timeout):
                    result = await target.send(record)
            except TimeoutError:
                return RetriableError(f"{target.label}: timed out after {self._timeout:g} s")
            except Exception as exc:  # this record cannot be sent (its id is no webhook-id)
                return exc
        return outcome(result, target.label)

    def _open_target(self) -> WebhookTarget:
        if self._target is None:
            raise RuntimeError("http-sink task used before start() or after stop()")
        return self._target


def outcome(result: PushResult, label: str) -> BaseException | None:
    """A push's result as a record outcome: None when acknowledged, a
    :class:`RetriableError` when trying again may help, a :class:`TaskError` for 410 Gone,
    else a :class:`PushRefused`."""
    if result.ok:
        return None
    status = result.status
    error = f"{label}: {result.error or 'failed'}"
    if status is None or status in (408, 429) or status >= 500:
        return RetriableError(error)
    if status == 410:
        error += " (the endpoint says it is gone)"
    if result.response:
        error += f": {' '.join(result.response.split())[:_SHOWN_RESPONSE]}"
    return TaskError(error) if status == 410 else PushRefused(error)
