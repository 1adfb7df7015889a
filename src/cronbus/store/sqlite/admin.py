"""The admin tables in the SQLite store: namespaces, tokens, console sessions, audit,
idempotency, operations
(:class:`~cronbus.store.admin_ports.Admin`).

Every check and the change it guards run in one write transaction, which holds the database's
write lock: two claims of one idempotency key, or a namespace deleted while a job is added to
it, are serialised by the file itself.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

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
from ...errors import ConflictError, NotFoundError
from ..admin_ports import NamespaceFilter, check_not_default, check_unused
from ..admin_rows import (
    audit_from_row,
    console_session_from_row,
    idempotency_from_row,
    listing,
    operation_changes,
    operation_from_row,
    session_params,
    token_from_row,
)
from . import admin_sql as aq
from .connection import Connected
from .rows import Row, execute, fetch_one


def stored_token(row: Row) -> TokenRecord:
    """A :class:`TokenRecord` from the tokens' columns followed by ``payloads`` (0010)."""
    return replace(token_from_row(row, json.loads), payloads=bool(row[10]))


class SqliteAdmin(Connected):
    """The admin roles (:class:`~cronbus.store.admin_ports.Admin`) of the SQLite store."""

    # -- namespaces ----------------------------------------------------------------------------
    async def put_namespace(self, name: str, now: float) -> Namespace:
        """Create a namespace; :class:`~cronbus.errors.ConflictError` if it exists."""
        row = await self._transact(fetch_one, aq.INSERT_NAMESPACE, (name, now), inline="write")
        if row is None:
            raise ConflictError(f"a namespace named {name!r} exists")
        return Namespace(name=row[0], created_at=row[1])

    async def get_namespace(self, name: str) -> Namespace:
        """One namespace, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._one(aq.GET_NAMESPACE, (name,), inline="read")
        if row is None:
            raise NotFoundError(f"no namespace named {name!r}")
        return Namespace(name=row[0], created_at=row[1])

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace, by name."""
        rows = await self._rows(aq.LIST_NAMESPACES, inline="read")
        return [Namespace(name=name, created_at=at) for name, at in rows]

    async def delete_namespace(self, name: str, now: float | None = None) -> None:
        """Delete an empty namespace (see :meth:`Namespaces.delete_namespace
        <cronbus.store.admin_ports.Namespaces.delete_namespace>`)."""
        await self._transact(_delete_namespace, name, now, inline="write")

    # -- tokens --------------------------------------------------------------------------------
    async def put_token(self, token: TokenRecord) -> None:
        """Store a new token; :class:`~cronbus.errors.ConflictError` if its id or hash is taken."""
        params = (
            token.id,
            token.name,
            token.hash,
            token.scope,
            json.dumps(list(token.namespaces)),
            token.created_at,
            token.created_by,
            token.expires_at,
            token.revoked_at,
            token.last_used_at,
            token.payloads,
        )
        if not await self._transact(execute, aq.INSERT_TOKEN, params, inline="write"):
            raise ConflictError(f"a token with id {token.id!r} (or the same hash) exists")

    async def get_token(self, token_id: str) -> TokenRecord:
        """One token by id, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._one(aq.GET_TOKEN, (token_id,), inline="read")
        if row is None:
            raise NotFoundError(f"no token with id {token_id!r}")
        return stored_token(row)

    async def token_by_hash(self, hash: str) -> TokenRecord | None:
        """The token whose text hashes to ``hash``, if any."""
        row = await self._one(aq.TOKEN_BY_HASH, (hash,), inline="read")
        return None if row is None else stored_token(row)

    async def list_tokens(self) -> list[TokenRecord]:
        """Every token, oldest first."""
        return [stored_token(row) for row in await self._rows(aq.LIST_TOKENS, inline="read")]

    async def revoke_token(self, token_id: str, now: float) -> TokenRecord:
        """Revoke a token (NotFoundError if unknown); a revoked one keeps its ``revoked_at``."""
        return await self._transact(_revoke_token, token_id, now, inline="write")

    async def touch_token(self, token_id: str, now: float) -> None:
        """Note that a token was used (written at most once a minute)."""
        params = {"id": token_id, "now": now}
        # Read first: a write, even one that changes nothing, takes the file's write lock, and
        # every API request touches its token.
        if await self._one(aq.TOUCH_DUE, params, inline="read"):
            await self._transact(execute, aq.TOUCH_TOKEN, params, durable=False, inline="write")

    # -- console sessions ----------------------------------------------------------------------
    async def put_console_session(self, session: ConsoleSession) -> None:
        """Store a new session (ConflictError if its hash is taken, NotFoundError if its token
        is unknown or revoked)."""
        await self._transact(_put_session, session_params(session), inline="write")

    async def console_session(self, hash: str) -> tuple[ConsoleSession, TokenRecord] | None:
        """The session whose id hashes to ``hash``, with its token, if any."""
        row = await self._one(aq.CONSOLE_SESSION, (hash,), inline="read")
        if row is None:
            return None
        return console_session_from_row(row[:5]), stored_token(row[5:])

    async def touch_console_session(self, hash: str, now: float) -> None:
        """Note that a session was used (written at most once a minute)."""
        params = {"hash": hash, "now": now}
        await self._transact(
            execute, aq.TOUCH_CONSOLE_SESSION, params, durable=False, inline="write"
        )

    async def delete_console_session(self, hash: str) -> bool:
        """Delete a session; True if there was one."""
        params = (hash,)
        return bool(
            await self._transact(execute, aq.DELETE_CONSOLE_SESSION, params, inline="write")
        )

    async def trim_console_sessions(self, now: float, idle: float) -> int:
        """Delete sessions that ended at ``now``; how many."""
        params = {"now": now, "idle": idle}
        return await self._transact(execute, aq.TRIM_CONSOLE_SESSIONS, params, durable=False)

    # -- audit ---------------------------------------------------------------------------------
    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Append entries in one transaction; the store gives their ids."""
        if not entries:
            return
        rows = [
            (e.at, e.actor, e.namespace, e.action, e.resource, json.dumps(dict(e.detail)))
            for e in entries
        ]
        await self._transact(_execute_many, aq.INSERT_AUDIT, rows, inline="write")

    async def list_audit(
        self, namespace: NamespaceFilter = None, before_id: int | None = None, limit: int = 50
    ) -> list[AuditEntry]:
        """Entries newest first, below ``before_id``, of ``namespace`` (None: all)."""
        query, params = listing(
            (aq.LIST_AUDIT, aq.LIST_AUDIT_OF, aq.LIST_AUDIT_IN), namespace, before_id, limit
        )
        return [audit_from_row(row) for row in await self._rows(query, params, inline="read")]

    # -- idempotency ---------------------------------------------------------------------------
    async def claim_idempotency(
        self, token_id: str, route: str, key: str, body_hash: str, now: float
    ) -> IdempotencyRecord | None:
        """Claim a key: None if this call made the claim, else the stored record."""
        params = (token_id, route, key, body_hash, now)
        return await self._transact(_claim, params, inline="write")

    async def finish_idempotency(
        self, token_id: str, route: str, key: str, status: int, response: JSON
    ) -> bool:
        """Store the answer of a claimed request; False if there is no claim."""
        params = (status, json.dumps(response), token_id, route, key)
        return bool(await self._transact(execute, aq.FINISH_IDEMPOTENCY, params, inline="write"))

    async def release_idempotency(self, token_id: str, route: str, key: str) -> bool:
        """Delete a claim still in progress; True if one was deleted."""
        params = (token_id, route, key)
        return bool(await self._transact(execute, aq.RELEASE_IDEMPOTENCY, params, inline="write"))

    async def trim_idempotency(self, older_than: float) -> int:
        """Delete records created before ``older_than``; how many."""
        return await self._transact(execute, aq.TRIM_IDEMPOTENCY, (older_than,), durable=False)

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
            "request": json.dumps(request),
            "state": OperationState.PENDING.value,
            "total": total,
            "created_by": created_by,
            "now": now,
        }
        row = await self._transact(fetch_one, aq.INSERT_OPERATION, params, inline="write")
        assert row is not None
        return operation_from_row(row)

    async def get_operation(self, operation_id: int) -> Operation:
        """One operation, or :class:`~cronbus.errors.NotFoundError`."""
        return await self._call(_get_operation, self._db, operation_id, inline="read")

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
        return await self._transact(_update_operation, params, inline="write")

    async def list_operations(
        self, namespace: NamespaceFilter = None, limit: int = 50, before_id: int | None = None
    ) -> list[Operation]:
        """Operations newest first, below ``before_id``, of ``namespace`` (None: all)."""
        queries = (aq.LIST_OPERATIONS, aq.LIST_OPERATIONS_OF, aq.LIST_OPERATIONS_IN)
        query, params = listing(queries, namespace, before_id, limit)
        return [operation_from_row(row) for row in await self._rows(query, params, inline="read")]


def _delete_namespace(conn: sqlite3.Connection, name: str, now: float | None) -> None:
    if conn.execute(aq.GET_NAMESPACE, (name,)).fetchone() is None:
        raise NotFoundError(f"no namespace named {name!r}")
    check_not_default(name)
    users = [row[0] for row in conn.execute(aq.NAMESPACE_USERS, {"name": name, "now": now})]
    check_unused(name, users)
    conn.execute(aq.DELETE_NAMESPACE, (name,))


def _revoke_token(conn: sqlite3.Connection, token_id: str, now: float) -> TokenRecord:
    row = conn.execute(aq.REVOKE_TOKEN, (now, token_id)).fetchone()
    if row is None:
        raise NotFoundError(f"no token with id {token_id!r}")
    # In the revocation's transaction: no console session outlives its token.
    conn.execute(aq.DELETE_TOKEN_SESSIONS, (token_id,))
    return stored_token(row)


def _put_session(conn: sqlite3.Connection, params: dict[str, Any]) -> None:
    if conn.execute(aq.INSERT_CONSOLE_SESSION, params).rowcount:
        return
    if conn.execute(aq.CONSOLE_SESSION_TAKEN, (params["hash"],)).fetchone() is not None:
        raise ConflictError("a console session with this id exists")
    raise NotFoundError(f"no live token with id {params['token_id']!r}")


def _execute_many(conn: sqlite3.Connection, sql: str, rows: Sequence[Row]) -> None:
    conn.executemany(sql, rows)


def _claim(conn: sqlite3.Connection, params: tuple[Any, ...]) -> IdempotencyRecord | None:
    # Under the write lock: the insert and the read see the same table, so one caller owns it.
    if conn.execute(aq.CLAIM_IDEMPOTENCY, params).rowcount:
        return None
    row = conn.execute(aq.GET_IDEMPOTENCY, params[:3]).fetchone()
    return idempotency_from_row(row)


def _get_operation(conn: sqlite3.Connection, operation_id: int) -> Operation:
    row = conn.execute(aq.GET_OPERATION, (operation_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no operation with id {operation_id}")
    return operation_from_row(row)


def _update_operation(conn: sqlite3.Connection, params: dict[str, Any]) -> Operation:
    conn.execute(aq.UPDATE_OPERATION, params)
    return _get_operation(conn, params["id"])
