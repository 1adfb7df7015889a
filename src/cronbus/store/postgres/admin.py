"""The admin tables in the PostgreSQL store: namespaces, tokens, console sessions, audit,
idempotency, operations
(:class:`~cronbus.store.admin_ports.Admin`).

Uniqueness decides what must have one winner: a namespace or token created twice, two claims
of one idempotency key (``INSERT … ON CONFLICT DO NOTHING``: the second waits for the first to
commit, then reads its row). Namespaces are not foreign keys of the rows that name them: a
delete checks and deletes in one transaction, holding the namespace's row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from psycopg.types.json import Jsonb

from ...admin_records import (
    JSON,
    AuditEntry,
    ConsoleSession,
    IdempotencyRecord,
    Namespace,
    Operation,
    OperationState,
    TokenRecord,
)
from ...errors import ConflictError, NotFoundError, StoreError
from ..admin_ports import NamespaceFilter, check_not_default, check_unused
from ..admin_rows import (
    Row,
    audit_from_row,
    console_session_from_row,
    idempotency_from_row,
    listing,
    operation_changes,
    operation_from_row,
    session_params,
    token_from_row,
)
from ..event_rows import decoded
from . import admin_sql as aq
from .connection import Connected
from .rows import arrays

_CLAIM_TRIES = 8
"""Claims of one key in a row that may find it released between their insert and read."""
_AUDIT_COLUMNS = ("at", "actor", "namespace", "action", "resource", "detail")


def stored_token(row: Row) -> TokenRecord:
    """A :class:`TokenRecord` from the tokens' columns followed by ``payloads`` (0010)."""
    return replace(token_from_row(row, decoded), payloads=bool(row[10]))


class PostgresAdmin(Connected):
    """The admin roles (:class:`~cronbus.store.admin_ports.Admin`) of the PostgreSQL store."""

    # -- namespaces ----------------------------------------------------------------------------
    async def put_namespace(self, name: str, now: float) -> Namespace:
        """Create a namespace; :class:`~cronbus.errors.ConflictError` if it exists."""
        row = await self._db.one(aq.INSERT_NAMESPACE, (name, now))
        if row is None:
            raise ConflictError(f"a namespace named {name!r} exists")
        return Namespace(name=row[0], created_at=row[1])

    async def get_namespace(self, name: str) -> Namespace:
        """One namespace, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._db.one(aq.GET_NAMESPACE, (name,))
        if row is None:
            raise NotFoundError(f"no namespace named {name!r}")
        return Namespace(name=row[0], created_at=row[1])

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace, by name."""
        rows = await self._db.rows(aq.LIST_NAMESPACES)
        return [Namespace(name=name, created_at=at) for name, at in rows]

    async def delete_namespace(self, name: str, now: float | None = None) -> None:
        """Delete an empty namespace (see :meth:`Namespaces.delete_namespace
        <cronbus.store.admin_ports.Namespaces.delete_namespace>`)."""
        async with self._db.transaction() as tx:
            if not await tx.rows(aq.LOCK_NAMESPACE, (name,)):
                raise NotFoundError(f"no namespace named {name!r}")
            check_not_default(name)
            users = await tx.rows(aq.NAMESPACE_USERS, {"name": name, "now": now})
            check_unused(name, [row[0] for row in users])
            await tx.queue(aq.DELETE_NAMESPACE, (name,))

    # -- tokens --------------------------------------------------------------------------------
    async def put_token(self, token: TokenRecord) -> None:
        """Store a new token; :class:`~cronbus.errors.ConflictError` if its id or hash is taken."""
        params = (
            token.id,
            token.name,
            token.hash,
            token.scope,
            list(token.namespaces),
            token.created_at,
            token.created_by,
            token.expires_at,
            token.revoked_at,
            token.last_used_at,
            token.payloads,
        )
        if not await self._db.execute(aq.INSERT_TOKEN, params):
            raise ConflictError(f"a token with id {token.id!r} (or the same hash) exists")

    async def get_token(self, token_id: str) -> TokenRecord:
        """One token by id, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._db.one(aq.GET_TOKEN, (token_id,))
        if row is None:
            raise NotFoundError(f"no token with id {token_id!r}")
        return stored_token(row)

    async def token_by_hash(self, hash: str) -> TokenRecord | None:
        """The token whose text hashes to ``hash``, if any."""
        row = await self._db.one(aq.TOKEN_BY_HASH, (hash,))
        return None if row is None else stored_token(row)

    async def list_tokens(self) -> list[TokenRecord]:
        """Every token, oldest first."""
        return [stored_token(row) for row in await self._db.rows(aq.LIST_TOKENS)]

    async def revoke_token(self, token_id: str, now: float) -> TokenRecord:
        """Revoke a token (NotFoundError if unknown); a revoked one keeps its ``revoked_at``."""
        row = await self._db.one(aq.REVOKE_TOKEN, {"id": token_id, "now": now})
        if row is None:
            raise NotFoundError(f"no token with id {token_id!r}")
        return stored_token(row)

    async def touch_token(self, token_id: str, now: float) -> None:
        """Note that a token was used (written at most once a minute)."""
        await self._db.execute(aq.TOUCH_TOKEN, {"id": token_id, "now": now})

    # -- console sessions ----------------------------------------------------------------------
    async def put_console_session(self, session: ConsoleSession) -> None:
        """Store a new session (ConflictError if its hash is taken, NotFoundError if its token
        is unknown or revoked)."""
        if await self._db.execute(aq.INSERT_CONSOLE_SESSION, session_params(session)):
            return
        if await self._db.one(aq.CONSOLE_SESSION_TAKEN, (session.hash,)) is not None:
            raise ConflictError("a console session with this id exists")
        raise NotFoundError(f"no live token with id {session.token_id!r}")

    async def console_session(self, hash: str) -> tuple[ConsoleSession, TokenRecord] | None:
        """The session whose id hashes to ``hash``, with its token, if any."""
        row = await self._db.one(aq.CONSOLE_SESSION, (hash,))
        if row is None:
            return None
        return console_session_from_row(row[:5]), stored_token(row[5:])

    async def touch_console_session(self, hash: str, now: float) -> None:
        """Note that a session was used (written at most once a minute)."""
        await self._db.execute(aq.TOUCH_CONSOLE_SESSION, {"hash": hash, "now": now})

    async def delete_console_session(self, hash: str) -> bool:
        """Delete a session; True if there was one."""
        return bool(await self._db.execute(aq.DELETE_CONSOLE_SESSION, (hash,)))

    async def trim_console_sessions(self, now: float, idle: float) -> int:
        """Delete sessions that ended at ``now``; how many."""
        return await self._db.execute(aq.TRIM_CONSOLE_SESSIONS, {"now": now, "idle": idle})

    # -- audit ---------------------------------------------------------------------------------
    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Append entries in one statement; the store gives their ids, in the order given."""
        if not entries:
            return
        rows = [
            (e.at, e.actor, e.namespace, e.action, e.resource, json.dumps(dict(e.detail)))
            for e in entries
        ]
        await self._db.execute(aq.INSERT_AUDIT, arrays(_AUDIT_COLUMNS, rows))

    async def list_audit(
        self, namespace: NamespaceFilter = None, before_id: int | None = None, limit: int = 50
    ) -> list[AuditEntry]:
        """Entries newest first, below ``before_id``, of ``namespace`` (None: all)."""
        queries = (aq.LIST_AUDIT, aq.LIST_AUDIT_OF, aq.LIST_AUDIT_IN)
        query, params = listing(queries, namespace, before_id, limit, names=list)
        return [audit_from_row(row, decoded) for row in await self._db.rows(query, params)]

    # -- idempotency ---------------------------------------------------------------------------
    async def claim_idempotency(
        self, token_id: str, route: str, key: str, body_hash: str, now: float
    ) -> IdempotencyRecord | None:
        """Claim a key: None if this call made the claim, else the stored record."""
        for _ in range(_CLAIM_TRIES):
            if await self._db.rows(aq.CLAIM_IDEMPOTENCY, (token_id, route, key, body_hash, now)):
                return None
            row = await self._db.one(aq.GET_IDEMPOTENCY, (token_id, route, key))
            if row is not None:
                return idempotency_from_row(row, decoded)
            # Released (or trimmed) between the insert and the read: claim it again.
        raise StoreError(f"idempotency key {key!r} kept being claimed and released")

    async def finish_idempotency(
        self, token_id: str, route: str, key: str, status: int, response: JSON
    ) -> bool:
        """Store the answer of a claimed request; False if there is no claim."""
        params = (status, Jsonb(response), token_id, route, key)
        return bool(await self._db.execute(aq.FINISH_IDEMPOTENCY, params))

    async def release_idempotency(self, token_id: str, route: str, key: str) -> bool:
        """Delete a claim still in progress; True if one was deleted."""
        return bool(await self._db.execute(aq.RELEASE_IDEMPOTENCY, (token_id, route, key)))

    async def trim_idempotency(self, older_than: float) -> int:
        """Delete records created before ``older_than``; how many."""
        return await self._db.execute(aq.TRIM_IDEMPOTENCY, (older_than,))

    # -- operations ----------------------------------------------------------------------------
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
        params = {
            "namespace": namespace,
            "kind": kind,
            "request": Jsonb(request),
            "state": OperationState.PENDING.value,
            "total": total,
            "created_by": created_by,
            "now": now,
        }
        row = await self._db.one(aq.INSERT_OPERATION, params)
        assert row is not None
        return operation_from_row(row, decoded)

    async def get_operation(self, operation_id: int) -> Operation:
        """One operation, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._db.one(aq.GET_OPERATION, (operation_id,))
        if row is None:
            raise NotFoundError(f"no operation with id {operation_id}")
        return operation_from_row(row, decoded)

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
        """Set the given fields unless the operation ended; return it as stored."""
        params = operation_changes(operation_id, now, state, total, done, failed, error)
        # The read is a statement of its own: it sees an abort that beat the update.
        async with self._db.transaction() as tx:
            await tx.queue(aq.UPDATE_OPERATION, params)
            rows = await tx.rows(aq.GET_OPERATION, (operation_id,))
        if not rows:
            raise NotFoundError(f"no operation with id {operation_id}")
        return operation_from_row(rows[0], decoded)

    async def list_operations(
        self, namespace: NamespaceFilter = None, limit: int = 50, before_id: int | None = None
    ) -> list[Operation]:
        """Operations newest first, below ``before_id``, of ``namespace`` (None: all)."""
        queries = (aq.LIST_OPERATIONS, aq.LIST_OPERATIONS_OF, aq.LIST_OPERATIONS_IN)
        query, params = listing(queries, namespace, before_id, limit, names=list)
        return [operation_from_row(row, decoded) for row in await self._db.rows(query, params)]
