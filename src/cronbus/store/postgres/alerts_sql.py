"""Named SQL of the PostgreSQL store's alert tables (rules, states, silences, history). As in
:mod:`.sql`: tables are unqualified (the connection's ``search_path`` is the store's schema)."""

from __future__ import annotations

from ..alert_ports import HISTORY_COLUMNS, RULE_COLUMNS, SILENCE_COLUMNS, STATE_COLUMNS

# -- rules ---------------------------------------------------------------------------------
INSERT_RULE = """
INSERT INTO alert_rules (name, namespace, kind, body, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
"""
GET_RULE = f"SELECT {RULE_COLUMNS} FROM alert_rules WHERE name = %s"
LIST_RULES = f"SELECT {RULE_COLUMNS} FROM alert_rules ORDER BY name"
LIST_RULES_OF = f"SELECT {RULE_COLUMNS} FROM alert_rules WHERE namespace = %s ORDER BY name"
# The rule, its states and its silence go together (one statement, one snapshot).
DELETE_RULE = """
WITH gone AS (DELETE FROM alert_rules WHERE name = %(name)s RETURNING namespace),
states AS (
    DELETE FROM alert_states
    WHERE rule = %(name)s AND namespace IN (SELECT namespace FROM gone)),
silences AS (
    DELETE FROM alert_silences
    WHERE rule = %(name)s AND namespace IN (SELECT namespace FROM gone))
SELECT namespace FROM gone
"""

# -- states --------------------------------------------------------------------------------
LIST_STATES = f"SELECT {STATE_COLUMNS} FROM alert_states ORDER BY namespace, rule, subject"
LIST_STATES_OF = f"""
SELECT {STATE_COLUMNS} FROM alert_states WHERE namespace = %s ORDER BY rule, subject
"""
PUT_STATE = f"""
INSERT INTO alert_states ({STATE_COLUMNS})
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, rule, subject) DO UPDATE SET
    firing = excluded.firing, since = excluded.since, message = excluded.message,
    notified_at = excluded.notified_at, notice = excluded.notice,
    notice_message = excluded.notice_message, pending = excluded.pending,
    updated_at = excluded.updated_at
"""
DELETE_STATE = "DELETE FROM alert_states WHERE namespace = %s AND rule = %s AND subject = %s"

# -- silences ------------------------------------------------------------------------------
PUT_SILENCE = f"""
INSERT INTO alert_silences ({SILENCE_COLUMNS}) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (namespace, rule) DO UPDATE SET
    until = excluded.until, reason = excluded.reason, created_at = excluded.created_at
"""
DELETE_SILENCE = "DELETE FROM alert_silences WHERE namespace = %s AND rule = %s"
LIST_SILENCES = f"SELECT {SILENCE_COLUMNS} FROM alert_silences ORDER BY namespace, rule"
LIST_SILENCES_OF = f"""
SELECT {SILENCE_COLUMNS} FROM alert_silences WHERE namespace = %s ORDER BY rule
"""

# -- history -------------------------------------------------------------------------------
INSERT_HISTORY = f"""
INSERT INTO alert_history ({HISTORY_COLUMNS.removeprefix("id, ")})
VALUES (%s, %s, %s, %s, %s, %s, %s)
"""
# One statement per filter, so each reads one range of its index.
LIST_HISTORY = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history WHERE id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""
LIST_HISTORY_OF = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history
WHERE namespace = %(namespace)s AND id < %(before)s ORDER BY id DESC LIMIT %(limit)s
"""
LIST_HISTORY_OF_RULE = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history
WHERE namespace = %(namespace)s AND rule = %(rule)s AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""
LIST_HISTORY_OF_ANY_RULE = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history
WHERE rule = %(rule)s AND id < %(before)s ORDER BY id DESC LIMIT %(limit)s
"""
TRIM_HISTORY = """
DELETE FROM alert_history WHERE id IN (
    SELECT id FROM alert_history WHERE at < %s ORDER BY at LIMIT %s)
"""
