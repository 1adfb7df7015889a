"""Named SQL of the SQLite store's alert tables (rules, states, silences, history)."""

from __future__ import annotations

from ..alert_ports import HISTORY_COLUMNS, RULE_COLUMNS, SILENCE_COLUMNS, STATE_COLUMNS

# -- rules ---------------------------------------------------------------------------------
INSERT_RULE = """
INSERT INTO alert_rules (name, namespace, kind, body, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
"""
GET_RULE = f"SELECT {RULE_COLUMNS} FROM alert_rules WHERE name = ?"
LIST_RULES = f"SELECT {RULE_COLUMNS} FROM alert_rules ORDER BY name"
LIST_RULES_OF = f"SELECT {RULE_COLUMNS} FROM alert_rules WHERE namespace = ? ORDER BY name"
DELETE_RULE = "DELETE FROM alert_rules WHERE name = ? RETURNING namespace"
DELETE_RULE_STATES = "DELETE FROM alert_states WHERE namespace = ? AND rule = ?"
DELETE_RULE_SILENCE = "DELETE FROM alert_silences WHERE namespace = ? AND rule = ?"

# -- states --------------------------------------------------------------------------------
LIST_STATES = f"SELECT {STATE_COLUMNS} FROM alert_states ORDER BY namespace, rule, subject"
LIST_STATES_OF = f"""
SELECT {STATE_COLUMNS} FROM alert_states WHERE namespace = ? ORDER BY rule, subject
"""
PUT_STATE = f"""
INSERT OR REPLACE INTO alert_states ({STATE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
DELETE_STATE = "DELETE FROM alert_states WHERE namespace = ? AND rule = ? AND subject = ?"

# -- silences ------------------------------------------------------------------------------
PUT_SILENCE = f"INSERT OR REPLACE INTO alert_silences ({SILENCE_COLUMNS}) VALUES (?, ?, ?, ?, ?)"
DELETE_SILENCE = "DELETE FROM alert_silences WHERE namespace = ? AND rule = ?"
LIST_SILENCES = f"SELECT {SILENCE_COLUMNS} FROM alert_silences ORDER BY namespace, rule"
LIST_SILENCES_OF = f"""
SELECT {SILENCE_COLUMNS} FROM alert_silences WHERE namespace = ? ORDER BY rule
"""

# -- history -------------------------------------------------------------------------------
INSERT_HISTORY = f"""
INSERT INTO alert_history ({HISTORY_COLUMNS.removeprefix("id, ")}) VALUES (?, ?, ?, ?, ?, ?, ?)
"""
# One statement per filter, so each reads one range of its index.
LIST_HISTORY = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history WHERE id < :before ORDER BY id DESC LIMIT :limit
"""
LIST_HISTORY_OF = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history
WHERE namespace = :namespace AND id < :before ORDER BY id DESC LIMIT :limit
"""
LIST_HISTORY_OF_RULE = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history
WHERE namespace = :namespace AND rule = :rule AND id < :before ORDER BY id DESC LIMIT :limit
"""
LIST_HISTORY_OF_ANY_RULE = f"""
SELECT {HISTORY_COLUMNS} FROM alert_history
WHERE rule = :rule AND id < :before ORDER BY id DESC LIMIT :limit
"""
TRIM_HISTORY = """
DELETE FROM alert_history WHERE id IN (
    SELECT id FROM alert_history WHERE at < ? ORDER BY at LIMIT ?)
"""
