"""Named SQL of the SQLite event store, and its rows turned into records.

State lists come from the delivery state machine (:mod:`cronbus.events.states`), never typed by
hand, and are rendered as the partial indexes of ``0003_events.sql`` are written, so SQLite
matches them.
"""

from __future__ import annotations

import json
from typing import Any

from ...events.records import SubscriptionSpec
from ...events.states import LIVE, DeliveryEvent, DeliveryState, sources
from ...states import sql_match
from ..event_rows import DELIVERY_COLUMNS, EVENT_COLUMNS, SUBSCRIPTION_FIELDS

SUBSCRIPTION_COLUMNS = ", ".join(f"s.{name}" for name in SUBSCRIPTION_FIELDS.split(", "))

Row = tuple[Any, ...]

WAITING = sources(DeliveryEvent.SEND)
"""Deliveries waiting to be pushed: pending (the fresh lane) and retry (the retry lane)."""

# -- topics and events ---------------------------------------------------------------------------
ENSURE_TOPIC = """
INSERT INTO topics (name, last_offset, namespace, created_at) VALUES (?, 0, ?, ?)
ON CONFLICT (name) DO NOTHING
"""
TOPIC_LAST_OFFSET = "SELECT last_offset, namespace FROM topics WHERE name = ?"
SET_LAST_OFFSET = "UPDATE topics SET last_offset = ? WHERE name = ?"
# Through the (topic, event_id, source) key of 0004_event_identity.sql: the caller matches the
# source, since an event's identity is its source and id.
KNOWN_IDS = """
SELECT event_id, source, offset FROM events
WHERE topic = ? AND event_id IN (SELECT value FROM json_each(?))
"""
INSERT_EVENT = """
INSERT INTO events (topic, offset, event_id, type, source, subject, time, datacontenttype, key,
                    data, published_at, trace)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
READ_EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM events e WHERE e.topic = ? AND e.offset > ? ORDER BY e.offset LIMIT ?
"""
TOPIC_ROW = "SELECT name, last_offset, max_age, max_events, namespace FROM topics WHERE name = ?"
TOPIC_NAMES = "SELECT name FROM topics ORDER BY name"
NAMESPACE_TOPIC_NAMES = "SELECT name FROM topics WHERE namespace = ? ORDER BY name"
TOPIC_EVENTS = "SELECT min(offset), count(*) FROM events WHERE topic = ?"
SET_RETENTION = """
INSERT INTO topics (name, last_offset, max_age, max_events, namespace, created_at)
VALUES (?, 0, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET max_age = excluded.max_age, max_events = excluded.max_events
"""
# Through events_by_time: one probe, not a scan of everything older.
OFFSET_AT = """
SELECT offset FROM events WHERE topic = ? AND published_at < ?
ORDER BY published_at DESC, offset DESC LIMIT 1
"""
RETAINED_TOPICS = """
SELECT name, last_offset, max_age, max_events FROM topics
WHERE max_age IS NOT NULL OR max_events IS NOT NULL ORDER BY name
"""
# One batch of trim candidates, with whether a live delivery still needs each.
TRIM_CANDIDATES = f"""
SELECT e.offset, EXISTS (
    SELECT 1 FROM deliveries d
    WHERE d.topic = e.topic AND d.offset = e.offset AND {sql_match("d.state", LIVE)})
FROM events e WHERE e.topic = :topic AND e.offset > :after AND e.offset <= :cut
ORDER BY e.offset LIMIT :limit
"""
# Retention keeps what some subscription (paused or not) has not matched yet: events above the
# lowest cursor of the topic's subscriptions (NULL: the topic has none).
CURSOR_FLOOR = "SELECT min(cursor) FROM subscriptions WHERE topic = ?"
DELETE_EVENTS = """
DELETE FROM events WHERE topic = ? AND offset IN (SELECT value FROM json_each(?))
"""

# -- subscriptions -------------------------------------------------------------------------------
# A replaced definition keeps the cursor, the lease and the paused state, unless it now reads
# another topic, whose offsets its old cursor does not describe.
_INSERT_SUBSCRIPTION = """
INSERT INTO subscriptions (name, topic, target, filter, policy, origin, start, cursor,
                           namespace, created_at, updated_at)
VALUES (:name, :topic, :target, :filter, :policy, :origin, :start, :cursor, :namespace, :now,
        :now)
"""
UPSERT_SUBSCRIPTION = f"""{_INSERT_SUBSCRIPTION}
ON CONFLICT (name) DO UPDATE SET topic = excluded.topic, target = excluded.target,
    filter = excluded.filter, policy = excluded.policy, origin = excluded.origin,
    start = excluded.start, updated_at = excluded.updated_at,
    cursor = CASE WHEN subscriptions.topic = excluded.topic THEN subscriptions.cursor
                  ELSE excluded.cursor END
WHERE subscriptions.namespace = excluded.namespace
"""
# Names are unique per store: a replace never moves a subscription to another namespace.
SUBSCRIPTION_NAMESPACE = "SELECT namespace FROM subscriptions WHERE name = ?"
# Creation only: the insert decides a race between two adds of one name (the unique name).
CREATE_SUBSCRIPTION = f"{_INSERT_SUBSCRIPTION} ON CONFLICT (name) DO NOTHING"
GET_SUBSCRIPTION = f"SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions s WHERE s.name = ?"
LIST_SUBSCRIPTIONS = f"""
SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions s
WHERE (:topic IS NULL OR s.topic = :topic) AND (:namespace IS NULL OR s.namespace = :namespace)
ORDER BY s.name
"""
SUBSCRIPTION_ID = "SELECT id FROM subscriptions WHERE name = ?"
# Pausing also drops the lease, which fences the holder; whoever takes the subscription after
# it is resumed bumps the epoch and gets its in-flight deliveries back (see TAKE_SUBSCRIPTIONS).
SET_PAUSED = """
UPDATE subscriptions SET paused = :paused, disabled_reason = :reason, updated_at = :now,
    holder = CASE WHEN :paused THEN NULL ELSE holder END,
    lease_expires_at = CASE WHEN :paused THEN NULL ELSE lease_expires_at END
WHERE name = :name
"""
DELETE_SUBSCRIPTION = "DELETE FROM subscriptions WHERE name = ? RETURNING id"
DELETE_SUBSCRIPTION_ATTEMPTS = """
DELETE FROM delivery_attempts WHERE delivery_id IN (
    SELECT id FROM deliveries WHERE subscription_id = ?)
"""
DELETE_SUBSCRIPTION_DELIVERIES = "DELETE FROM deliveries WHERE subscription_id = ?"
# A replay also lets go of the lease: the holder is fenced, and whoever takes the subscription
# next starts from the replayed cursor (an in-memory cursor must not overwrite it). The cursor
# stops at the topic's last offset, read in the same statement: a cursor beyond it would skip
# the events published next.
REPLAY = """
UPDATE subscriptions SET
    cursor = min(:after, coalesce(
        (SELECT t.last_offset FROM topics t WHERE t.name = subscriptions.topic), 0)),
    updated_at = :now, holder = NULL, lease_expires_at = NULL
WHERE name = :name
"""

# -- leases --------------------------------------------------------------------------------------
# A holder renews its own leases even after they expired, as long as nobody took them over:
# its in-flight deliveries are still its own, so the epoch stays.
RENEW_SUBSCRIPTIONS = """
UPDATE subscriptions SET lease_expires_at = :expires
WHERE holder = :holder AND paused = 0
RETURNING name, epoch
"""
FREE_SUBSCRIPTIONS = """
SELECT id FROM subscriptions
WHERE paused = 0 AND (holder IS NULL OR (holder != :holder AND lease_expires_at < :now))
ORDER BY lease_expires_at NULLS FIRST, id LIMIT :limit
"""
TAKE_SUBSCRIPTIONS = """
UPDATE subscriptions SET holder = :holder, lease_expires_at = :expires, epoch = epoch + 1
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING name, epoch
"""
# The previous holder's pushes in flight are lost: pushed again, without spending an attempt.
LOSE_IN_FLIGHT = f"""
UPDATE deliveries SET state = '{DeliveryState.PENDING}', updated_at = :now
WHERE subscription_id IN (SELECT value FROM json_each(:ids))
  AND {sql_match("state", sources(DeliveryEvent.LOSE))}
"""
RELEASE_SUBSCRIPTIONS = """
UPDATE subscriptions SET holder = NULL, lease_expires_at = NULL
WHERE holder = ? AND name IN (SELECT value FROM json_each(?))
"""

# -- cursors and deliveries ----------------------------------------------------------------------
# The fence: the lease's holder and epoch. An expired lease nobody took over still passes (its
# holder renews it on its next heartbeat); a takeover, a release or a pause does not.
FENCE = """
SELECT id, topic, coalesce(json_extract(policy, '$.ordered'), 0) FROM subscriptions
WHERE name = ? AND holder = ? AND epoch = ?
"""
SET_CURSOR = "UPDATE subscriptions SET cursor = ?, updated_at = ? WHERE id = ?"
INSERT_DELIVERY = f"""
INSERT INTO deliveries (subscription_id, topic, offset, event_id, key, state, attempts, due_at,
                        created_at, updated_at)
VALUES (?, ?, ?, ?, ?, '{DeliveryState.PENDING}', 0, ?, ?, ?)
"""
# An ordered subscription takes only the first live delivery of each key (by offset, then id,
# since a replay records an offset again); deliveries without a key are not held back. The
# bare `o.offset <= d.offset` bounds the index range, so the first of a key reads only itself.
_FIRST_OF_KEY = f"""
  AND (NOT :ordered OR d.key IS NULL OR NOT EXISTS (
      SELECT 1 FROM deliveries o
      WHERE o.subscription_id = d.subscription_id AND o.key = d.key
        AND o.key IS NOT NULL AND {sql_match("o.state", LIVE)}
        AND o.offset <= d.offset AND (o.offset < d.offset OR o.id < d.id)))
"""
# The fresh lane, in offset order straight from deliveries_by_subscription: pending deliveries
# are due when they are recorded, so no sort over a backlog is needed. (The planner picks the
# indexes of these queries unaided; tests/migration/test_sqlite_event_plans.py checks it.)
TAKE_FRESH = f"""
SELECT d.id FROM deliveries d
WHERE d.subscription_id = :sub AND d.state = '{DeliveryState.PENDING}' AND d.due_at <= :now
{_FIRST_OF_KEY}
ORDER BY d.offset, d.id LIMIT :limit
"""
# The retry lane: only the retries already due are read (through deliveries_waiting), then put
# in offset order; the many that wait for their backoff are never walked. The state is said
# twice because SQLite uses a partial index only when the query repeats its WHERE terms.
TAKE_RETRY = f"""
SELECT d.id FROM deliveries d
WHERE d.subscription_id = :sub AND {sql_match("d.state", WAITING)}
  AND d.state = '{DeliveryState.RETRY}' AND d.due_at <= :now
{_FIRST_OF_KEY}
ORDER BY d.offset, d.id LIMIT :limit
"""
SEND = f"""
UPDATE deliveries SET state = '{DeliveryState.IN_FLIGHT}', updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids))
  AND {sql_match("state", sources(DeliveryEvent.SEND))}
"""
DELIVERIES_WITH_EVENTS = f"""
SELECT {DELIVERY_COLUMNS}, {EVENT_COLUMNS}
FROM deliveries d
JOIN subscriptions s ON s.id = d.subscription_id
LEFT JOIN events e ON e.topic = d.topic AND e.offset = d.offset
WHERE d.id IN (SELECT value FROM json_each(?))
ORDER BY d.offset, d.id
"""
IN_FLIGHT = f"""
SELECT id FROM deliveries
WHERE id IN (SELECT value FROM json_each(?)) AND subscription_id = ?
  AND state = '{DeliveryState.IN_FLIGHT}'
"""
FINISH = f"""
UPDATE deliveries SET state = :state, attempts = attempts + :spent,
    due_at = coalesce(:due_at, due_at),
    updated_at = :now, last_status = :status, last_error = :error, last_response = :response
WHERE id = :id AND state = '{DeliveryState.IN_FLIGHT}'
"""
INSERT_ATTEMPT = """
INSERT INTO delivery_attempts (delivery_id, number, outcome, started_at, finished_at, status,
                               error, response)
SELECT :id, coalesce(max(number), 0) + 1, :outcome, :started_at, :finished_at, :status, :error,
       :response
FROM delivery_attempts WHERE delivery_id = :id
"""
# Two probes of deliveries_waiting (one per lane) rather than one scan over both.
NEXT_DUE = f"""
SELECT min(due) FROM (
    SELECT min(due_at) AS due FROM deliveries
    WHERE subscription_id = :sub AND {sql_match("state", WAITING)}
      AND state = '{DeliveryState.PENDING}'
    UNION ALL
    SELECT min(due_at) FROM deliveries
    WHERE subscription_id = :sub AND {sql_match("state", WAITING)}
      AND state = '{DeliveryState.RETRY}')
"""
GET_DELIVERY = f"""
SELECT {DELIVERY_COLUMNS}, {EVENT_COLUMNS}
FROM deliveries d
JOIN subscriptions s ON s.id = d.subscription_id
LEFT JOIN events e ON e.topic = d.topic AND e.offset = d.offset
WHERE d.id = ?
"""
LIST_DELIVERIES = f"""
SELECT {DELIVERY_COLUMNS} FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id
"""
LIST_ATTEMPTS = """
SELECT delivery_id, number, outcome, started_at, finished_at, status, error, response
FROM delivery_attempts WHERE delivery_id = ? ORDER BY number
"""
COUNT_DELIVERIES = """
SELECT d.state, count(*) FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id
WHERE s.name = ? GROUP BY d.state
"""
_REQUEUE = f"""
UPDATE deliveries SET state = '{DeliveryState.PENDING}', attempts = 0, due_at = :now,
    updated_at = :now
WHERE {sql_match("state", sources(DeliveryEvent.REQUEUE))}
"""
_OF_SUBSCRIPTION = "subscription_id = (SELECT id FROM subscriptions WHERE name = :name)"
REQUEUE_IDS = f"""{_REQUEUE}
  AND id IN (SELECT value FROM json_each(:ids)) AND (:name IS NULL OR {_OF_SUBSCRIPTION})
RETURNING id
"""
REQUEUE_SUBSCRIPTION = f"{_REQUEUE} AND {_OF_SUBSCRIPTION} RETURNING id"
REQUEUE_ALL = f"{_REQUEUE} RETURNING id"
# A dead-letter purge: dead deliveries only, with their attempts.
DEAD_DELIVERIES = f"""
SELECT id FROM deliveries
WHERE id IN (SELECT value FROM json_each(?)) AND {sql_match("state", [DeliveryState.DEAD])}
"""
DELETE_DELIVERY_ATTEMPTS = """
DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT value FROM json_each(?))
"""
DELETE_DELIVERIES = "DELETE FROM deliveries WHERE id IN (SELECT value FROM json_each(?))"


# -- rows ----------------------------------------------------------------------------------------


def subscription_params(spec: SubscriptionSpec, cursor: int, now: float) -> dict[str, Any]:
    """The named parameters of :data:`UPSERT_SUBSCRIPTION` and :data:`CREATE_SUBSCRIPTION`."""
    return {
        "name": spec.name,
        "topic": spec.topic,
        "target": json.dumps(spec.target, sort_keys=True),
        "filter": json.dumps(spec.filter, sort_keys=True),
        "policy": json.dumps(spec.policy.to_json(), sort_keys=True),
        "origin": spec.origin.value,
        "start": spec.start,
        "cursor": cursor,
        "namespace": spec.namespace,
        "now": now,
    }
