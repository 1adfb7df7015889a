"""The store's admin roles, as protocols: namespaces, API tokens, console sessions, the audit
log, idempotency claims and bulk operations. :class:`Admin` composes them and is part of
:class:`~cronbus.store.ports.Store`.

The store keeps these tables and enforces what needs the database to be right (a name taken, a
namespace still in use, one owner per idempotency key, a finished operation left alone); the
services (:mod:`cronbus.services`) decide everything else (scopes, comparing body hashes).
Callers pass ``now``, as everywhere in the store.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from ..admin_records import (
    DEFAULT_NAMESPACE,
    JSON,
    AuditEntry,
    ConsoleSession,
    IdempotencyRecord,
    Namespace,
    Operation,
    OperationState,
    TokenRecord,
)
from ..errors import ConflictError

NamespaceFilter = str | Collection[str] | None
"""One namespace, several, or None for every one (and entries of none)."""


class Namespaces(Protocol):
    """Namespaces: the tenants that jobs, runs, topics and subscriptions belong to."""

    async def put_namespace(self, name: str, now: float) -> Namespace:
        """Create a namespace; :class:`~cronbus.errors.ConflictError` if it exists."""

    async def get_namespace(self, name: str) -> Namespace:
        """One namespace, or :class:`~cronbus.errors.NotFoundError`."""

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace, by name (``default`` always among them)."""

    async def delete_namespace(self, name: str, now: float | None = None) -> None:
        """Delete an empty namespace, checked and deleted in one transaction.

        :class:`~cronbus.errors.NotFoundError` if unknown; :class:`~cronbus.errors.ConflictError`
        for ``default``, or while a job, run, topic, subscription or live token (not revoked;
        with ``now``, also not expired) is in it. A token of every namespace (``*``) is in none.
        """


class Tokens(Protocol):
    """API tokens, stored by the hash of their text."""

    async def put_token(self, token: TokenRecord) -> None:
        """Store a new token; :class:`~cronbus.errors.ConflictError` if its id or hash is taken."""

    async def get_token(self, token_id: str) -> TokenRecord:
        """One token by id, or :class:`~cronbus.errors.NotFoundError`."""

    async def token_by_hash(self, hash: str) -> TokenRecord | None:
        """The token whose text hashes to ``hash`` (revoked and expired ones too), if any."""

    async def list_tokens(self) -> list[TokenRecord]:
        """Every token, oldest first."""

    async def revoke_token(self, token_id: str, now: float) -> TokenRecord:
        """Revoke a token (:class:`~cronbus.errors.NotFoundError` if unknown); revoking it
        again changes nothing (it keeps its first ``revoked_at``). Its console sessions are
        deleted in the same transaction."""

    async def touch_token(self, token_id: str, now: float) -> None:
        """Note that a token was used; written at most once a minute per token (a request
        per token per minute is enough to see which tokens are in use)."""


class ConsoleSessions(Protocol):
    """Console logins, stored by the hash of their random id, each bound to one token."""

    async def put_console_session(self, session: ConsoleSession) -> None:
        """Store a new session; :class:`~cronbus.errors.ConflictError` if its hash is taken,
        :class:`~cronbus.errors.NotFoundError` if its token is unknown."""

    async def console_session(self, hash: str) -> tuple[ConsoleSession, TokenRecord] | None:
        """The session whose id hashes to ``hash`` with its token (read in one query), if any:
        ended ones too, the services decide (a revoked token's are deleted, though)."""

    async def touch_console_session(self, hash: str, now: float) -> None:
        """Note that a session was used; written at most once every :data:`TOUCH_EVERY`
        seconds per session (idle spells are counted in minutes, not requests)."""

    async def delete_console_session(self, hash: str) -> bool:
        """Delete a session (logout); True if there was one."""

    async def trim_console_sessions(self, now: float, idle: float) -> int:
        """Delete sessions that ended at ``now`` (expired, or idle ``idle`` seconds); how many."""


class Audit(Protocol):
    """The audit log: every change, who made it and when."""

    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Append entries, in one transaction (their ``id`` is ignored and given here)."""

    async def list_audit(
        self, namespace: NamespaceFilter = None, before_id: int | None = None, limit: int = 50
    ) -> list[AuditEntry]:
        """Entries newest first (by id, below ``before_id`` if given), of ``namespace`` (a
        name or several; None: every entry, including those of no namespace)."""


class Idempotency(Protocol):
    """Idempotency claims: one owner per (token, route, key)."""

    async def claim_idempotency(
        self, token_id: str, route: str, key: str, body_hash: str, now: float
    ) -> IdempotencyRecord | None:
        """Claim a key atomically: None if this call made the claim (the caller owns it and
        must finish or release it), else the stored record, which may still be in progress
        (status 0). Of concurrent claims of one key exactly one gets None."""

    async def finish_idempotency(
        self, token_id: str, route: str, key: str, status: int, response: JSON
    ) -> bool:
        """Store the answer of a claimed request; False if there is no claim (trimmed)."""

    async def release_idempotency(self, token_id: str, route: str, key: str) -> bool:
        """Delete a claim still in progress (its request failed with a 5xx, so a retry may
        run it again); a finished one is kept. True if a claim was deleted."""

    async def trim_idempotency(self, older_than: float) -> int:
        """Delete records created before ``older_than``, in progress or not; how many."""


class Operations(Protocol):
    """Bulk operations run in the background, with their progress."""

    async def put_operation(
        self,
        *,
        namespace: str,
        kind: str,
        request: JSON,
        created_by: str,
        now: float,
        total: int = 0,
    ) -> Operation:
        """Create an operation, pending; the store gives its id."""

    async def get_operation(self, operation_id: int) -> Operation:
        """One operation, or :class:`~cronbus.errors.NotFoundError`."""

    async def update_operation(
        self,
        operation_id: int,
        now: float,
        *,
        state: OperationState | None = None,
        total: int | None = None,
        done: int | None = None,
        failed: int | None = None,
        error: str | None = None,
    ) -> Operation:
        """Set the given fields (None: keep) and return the operation as stored.

        An operation that ended (succeeded, failed, aborted) is not moved again: it is returned
        unchanged, which tells a runner that its operation was aborted.
        :class:`~cronbus.errors.NotFoundError` if unknown.
        """

    async def list_operations(
        self, namespace: NamespaceFilter = None, limit: int = 50, before_id: int | None = None
    ) -> list[Operation]:
        """Operations newest first (below ``before_id`` if given), of ``namespace`` (a name or
        several; None: all)."""


class Admin(Namespaces, Tokens, ConsoleSessions, Audit, Idempotency, Operations, Protocol):
    """Every admin role of the store."""


# -- what both backends share --------------------------------------------------------------
TOUCH_EVERY = 60.0
"""Seconds between two writes of a token's ``last_used_at``: a token used on every request
would otherwise cost every request a write."""
NO_CURSOR = 2**63 - 1
"""``before_id`` when none is given: above every id either backend can give."""


def filter_names(namespace: NamespaceFilter) -> list[str] | None:
    """A namespace filter as a list of names (None: no filter)."""
    if namespace is None:
        return None
    if isinstance(namespace, str):
        return [namespace]
    return sorted(set(namespace))


def check_not_default(name: str) -> None:
    """Refuse to delete ``default``, which every store keeps."""
    if name == DEFAULT_NAMESPACE:
        raise ConflictError(f"the namespace {DEFAULT_NAMESPACE!r} cannot be deleted")


def check_unused(name: str, users: Sequence[str]) -> None:
    """Refuse to delete a namespace that ``users`` (kinds of rows: jobs, runs…) still use."""
    if users:
        raise ConflictError(f"the namespace {name!r} still holds {', '.join(users)}")
