"""Named SQL of the SQLite store's admin tables (namespaces, tokens, audit, idempotency,
operations). Lists travel as JSON text and are opened with ``json_each``."""

from __future__ import annotations

from ...admin_records import OperationState
from ..admin_ports import TOUCH_EVERY

_TERMINAL = ", ".join(f"'{state.value}'" for state in OperationState if state.terminal)
"""Ended operations' states, as SQL literals (enum constants, never user input)."""

# -- namespaces ----------------------------------------------------------------------------
INSERT_NAMESPACE = """
INSERT INTO namespaces (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING
RETURNING name, created_at
"""
GET_NAMESPACE = "SELECT name, created_at FROM namespaces WHERE name = ?"
LIST_NAMESPACES = "SELECT name, created_at FROM namespaces ORDER BY name"
DELETE_NAMESPACE = "DELETE FROM namespaces WHERE name = ?"
# What still lives in a namespace, by kind (each an index probe on its namespace column).
# A token counts while not revoked and, when :now is given, not expired.
NAMESPACE_USERS = """
SELECT 'jobs' WHERE EXISTS (SELECT 1 FROM jobs WHERE namespace = :name)
UNION ALL SELECT 'runs' WHERE EXISTS (SELECT 1 FROM runs WHERE namespace = :name)
UNION ALL SELECT 'topics' WHERE EXISTS (SELECT 1 FROM topics WHERE namespace = :name)
UNION ALL SELECT 'subscriptions'
    WHERE EXISTS (SELECT 1 FROM subscriptions WHERE namespace = :name)
UNION ALL SELECT 'tokens' WHERE EXISTS (
    SELECT 1 FROM tokens, json_each(tokens.namespaces) AS n
    WHERE n.value = :name AND tokens.revoked_at IS NULL
      AND (:now IS NULL OR tokens.expires_at IS NULL OR tokens.expires_at > :now))
"""

# -- tokens --------------------------------------------------------------------------------
_TOKEN = """id, name, hash, scope, namespaces, created_at, created_by, expires_at, revoked_at,
    last_used_at, payloads"""
INSERT_TOKEN = f"""
INSERT INTO tokens ({_TOKEN}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
"""
GET_TOKEN = f"SELECT {_TOKEN} FROM tokens WHERE id = ?"
TOKEN_BY_HASH = f"SELECT {_TOKEN} FROM tokens WHERE hash = ?"
LIST_TOKENS = f"SELECT {_TOKEN} FROM tokens ORDER BY created_at, id"
REVOKE_TOKEN = f"""
UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ? RETURNING {_TOKEN}
"""
_TOUCH_DUE = f"id = :id AND (last_used_at IS NULL OR last_used_at <= :now - {TOUCH_EVERY})"
TOUCH_DUE = f"SELECT 1 FROM tokens WHERE {_TOUCH_DUE}"
TOUCH_TOKEN = f"UPDATE tokens SET last_used_at = :now WHERE {_TOUCH_DUE}"

# -- console sessions ----------------------------------------------------------------------
# Only for a token that exists and is not revoked: a session is never opened for a dead token.
INSERT_CONSOLE_SESSION = """
INSERT INTO console_sessions (hash, token_id, created_at, last_seen_at, expires_at)
SELECT :hash, id, :created_at, :last_seen_at, :expires_at FROM tokens
WHERE id = :token_id AND revoked_at IS NULL
ON CONFLICT DO NOTHING
"""
CONSOLE_SESSION_TAKEN = "SELECT 1 FROM console_sessions WHERE hash = ?"
_TOKEN_OF_SESSION = ", ".join("t." + column.strip() for column in _TOKEN.split(","))
CONSOLE_SESSION = f"""
SELECT s.hash, s.token_id, s.created_at, s.last_seen_at, s.expires_at, {_TOKEN_OF_SESSION}
FROM console_sessions AS s JOIN tokens AS t ON t.id = s.token_id WHERE s.hash = ?
"""
TOUCH_CONSOLE_SESSION = f"""
UPDATE console_sessions SET last_seen_at = :now
WHERE hash = :hash AND last_seen_at <= :now - {TOUCH_EVERY}
"""
DELETE_CONSOLE_SESSION = "DELETE FROM console_sessions WHERE hash = ?"
DELETE_TOKEN_SESSIONS = "DELETE FROM console_sessions WHERE token_id = ?"
TRIM_CONSOLE_SESSIONS = """
DELETE FROM console_sessions WHERE expires_at <= :now OR last_seen_at <= :now - :idle
"""

# -- audit ---------------------------------------------------------------------------------
INSERT_AUDIT = """
INSERT INTO audit (at, actor, namespace, action, resource, detail) VALUES (?, ?, ?, ?, ?, ?)
"""
_AUDIT = "SELECT id, at, actor, namespace, action, resource, detail FROM audit"
LIST_AUDIT = f"{_AUDIT} WHERE id < :before ORDER BY id DESC LIMIT :limit"
LIST_AUDIT_OF = f"""
{_AUDIT} WHERE namespace = :namespace AND id < :before ORDER BY id DESC LIMIT :limit
"""
LIST_AUDIT_IN = f"""
{_AUDIT} WHERE namespace IN (SELECT value FROM json_each(:namespaces)) AND id < :before
ORDER BY id DESC LIMIT :limit
"""

# -- idempotency ---------------------------------------------------------------------------
CLAIM_IDEMPOTENCY = """
INSERT INTO idempotency (token_id, route, key, body_hash, status, response, created_at)
VALUES (?, ?, ?, ?, 0, NULL, ?) ON CONFLICT DO NOTHING
"""
GET_IDEMPOTENCY = """
SELECT token_id, route, key, body_hash, status, response, created_at FROM idempotency
WHERE token_id = ? AND route = ? AND key = ?
"""
FINISH_IDEMPOTENCY = """
UPDATE idempotency SET status = ?, response = ? WHERE token_id = ? AND route = ? AND key = ?
"""
RELEASE_IDEMPOTENCY = """
DELETE FROM idempotency WHERE token_id = ? AND route = ? AND key = ? AND status = 0
"""
TRIM_IDEMPOTENCY = "DELETE FROM idempotency WHERE created_at < ?"

# -- operations ----------------------------------------------------------------------------
_OPERATION = """id, namespace, kind, request, state, total, done, failed, error, created_by,
    created_at, updated_at"""
INSERT_OPERATION = f"""
INSERT INTO operations (namespace, kind, request, state, total, created_by, created_at,
                        updated_at)
VALUES (:namespace, :kind, :request, :state, :total, :created_by, :now, :now)
RETURNING {_OPERATION}
"""
GET_OPERATION = f"SELECT {_OPERATION} FROM operations WHERE id = ?"
# An ended operation is left as it is: the runner of an aborted one reads that it was aborted.
UPDATE_OPERATION = f"""
UPDATE operations SET state = coalesce(:state, state), total = coalesce(:total, total),
    done = coalesce(:done, done), failed = coalesce(:failed, failed),
    error = coalesce(:error, error), updated_at = :now
WHERE id = :id AND state NOT IN ({_TERMINAL})
"""
LIST_OPERATIONS = f"""
SELECT {_OPERATION} FROM operations WHERE id < :before ORDER BY id DESC LIMIT :limit
"""
LIST_OPERATIONS_OF = f"""
SELECT {_OPERATION} FROM operations WHERE namespace = :namespace AND id < :before
ORDER BY id DESC LIMIT :limit
"""
LIST_OPERATIONS_IN = f"""
SELECT {_OPERATION} FROM operations
WHERE namespace IN (SELECT value FROM json_each(:namespaces)) AND id < :before
ORDER BY id DESC LIMIT :limit
"""
