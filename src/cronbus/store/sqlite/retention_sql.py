"""The SQL of retention on SQLite (:mod:`.retention`): finished runs oldest first, and the
deletes of one batch. States are rendered by :mod:`cronbus.states`, never from input."""

from __future__ import annotations

from ...events.states import LIVE, DeliveryState
from ...states import TERMINAL, sql_in, sql_match

_TERMINAL = sql_in(TERMINAL)
ENDED = (DeliveryState.ACKED, DeliveryState.DEAD)
_LIVE_RUN = f"NOT {sql_match('c.state', TERMINAL)}"

# A run is held while a child of it is live (runs_by_parent, 0013), and a child while its
# parent exists: families go parent first, then their children, already old, as orphans.
_HELD = f"""(
    EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.id AND {_LIVE_RUN})
    OR (r.parent_id IS NOT NULL AND EXISTS (SELECT 1 FROM runs p WHERE p.id = r.parent_id)))"""

# Through runs_finished (namespace, finished_at, state): a range of one namespace, from the
# keyset position (finished_at, id) on; the states are checked from the index entry.
FINISHED_RUNS = f"""
SELECT r.id, r.finished_at, r.state, r.task, {_HELD}
FROM runs r INDEXED BY runs_finished
WHERE r.namespace = :namespace AND r.finished_at IS NOT NULL
  AND r.finished_at >= :from_at AND r.finished_at <= :before
  AND (r.finished_at > :from_at OR r.id > :from_id)
  AND r.state IN {{states}}
ORDER BY r.finished_at, r.id LIMIT :limit
"""

# The deleting transaction's check of a batch: still finished, not held, with the time each
# ended (compared with the time read in Python: both are the same stored doubles).
STILL_DUE = f"""
SELECT r.id, r.finished_at FROM runs r
WHERE r.id IN (SELECT value FROM json_each(?)) AND r.state IN {_TERMINAL} AND NOT {_HELD}
"""
_IDS = "(SELECT value FROM json_each(?))"
DELETE_RUNS = (
    f"DELETE FROM attempts WHERE run_id IN {_IDS}",
    f"DELETE FROM run_payloads WHERE run_id IN {_IDS}",
    f"DELETE FROM fanouts WHERE run_id IN {_IDS}",
    f"DELETE FROM runs WHERE id IN {_IDS}",
)

# Through deliveries_ended (subscription_id, state, updated_at), 0013. SQLite uses a partial
# index only when the query repeats its condition word for word.
ENDED_DELIVERIES = f"""
SELECT id FROM deliveries INDEXED BY deliveries_ended
WHERE {sql_match("state", ENDED)} AND subscription_id = ? AND state = ? AND updated_at <= ?
ORDER BY updated_at LIMIT ?
"""
DELETE_DELIVERIES = (
    f"DELETE FROM delivery_attempts WHERE delivery_id IN {_IDS}",
    f"DELETE FROM deliveries WHERE id IN {_IDS}",
)

# Events of one topic: the lowest cursor of its subscriptions, and a batch of offsets in a
# range of the primary key with whether a live delivery still needs each (those stay; the next
# batch starts after them).
CURSOR_FLOOR = "SELECT min(cursor) FROM subscriptions WHERE topic = ?"
OLD_EVENTS = f"""
SELECT e.offset, EXISTS (
    SELECT 1 FROM deliveries d
    WHERE d.topic = e.topic AND d.offset = e.offset AND {sql_match("d.state", LIVE)})
FROM events e
WHERE e.topic = :topic AND e.offset > :after AND e.offset <= :cut
ORDER BY e.offset LIMIT :limit
"""
DELETE_EVENTS = f"DELETE FROM events WHERE topic = ? AND offset IN {_IDS}"
