"""Named SQL of the PostgreSQL store's admin tables (namespaces, tokens, audit, idempotency,
operations). As in :mod:`.sql`: tables are unqualified (the connection's ``search_path`` is the
store's schema), and batches travel as binary arrays (``%(name)b``, ``unnest``)."""

from __future__ import annotations

from ...admin_records import OperationState
from ..admin_ports import TOUCH_EVERY

_TERMINAL = ", ".join(f"'{state.value}'" for state in OperationState if state.terminal)
"""Ended operations' states, as SQL literals (enum constants, never user input)."""

# -- namespaces ----------------------------------------------------------------------------
INSERT_NAMESPACE = """
INSERT INTO namespaces (name, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING
RETURNING name, created_at
"""
GET_NAMESPACE = "SELECT name, created_at FROM namespaces WHERE name = %s"
# Locks the row, so two deletes of one namespace do not both pass their checks.
LOCK_NAMESPACE = "SELECT name FROM namespaces WHERE name = %s FOR UPDATE"
LIST_NAMESPACES = "SELECT name, created_at FROM namespaces ORDER BY name"
DELETE_NAMESPACE = "DELETE FROM namespaces WHERE name = %s"
# What still lives in a namespace, by kind (each an index probe on its namespace column).
# A token counts while not revoked and, when now is given, not expired.
NAMESPACE_USERS = """
SELECT 'jobs' WHERE EXISTS (SELECT 1 FROM jobs WHERE namespace = %(name)s)
UNION ALL SELECT 'runs' WHERE EXISTS (SELECT 1 FROM runs WHERE namespace = %(name)s)
UNION ALL SELECT 'topics' WHERE EXISTS (SELECT 1 FROM topics WHERE namespace = %(name)s)
UNION ALL SELECT 'subscriptions'
    WHERE EXISTS (SELECT 1 FROM subscriptions WHERE namespace = %(name)s)
UNION ALL SELECT 'tokens' WHERE EXISTS (
    SELECT 1 FROM tokens
    WHERE %(name)s = ANY(namespaces) AND revoked_at IS NULL
      AND (%(now)s::float8 IS NULL OR expires_at IS NULL OR expires_at > %(now)s::float8))
"""

# -- tokens --------------------------------------------------------------------------------
_TOKEN = """id, name, hash, scope, namespaces, created_at, created_by, expires_at, revoked_at,
    last_used_at, payloads"""
INSERT_TOKEN = f"""
INSERT INTO tokens ({_TOKEN}) VALUES (%s, %s, %s, %s, %s::text[], %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
"""
GET_TOKEN = f"SELECT {_TOKEN} FROM tokens WHERE id = %s"
TOKEN_BY_HASH = f"SELECT {_TOKEN} FROM tokens WHERE hash = %s"
LIST_TOKENS = f"SELECT {_TOKEN} FROM tokens ORDER BY created_at, id"
# The token's console sessions go in the same statement: a revoked token keeps no login.
REVOKE_TOKEN = f"""
WITH ended AS (DELETE FROM console_sessions WHERE token_id = %(id)s)
UPDATE tokens SET revoked_at = coalesce(revoked_at, %(now)s) WHERE id = %(id)s
RETURNING {_TOKEN}
"""
TOUCH_TOKEN = f"""
UPDATE tokens SET last_used_at = %(now)s
WHERE id = %(id)s AND (last_used_at IS NULL OR last_used_at <= %(now)s - {TOUCH_EVERY})
"""

# -- console sessions ----------------------------------------------------------------------
# Only for a token that exists and is not revoked: a session is never opened for a dead token.
INSERT_CONSOLE_SESSION = """
INSERT INTO console_sessions (hash, token_id, created_at, last_seen_at, expires_at)
SELECT %(hash)s, id, %(created_at)s, %(last_seen_at)s, %(expires_at)s FROM tokens
WHERE id = %(token_id)s AND revoked_at IS NULL
ON CONFLICT DO NOTHING
"""
CONSOLE_SESSION_TAKEN = "SELECT 1 FROM console_sessions WHERE hash = %s"
_TOKEN_OF_SESSION = ", ".join("t." + column.strip() for column in _TOKEN.split(","))
CONSOLE_SESSION = f"""
SELECT s.hash, s.token_id, s.created_at, s.last_seen_at, s.expires_at, {_TOKEN_OF_SESSION}
FROM console_sessions AS s JOIN tokens AS t ON t.id = s.token_id WHERE s.hash = %s
"""
TOUCH_CONSOLE_SESSION = f"""
UPDATE console_sessions SET last_seen_at = %(now)s
WHERE hash = %(hash)s AND last_seen_at <= %(now)s - {TOUCH_EVERY}
"""
DELETE_CONSOLE_SESSION = "DELETE FROM console_sessions WHERE hash = %s"
TRIM_CONSOLE_SESSIONS = """
DELETE FROM console_sessions
WHERE expires_at <= %(now)s OR last_seen_at <= %(now)s::float8 - %(idle)s::float8
"""

# -- audit ---------------------------------------------------------------------------------
# In the order given: the ids follow it.
INSERT_AUDIT = """
INSERT INTO audit (at, actor, namespace, action, resource, detail)
SELECT n.at, n.actor, n.namespace, n.action, n.resource, n.detail::jsonb
FROM unnest(%(at)b::float8[], %(actor)b::text[], %(namespace)b::text[], %(action)b::text[],
            %(resource)b::text[], %(detail)b::text[])
    WITH ORDINALITY AS n(at, actor, namespace, action, resource, detail, ord)
ORDER BY n.ord
"""
_AUDIT = "SELECT id, at, actor, namespace, action, resource, detail FROM audit"
LIST_AUDIT = f"{_AUDIT} WHERE id < %(before)s ORDER BY id DESC LIMIT %(limit)s"
LIST_AUDIT_OF = f"""
{_AUDIT} WHERE namespace = %(namespace)s AND id < %(before)s ORDER BY id DESC LIMIT %(limit)s
"""
LIST_AUDIT_IN = f"""
{_AUDIT} WHERE namespace = ANY(%(namespaces)s::text[]) AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""

# -- idempotency ---------------------------------------------------------------------------
# A conflicting claim not yet committed makes this insert wait for it, then do nothing: the
# read that follows, a statement of its own, sees the winner's row.
CLAIM_IDEMPOTENCY = """
INSERT INTO idempotency (token_id, route, key, body_hash, status, response, created_at)
VALUES (%s, %s, %s, %s, 0, NULL, %s) ON CONFLICT DO NOTHING RETURNING 1
"""
GET_IDEMPOTENCY = """
SELECT token_id, route, key, body_hash, status, response, created_at FROM idempotency
WHERE token_id = %s AND route = %s AND key = %s
"""
FINISH_IDEMPOTENCY = """
UPDATE idempotency SET status = %s, response = %s
WHERE token_id = %s AND route = %s AND key = %s
"""
RELEASE_IDEMPOTENCY = """
DELETE FROM idempotency WHERE token_id = %s AND route = %s AND key = %s AND status = 0
"""
TRIM_IDEMPOTENCY = "DELETE FROM idempotency WHERE created_at < %s"

# -- operations ----------------------------------------------------------------------------
_OPERATION = """id, namespace, kind, request, state, total, done, failed, error, created_by,
    created_at, updated_at"""
INSERT_OPERATION = f"""
INSERT INTO operations (namespace, kind, request, state, total, created_by, created_at,
                        updated_at)
VALUES (%(namespace)s, %(kind)s, %(request)s, %(state)s, %(total)s, %(created_by)s, %(now)s,
        %(now)s)
RETURNING {_OPERATION}
"""
GET_OPERATION = f"SELECT {_OPERATION} FROM operations WHERE id = %s"
# An ended operation is left as it is: the runner of an aborted one reads that it was aborted.
UPDATE_OPERATION = f"""
UPDATE operations SET state = coalesce(%(state)s, state), total = coalesce(%(total)s, total),
    done = coalesce(%(done)s, done), failed = coalesce(%(failed)s, failed),
    error = coalesce(%(error)s, error), updated_at = %(now)s
WHERE id = %(id)s AND state NOT IN ({_TERMINAL})
"""
LIST_OPERATIONS = f"""
SELECT {_OPERATION} FROM operations WHERE id < %(before)s ORDER BY id DESC LIMIT %(limit)s
"""
LIST_OPERATIONS_OF = f"""
SELECT {_OPERATION} FROM operations WHERE namespace = %(namespace)s AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""
LIST_OPERATIONS_IN = f"""
SELECT {_OPERATION} FROM operations WHERE namespace = ANY(%(namespaces)s::text[])
    AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""
