"""Frozen records of the store's admin tables: namespaces, API tokens, the audit log, idempotency
claims of HTTP requests, and long (bulk) operations.

The store keeps them and the services (:mod:`cronbus.services`) give them meaning: a token's
``scope`` is checked there, an idempotency record's ``body_hash`` compared there. Times are epoch
seconds; JSON values (``detail``, ``response``, ``request``) travel decoded.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = Any
"""A value that ``json.dumps`` accepts and ``json.loads`` gives back."""

DEFAULT_NAMESPACE = "default"
"""The namespace every store starts with, and that can never be deleted."""

ALL_NAMESPACES = "*"
"""In a token's ``namespaces``: every namespace, present and future."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace:
    """A namespace (tenant, application group) that jobs, runs, topics and subscriptions live in."""

    name: str
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRecord:
    """An API token as stored: never the token itself, only the sha256 hex of it."""

    id: str
    """The public part of the token (``cb_<id>_<secret>``), shown in lists."""
    name: str
    hash: str
    """sha256 hex of the whole token text."""
    scope: str
    """``read``, ``write`` or ``admin`` (ordered; see :mod:`cronbus.services.access`)."""
    namespaces: tuple[str, ...]
    """The namespaces the token may act in; ``("*",)`` is every namespace."""
    created_at: float
    created_by: str
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None
    payloads: bool = True
    """Whether the token sees runs' arguments and results (False: the services redact them)."""

    def live(self, now: float) -> bool:
        """True if the token is neither revoked nor expired at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleSession:
    """A console login as stored: the sha256 hex of its random id (the cookie holds the id,
    never the API token), the token it acts with, and when it ends."""

    hash: str
    """sha256 hex of the session id."""
    token_id: str
    created_at: float
    last_seen_at: float
    """When a request last used it (written at most once a minute); an idle session ends."""
    expires_at: float
    """When it ends however busy: its lifetime, bounded by the token's expiry."""

    def live(self, now: float, idle: float) -> bool:
        """True before ``expires_at`` and less than ``idle`` seconds after ``last_seen_at``."""
        return now < self.expires_at and now < self.last_seen_at + idle


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One change made through the services: who did what to which resource, and when."""

    id: int = 0
    """Given by the store when the entry is recorded (0 before); increases with time."""
    at: float
    actor: str
    """The token id (or ``local`` for the CLI and Python API on the store itself)."""
    namespace: str | None
    """The namespace changed; None for changes outside any (tokens, namespaces themselves)."""
    action: str
    """What was done, as ``resource_kind.verb`` (``jobs.pause``, ``tokens.create``)."""
    resource: str
    """What it was done to (a job's name, a run's id, a token's id)."""
    detail: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyRecord:
    """A request made with an ``Idempotency-Key``, scoped by token and route.

    The first request to claim a key owns it until it finishes (``status`` 0 meanwhile); a
    repeat gets this record back and answers with the stored response, or 409 if its body
    differs (``body_hash``) or the first is still in progress.
    """

    token_id: str
    route: str
    key: str
    body_hash: str
    status: int
    """The HTTP status of the stored answer; 0 while the first request is still in progress."""
    response: JSON
    """The stored answer (None while in progress)."""
    created_at: float

    @property
    def in_progress(self) -> bool:
        """True while the request that claimed the key has not finished."""
        return self.status == 0


class OperationState(enum.StrEnum):
    """Where a bulk operation stands."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"

    @property
    def terminal(self) -> bool:
        """True once the operation ended: the store never moves it again."""
        return self in _TERMINAL


_TERMINAL = frozenset({OperationState.SUCCEEDED, OperationState.FAILED, OperationState.ABORTED})


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """A bulk action (retry, cancel, requeue, replay) run in the background, with its progress."""

    id: int
    namespace: str
    kind: str
    """``runs.retry``, ``runs.cancel``, ``dead_letters.requeue``, ``subscriptions.replay``."""
    request: JSON
    """What was asked (ids or a filter), as given."""
    state: OperationState
    total: int
    """How many items the operation covers (0 until known)."""
    done: int
    """Items handled successfully so far."""
    failed: int
    """Items that could not be handled so far."""
    error: str | None
    created_by: str
    created_at: float
    updated_at: float
