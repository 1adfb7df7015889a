"""Row layouts of the admin tables shared by both stores: row converters, the parameters of an
operation's update, and the statement choice of a keyset listing.

Both stores select tokens, audit entries, idempotency records and operations in the same column
orders and build the records here, as :mod:`cronbus.store.event_rows` does for the event bus, so
the SQLite and PostgreSQL stores cannot drift apart. ``decode`` reads a JSON column (text in
SQLite; PostgreSQL's jsonb and text[] arrive decoded: pass
:func:`~cronbus.store.event_rows.decoded`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..admin_records import (
    AuditEntry,
    ConsoleSession,
    IdempotencyRecord,
    Operation,
    OperationState,
    TokenRecord,
)
from .admin_ports import NO_CURSOR, NamespaceFilter, filter_names

Row = Sequence[Any]
Decode = Callable[[Any], Any]


def listing(
    queries: tuple[str, str, str],
    namespace: NamespaceFilter,
    before_id: int | None,
    limit: int,
    names: Callable[[list[str]], Any] = json.dumps,
) -> tuple[str, dict[str, Any]]:
    """The statement and parameters of a keyset listing: every row, one namespace, or several
    (``names`` turns the list into the store's parameter: JSON text in SQLite, an array in
    PostgreSQL)."""
    every, one, several = queries
    params: dict[str, Any] = {
        "before": NO_CURSOR if before_id is None else before_id,
        "limit": limit,
    }
    chosen = filter_names(namespace)
    if chosen is None:
        return every, params
    if len(chosen) == 1:
        return one, {**params, "namespace": chosen[0]}
    return several, {**params, "namespaces": names(chosen)}


def operation_changes(
    operation_id: int,
    now: float,
    state: OperationState | None,
    total: int | None,
    done: int | None,
    failed: int | None,
    error: str | None,
) -> dict[str, Any]:
    """The parameters of ``UPDATE_OPERATION`` (None: keep the stored value)."""
    return {
        "id": operation_id,
        "now": now,
        "state": None if state is None else state.value,
        "total": total,
        "done": done,
        "failed": failed,
        "error": error,
    }


def token_from_row(row: Row, decode: Decode = json.loads) -> TokenRecord:
    """A :class:`TokenRecord` from the tokens' column order."""
    return TokenRecord(
        id=row[0],
        name=row[1],
        hash=row[2],
        scope=row[3],
        namespaces=tuple(decode(row[4])),
        created_at=row[5],
        created_by=row[6],
        expires_at=row[7],
        revoked_at=row[8],
        last_used_at=row[9],
    )


def audit_from_row(row: Row, decode: Decode = json.loads) -> AuditEntry:
    """An :class:`AuditEntry` from the audit's column order."""
    return AuditEntry(
        id=row[0],
        at=row[1],
        actor=row[2],
        namespace=row[3],
        action=row[4],
        resource=row[5],
        detail=decode(row[6]),
    )


def idempotency_from_row(row: Row, decode: Decode = json.loads) -> IdempotencyRecord:
    """An :class:`IdempotencyRecord` from the idempotency table's column order."""
    return IdempotencyRecord(
        token_id=row[0],
        route=row[1],
        key=row[2],
        body_hash=row[3],
        status=row[4],
        response=None if row[5] is None else decode(row[5]),
        created_at=row[6],
    )


def operation_from_row(row: Row, decode: Decode = json.loads) -> Operation:
    """An :class:`Operation` from the operations' column order."""
    return Operation(
        id=row[0],
        namespace=row[1],
        kind=row[2],
        request=decode(row[3]),
        state=OperationState(row[4]),
        total=row[5],
        done=row[6],
        failed=row[7],
        error=row[8],
        created_by=row[9],
        created_at=row[10],
        updated_at=row[11],
    )


def console_session_from_row(row: Row) -> ConsoleSession:
    """A :class:`ConsoleSession` from its five columns (hash, token, created, seen, expires)."""
    return ConsoleSession(
        hash=row[0], token_id=row[1], created_at=row[2], last_seen_at=row[3], expires_at=row[4]
    )


def session_params(session: ConsoleSession) -> dict[str, Any]:
    """The named parameters of a session's insert."""
    return {
        "hash": session.hash,
        "token_id": session.token_id,
        "created_at": session.created_at,
        "last_seen_at": session.last_seen_at,
        "expires_at": session.expires_at,
    }
