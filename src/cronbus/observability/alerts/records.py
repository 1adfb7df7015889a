"""The records of alerting: rules, destinations, the state of each alert, silences, history.

All are frozen, keyword-only values; the stores keep rules and states as JSON documents
(:meth:`AlertRule.to_json`, :meth:`AlertRule.from_json`) and every other field in columns.
Nothing here does I/O; validation of user input is in :mod:`.build`.

An **alert** is one rule holding for one *subject* (a queue, a job, a worker, a subscription,
a task; ``*`` for rules about the whole namespace): ``(rule, subject)`` names it. Its
:class:`AlertState` says whether it fires, since when, when it last told anyone, and which
destinations still owe the latest notice (a destination that failed is retried at the next
evaluation, the others are not held back).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ...events.masking import MASK, host_label, mask_url

WHOLE = "*"
"""The subject of an alert about the whole namespace (scheduler lag, ...)."""


class RuleKind(enum.StrEnum):
    """What a rule watches."""

    JOB_FAILURES = "job-failures"
    """A job's newest ``count`` finished runs all ended dead (failed for good)."""
    DEAD_RUNS = "dead-runs"
    """Dead runs are waiting (of a task, a queue, or any): one alert per task."""
    QUEUE_DEPTH = "queue-depth"
    """More than ``threshold`` runs are queued (due, waiting for a worker) in a queue."""
    QUEUE_AGE = "queue-age"
    """The oldest queued run of a queue has waited more than ``threshold`` seconds."""
    SCHEDULER_LAG = "scheduler-lag"
    """Job runs were created more than ``threshold`` seconds after their fire time (p99 over
    ``window``), or an active job's fire is that overdue."""
    SUBSCRIPTION_FAILING = "subscription-failing"
    """A subscription is disabled, or holds deliveries retrying or dead."""
    CIRCUIT_OPEN = "circuit-open"
    """A subscription's newest pushes all failed (as many as open its circuit)."""
    WORKER_LOST = "worker-lost"
    """A worker stopped heartbeating without stopping cleanly."""
    QUEUE_UNSERVED = "queue-unserved"
    """A queue holds runs (or is named) and no live worker serves it."""
    CUSTOM = "custom"
    """A check function of the app's code (``@app.alert``); never stored."""


class DestinationKind(enum.StrEnum):
    """Where notices go."""

    WEBHOOK = "webhook"
    """A JSON POST signed as Standard Webhooks (like event deliveries)."""
    EMAIL = "email"
    """An email over SMTP."""
    CHAT = "chat"
    """A Slack-compatible incoming webhook: ``{"text": ...}``."""


class NoticeKind(enum.StrEnum):
    """What a notice says about an alert."""

    FIRED = "fired"
    REPEATED = "repeated"
    RESOLVED = "resolved"


class HistoryKind(enum.StrEnum):
    """What a history entry records."""

    FIRED = "fired"
    REPEATED = "repeated"
    RESOLVED = "resolved"
    FAILED = "failed"
    """A destination could not be told (it is retried at the next evaluation)."""
    DELIVERED = "delivered"
    """A destination that had failed was told at last."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Destination:
    """One place a rule's notices go. Email fields left None come from the settings
    (:class:`~.settings.AlertSettings`: ``CRONBUS_SMTP_*``)."""

    kind: DestinationKind
    url: str | None = None
    """The webhook's or chat's URL."""
    secrets: tuple[str, ...] = ()
    """A webhook's signing secrets (``whsec_...``); none: sent unsigned."""
    to: tuple[str, ...] = ()
    """An email's recipients."""
    host: str | None = None
    port: int | None = None
    sender: str | None = None
    username: str | None = None
    password: str | None = None
    starttls: bool | None = None

    def __repr__(self) -> str:
        return f"<Destination {self.label}>"

    @property
    def label(self) -> str:
        """What history and logs call it: never a secret (a URL's host, the recipients)."""
        if self.kind is DestinationKind.EMAIL:
            return "email " + ",".join(self.to)
        return f"{self.kind.value} {host_label(self.url or '')}"

    @property
    def key(self) -> str:
        """A stable name of this destination within its rule (a digest of its definition)."""
        text = json.dumps(self.to_json(), sort_keys=True)
        return f"{self.kind.value}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    def to_json(self) -> dict[str, Any]:
        """The destination as stored, secrets included (only fields that are set)."""
        document: dict[str, Any] = {"kind": self.kind.value}
        for name in ("url", "host", "port", "sender", "username", "password", "starttls"):
            value = getattr(self, name)
            if value is not None:
                document[name] = value
        if self.secrets:
            document["secrets"] = list(self.secrets)
        if self.to:
            document["to"] = list(self.to)
        return document

    def public(self) -> dict[str, Any]:
        """The destination as it may be shown: URLs masked (a chat URL's path is its secret),
        signing secrets counted, the password replaced by ``***``."""
        shown = self.to_json()
        if self.url is not None:
            shown["url"] = (
                mask_chat(self.url) if self.kind is DestinationKind.CHAT else mask_url(self.url)
            )
        if "secrets" in shown:
            shown["secrets"] = len(self.secrets)
        if self.password is not None:
            shown["password"] = MASK
        return shown

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Destination:
        """A destination from :meth:`to_json`'s document."""
        return cls(
            kind=DestinationKind(document["kind"]),
            url=document.get("url"),
            secrets=tuple(document.get("secrets") or ()),
            to=tuple(document.get("to") or ()),
            host=document.get("host"),
            port=document.get("port"),
            sender=document.get("sender"),
            username=document.get("username"),
            password=document.get("password"),
            starttls=document.get("starttls"),
        )


def mask_chat(url: str) -> str:
    """A chat webhook's URL as shown: its scheme and host (Slack's path is the credential)."""
    try:
        scheme = urlsplit(url).scheme or "https"
    except ValueError:
        return MASK
    return f"{scheme}://{host_label(url)}/{MASK}"


Check = Callable[..., Any]
"""A custom rule's function: it receives the :class:`~.rules.Figures` and returns None (all
well), a message (one alert), or a mapping of subject to message (one alert each)."""

_PARAMS = ("threshold", "count", "job", "queue", "task", "subscription", "worker")


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertRule:
    """A condition to watch, the destinations to tell, and how often to repeat."""

    name: str
    kind: RuleKind
    namespace: str = "default"
    threshold: float | None = None
    """queue-depth: runs; queue-age, scheduler-lag: seconds; dead-runs: runs (fires above it;
    default 0)."""
    count: int | None = None
    """job-failures: the dead runs in a row that fire it."""
    job: str | None = None
    queue: str | None = None
    task: str | None = None
    subscription: str | None = None
    worker: str | None = None
    repeat: float = 3600.0
    """Seconds between two notices while the alert holds; 0: tell once."""
    destinations: tuple[Destination, ...] = ()
    source: str = "store"
    """``store`` (added with the CLI or the services) or ``code`` (the app's)."""
    created_at: float | None = None
    check: Check | None = field(default=None, compare=False)
    """The function of a custom rule (code only)."""

    def params(self) -> dict[str, Any]:
        """The rule's parameters that are set (threshold, queue, ...)."""
        return {name: getattr(self, name) for name in _PARAMS if getattr(self, name) is not None}

    def describe(self) -> str:
        """The rule in a few words: ``queue-depth queue=emails threshold=100``."""
        words = " ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in (self.params().items())
        )
        return f"{self.kind.value} {words}".strip()

    def to_json(self) -> dict[str, Any]:
        """What the store keeps of the rule (every field but name, namespace and check)."""
        return {
            "kind": self.kind.value,
            **self.params(),
            "repeat": self.repeat,
            "destinations": [d.to_json() for d in self.destinations],
        }

    def public(self) -> dict[str, Any]:
        """The rule as it may be shown (destinations masked)."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "kind": self.kind.value,
            "params": self.params(),
            "repeat": self.repeat,
            "source": self.source,
            "destinations": [d.public() for d in self.destinations],
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(
        cls, name: str, namespace: str, document: Mapping[str, Any], created_at: float | None
    ) -> AlertRule:
        """A stored rule from its columns and :meth:`to_json`'s document."""
        params = {k: document[k] for k in _PARAMS if document.get(k) is not None}
        return cls(
            name=name,
            namespace=namespace,
            kind=RuleKind(document["kind"]),
            repeat=float(document.get("repeat", 3600.0)),
            destinations=tuple(Destination.from_json(d) for d in document.get("destinations", ())),
            created_at=created_at,
            **params,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertState:
    """One alert (a rule holding for a subject), as the evaluator left it.

    A state that no longer fires is kept only until its ``resolved`` notice reached every
    destination; then it is deleted (the history keeps it).
    """

    rule: str
    subject: str
    namespace: str
    firing: bool
    since: float
    """When it started to fire."""
    message: str
    """The latest description of what holds (or of the resolution)."""
    notified_at: float | None = None
    """When the latest notice was decided (None: never told anyone, e.g. silenced)."""
    notice: NoticeKind | None = None
    """The latest notice, that the ``pending`` destinations still owe."""
    notice_message: str | None = None
    pending: tuple[str, ...] = ()
    """Keys (:attr:`Destination.key`) of the destinations that have not received ``notice``."""
    updated_at: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        """``(rule, subject)``: the alert's name."""
        return (self.rule, self.subject)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    """One thing that happened to an alert: it fired, repeated, resolved; a destination
    failed or was told at last. ``id`` is given by the store (0 before)."""

    id: int = 0
    at: float
    rule: str
    subject: str
    namespace: str
    kind: HistoryKind
    message: str
    detail: str | None = None
    """Which destinations were told, which one failed and why, or that it was silenced."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Silence:
    """No notice of ``rule`` (``*``: of every rule of the namespace) until ``until``; the
    alerts still change state and are kept in the history."""

    namespace: str
    rule: str
    until: float
    reason: str | None = None
    created_at: float


def silenced(rule: AlertRule, silences: Mapping[tuple[str, str], Silence], now: float) -> bool:
    """True when ``rule`` (or every rule of its namespace) is silenced at ``now``."""
    return any(
        s is not None and s.until > now
        for s in (silences.get((rule.namespace, rule.name)), silences.get((rule.namespace, WHOLE)))
    )
