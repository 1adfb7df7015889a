"""Named SQL of the PostgreSQL event store (topics, subscriptions, leases, deliveries).

As in :mod:`.sql`: tables are unqualified (the connection's ``search_path`` is the
store's schema), batches travel as binary arrays (``%(name)b``, ``unnest``), and every state
list comes from the delivery state machine (:mod:`cronbus.events.states`), rendered as the
partial indexes of ``0003_events.sql`` are written so that the planner matches them.

Fencing: a holder's change is applied only while the subscription's ``holder`` and ``epoch``
are still the holder's. Takes and finishes first lock the subscription row ``FOR SHARE``
(:data:`FENCE`) in a statement of their own, so that their work statement, which checks the
fence again, reads a snapshot taken after any takeover that got there first; a takeover
(``FOR UPDATE SKIP LOCKED``) never waits for them and they wait for it.
"""

from __future__ import annotations

from ...events.states import LIVE, DeliveryEvent, DeliveryState, sources, transition
from ...states import sql_in, sql_match
from ..event_rows import DELIVERY_COLUMNS, EVENT_COLUMNS, SUBSCRIPTION_FIELDS


def _state(state: DeliveryState) -> str:
    """One state as an SQL literal (enum constants, never user input)."""
    return f"'{state.value}'"


WAITING = sources(DeliveryEvent.SEND)
"""Deliveries waiting to be pushed: pending (the fresh lane) and retry (the retry lane)."""
PENDING = _state(DeliveryState.PENDING)
RETRY = _state(DeliveryState.RETRY)
DEAD = _state(DeliveryState.DEAD)
IN_FLIGHT = _state(transition(DeliveryState.PENDING, DeliveryEvent.SEND))
# A takeover loses the pushes of the holder that died: in flight → pending, no attempt spent.
(_LOST_FROM,) = sources(DeliveryEvent.LOSE)
LOST_FROM = _state(_LOST_FROM)
LOST_TO = _state(transition(_LOST_FROM, DeliveryEvent.LOSE))
REQUEUE_TO = _state(transition(DeliveryState.DEAD, DeliveryEvent.REQUEUE))

SUBSCRIPTION_COLUMNS = SUBSCRIPTION_FIELDS

# -- append --------------------------------------------------------------------------------------
# Offsets are given in commit order: the topic's row stays locked until the commit, so the next
# append to the topic numbers after this one and commits after it. ON CONFLICT ... WHERE false
# locks an existing row without writing a new version of it.
LOCK_TOPIC = """
INSERT INTO topics (name, namespace, created_at) VALUES (%(topic)s, %(namespace)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET last_offset = topics.last_offset WHERE false
"""
# A statement of its own after LOCK_TOPIC (same round trip): its snapshot is taken once the lock
# is held, so it sees every event committed by earlier appends to the topic and no event can be
# numbered twice. An event's identity is its source and id (CloudEvents): events already stored
# report their offset (found through the (topic, event_id, source) key); a repeat within the
# batch reports its first occurrence's. A topic of another namespace moves no offset, so nothing
# is inserted, and every row names the topic's namespace for the caller to refuse the append.
APPEND = """
WITH input AS (
    SELECT * FROM unnest(
        %(event_id)b::text[], %(type)b::text[], %(source)b::text[], %(subject)b::text[],
        %(time)b::float8[], %(datacontenttype)b::text[], %(key)b::text[], %(data)b::text[],
        %(trace)b::text[]
    ) WITH ORDINALITY AS n(
        event_id, type, source, subject, time, datacontenttype, key, data, trace, ord)
),
stored AS (
    SELECT e.event_id, e.source, e."offset" FROM events e
    WHERE e.topic = %(topic)s AND e.event_id = ANY(%(event_id)b::text[])
),
fresh AS (
    SELECT DISTINCT ON (i.event_id, i.source) i.* FROM input i
    WHERE NOT EXISTS (
        SELECT 1 FROM stored s WHERE s.event_id = i.event_id AND s.source = i.source)
    ORDER BY i.event_id, i.source, i.ord
),
moved AS (
    UPDATE topics t
    SET last_offset = t.last_offset + c.n, events = t.events + c.n
    FROM (SELECT count(*) AS n FROM fresh) c
    WHERE t.name = %(topic)s AND t.namespace = %(namespace)s
    RETURNING t.last_offset - c.n AS base
),
numbered AS (
    SELECT f.*, m.base + row_number() OVER (ORDER BY f.ord) AS "offset" FROM fresh f, moved m
),
inserted AS (
    INSERT INTO events (topic, "offset", event_id, type, source, subject, time, datacontenttype,
                        key, data, published_at, trace)
    SELECT %(topic)s, "offset", event_id, type, source, subject, time, datacontenttype, key, data,
        %(now)s, trace
    FROM numbered ORDER BY "offset"
)
SELECT coalesce(n."offset", s."offset"), coalesce(n.ord = i.ord, false),
    (SELECT t.namespace FROM topics t WHERE t.name = %(topic)s)
FROM input i
LEFT JOIN numbered n ON n.event_id = i.event_id AND n.source = i.source
LEFT JOIN stored s ON s.event_id = i.event_id AND s.source = i.source
ORDER BY i.ord
"""

# -- events and topics ---------------------------------------------------------------------------
READ_EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM events e
WHERE e.topic = %s AND e."offset" > %s ORDER BY e."offset" LIMIT %s
"""
_TOPIC = """
SELECT t.name, (SELECT min(e."offset") FROM events e WHERE e.topic = t.name), t.last_offset,
    t.events, t.max_age, t.max_events, t.namespace
FROM topics t
"""
GET_TOPIC = f"{_TOPIC} WHERE t.name = %s"
LIST_TOPICS = f"""{_TOPIC}
WHERE %(namespace)s::text IS NULL OR t.namespace = %(namespace)s
ORDER BY t.name
"""
SET_RETENTION = """
INSERT INTO topics (name, max_age, max_events, namespace, created_at)
VALUES (%(topic)s, %(max_age)s, %(max_events)s, %(namespace)s,
        extract(epoch FROM clock_timestamp()))
ON CONFLICT (name) DO UPDATE SET max_age = excluded.max_age, max_events = excluded.max_events
"""
# Offsets are in commit order, publication times are the publishers' clocks: the largest
# offset published before `when` is the cursor from which everything published since follows.
OFFSET_AT = """
SELECT coalesce(max(e."offset"), 0) FROM events e WHERE e.topic = %s AND e.published_at < %s
"""
# Beyond max_events (offsets are dense, so the newest max_events are those above
# last_offset - max_events) through the primary key, then older than max_age through the
# block range index; neither removes an event that a live delivery still has to push, nor one
# above the cursor of a subscription of the topic, paused or not (`floor`, the lowest cursor):
# retention never skips events a subscription has not matched yet.
_NOT_NEEDED = f"""
    NOT EXISTS (
        SELECT 1 FROM deliveries d
        WHERE d.topic = e.topic AND d."offset" = e."offset" AND d.state IN {sql_in(LIVE)})
"""
TRIM = f"""
WITH topic AS (
    SELECT t.name, t.last_offset, t.max_events, %(now)s - t.max_age AS before,
        coalesce((SELECT min(s.cursor) FROM subscriptions s WHERE s.topic = t.name),
                 t.last_offset) AS floor
    FROM topics t
    WHERE t.max_age IS NOT NULL OR t.max_events IS NOT NULL
),
retained AS (
    SELECT name, floor, before,
        CASE WHEN max_events IS NOT NULL THEN least(last_offset - max_events, floor) END AS below
    FROM topic
),
by_count AS (
    DELETE FROM events e USING retained r
    WHERE e.topic = r.name AND e."offset" <= r.below AND {_NOT_NEEDED}
    RETURNING e.topic
),
by_age AS (
    DELETE FROM events e USING retained r
    WHERE e.topic = r.name AND e.published_at < r.before AND e."offset" <= r.floor
        AND (r.below IS NULL OR e."offset" > r.below) AND {_NOT_NEEDED}
    RETURNING e.topic
),
gone AS (
    SELECT topic, count(*) AS n
    FROM (SELECT topic FROM by_count UNION ALL SELECT topic FROM by_age) g
    GROUP BY topic
),
counted AS (UPDATE topics t SET events = t.events - g.n FROM gone g WHERE t.name = g.topic)
SELECT coalesce(sum(n), 0)::bigint FROM gone
"""

# -- subscriptions -------------------------------------------------------------------------------
# A new subscription starts at the topic's end (latest) or before its first event (earliest);
# a replaced one keeps its cursor, lease and state, unless it now reads another topic, whose
# offsets its old cursor does not describe.
_INSERT_SUBSCRIPTION = """
INSERT INTO subscriptions AS s (name, topic, target, filter, policy, origin, start, cursor,
                                namespace, created_at, updated_at)
VALUES (%(name)s, %(topic)s, %(target)s, %(filter)s, %(policy)s, %(origin)s, %(start)s,
    CASE WHEN %(earliest)s THEN 0
         ELSE coalesce((SELECT last_offset FROM topics WHERE name = %(topic)s), 0) END,
    %(namespace)s, %(now)s, %(now)s)
"""
# Creation only: the insert decides a race between two adds of one name (the unique name; a
# second insert waits for the first to commit, then does nothing and returns no row).
CREATE_SUBSCRIPTION = f"""{_INSERT_SUBSCRIPTION}
ON CONFLICT (name) DO NOTHING
RETURNING {SUBSCRIPTION_COLUMNS}
"""
PUT_SUBSCRIPTION = f"""{_INSERT_SUBSCRIPTION}
ON CONFLICT (name) DO UPDATE SET
    topic = excluded.topic, target = excluded.target, filter = excluded.filter,
    policy = excluded.policy, origin = excluded.origin, start = excluded.start,
    cursor = CASE WHEN s.topic = excluded.topic THEN s.cursor ELSE excluded.cursor END,
    updated_at = excluded.updated_at
WHERE s.namespace = excluded.namespace
RETURNING {SUBSCRIPTION_COLUMNS}
"""
# A subscription reads a topic of its own namespace only.
TOPIC_NAMESPACE = "SELECT namespace FROM topics WHERE name = %s"
# Names are unique per store: a replace never moves a subscription to another namespace.
SUBSCRIPTION_NAMESPACE = "SELECT namespace FROM subscriptions WHERE name = %s"
GET_SUBSCRIPTION = f"SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE name = %s"
LIST_SUBSCRIPTIONS = f"""
SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
WHERE (%(topic)s::text IS NULL OR topic = %(topic)s)
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
ORDER BY name
"""
# A dead-letter purge: dead deliveries only, with their attempts.
DELETE_DELIVERIES = f"""
WITH doomed AS (
    DELETE FROM deliveries WHERE id = ANY(%(ids)b::bigint[]) AND state = {DEAD} RETURNING id
),
attempts AS (DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM doomed))
SELECT id FROM doomed ORDER BY id
"""
# Pausing ends the lease: the holder is fenced out at its next change, and whoever takes the
# subscription after its resumption finds the old holder's pushes pending again.
SET_PAUSED = f"""
UPDATE subscriptions SET paused = %(paused)s, disabled_reason = %(reason)s,
    holder = CASE WHEN %(paused)s THEN NULL ELSE holder END,
    lease_expires_at = CASE WHEN %(paused)s THEN NULL ELSE lease_expires_at END,
    updated_at = %(now)s
WHERE name = %(name)s
RETURNING {SUBSCRIPTION_COLUMNS}
"""
# A replay also lets go of the lease: the holder is fenced, and whoever takes the subscription
# next starts from the replayed cursor (an in-memory cursor must not overwrite it).
# The cursor stops at the topic's last offset, read in the same statement: a cursor beyond it
# would skip the events published next (an append in progress numbers above it either way).
REPLAY = f"""
UPDATE subscriptions s SET
    cursor = least(%(after)s,
                   coalesce((SELECT t.last_offset FROM topics t WHERE t.name = s.topic), 0)),
    updated_at = %(now)s, holder = NULL, lease_expires_at = NULL
WHERE s.name = %(name)s
RETURNING {SUBSCRIPTION_COLUMNS}
"""
# Locked first, in a statement of its own: DELETE_SUBSCRIPTION's snapshot then holds every
# delivery that the holder recorded before, and the holder records none after.
LOCK_SUBSCRIPTION = "SELECT id FROM subscriptions WHERE name = %s FOR UPDATE"
DELETE_SUBSCRIPTION = """
WITH gone AS (DELETE FROM subscriptions WHERE name = %(name)s RETURNING id),
dropped AS (
    DELETE FROM deliveries d USING gone g WHERE d.subscription_id = g.id RETURNING d.id
),
attempts AS (DELETE FROM delivery_attempts a USING dropped x WHERE a.delivery_id = x.id)
SELECT id FROM gone
"""

# -- leases --------------------------------------------------------------------------------------
# Renew the holder's leases (waiting for its own fenced transactions of a moment), then take
# free or expired ones up to the limit, skipping rows another transaction has locked: two
# dispatchers never wait for each other. A takeover bumps the epoch, which fences the old holder.
ACQUIRE = """
WITH renewed AS (
    UPDATE subscriptions SET lease_expires_at = %(expires)s
    WHERE holder = %(holder)s AND NOT paused
    RETURNING id, name, epoch
),
free AS (
    SELECT id FROM subscriptions
    WHERE NOT paused AND (holder IS NULL OR (holder <> %(holder)s AND lease_expires_at < %(now)s))
    ORDER BY id
    LIMIT greatest(%(limit)s - (SELECT count(*) FROM renewed), 0)
    FOR UPDATE SKIP LOCKED
),
taken AS (
    UPDATE subscriptions s
    SET holder = %(holder)s, lease_expires_at = %(expires)s, epoch = s.epoch + 1
    FROM free f WHERE s.id = f.id
    RETURNING s.id, s.name, s.epoch
)
SELECT id, name, epoch, false FROM renewed
UNION ALL
SELECT id, name, epoch, true FROM taken
"""
# After ACQUIRE, in a statement of its own: its snapshot is taken with the taken rows locked, so
# it sees every push the old holders started (they lock the row before they take).
RESET_IN_FLIGHT = f"""
UPDATE deliveries SET state = {LOST_TO}, updated_at = %(now)s
WHERE subscription_id = ANY(%(ids)b::bigint[]) AND state = {LOST_FROM}
"""
RELEASE = """
UPDATE subscriptions SET holder = NULL, lease_expires_at = NULL
WHERE holder = %s AND name = ANY(%b::text[])
"""

# -- cursors and deliveries (fenced) -------------------------------------------------------------
_HELD = "s.name = %(name)s AND s.holder = %(holder)s AND s.epoch = %(epoch)s"
FENCE = f"SELECT s.id FROM subscriptions s WHERE {_HELD} FOR SHARE"
# Invariant 4: the deliveries are recorded by the statement that moves the cursor past them; the
# UPDATE locks the subscription row, and a takeover that committed first fails its fence.
ADVANCE = f"""
WITH fenced AS (
    UPDATE subscriptions s SET cursor = %(cursor)s WHERE {_HELD}
    RETURNING s.id, s.topic
),
recorded AS (
    INSERT INTO deliveries (subscription_id, topic, "offset", event_id, key, state, due_at,
                            created_at, updated_at)
    SELECT f.id, f.topic, n."offset", n.event_id, n.key, {PENDING}, %(now)s, %(now)s, %(now)s
    FROM fenced f
    CROSS JOIN unnest(%(offset)b::bigint[], %(event_id)b::text[], %(key)b::text[])
        WITH ORDINALITY AS n("offset", event_id, key, ord)
    ORDER BY n.ord
)
SELECT count(*) FROM fenced
"""
# Ordered subscriptions push only the earliest live delivery of each key (a failing one holds
# back its key, not the others); through deliveries_live_keys.
_FIRST_OF_ITS_KEY = f"""
    (d.key IS NULL OR NOT (SELECT ordered FROM held) OR NOT EXISTS (
        SELECT 1 FROM deliveries o
        WHERE o.subscription_id = d.subscription_id AND o.key = d.key
            AND o.state IN {sql_in(LIVE)} AND (o."offset", o.id) < (d."offset", d.id)))
"""


def _lane(state: str, limit: str) -> str:
    """Due deliveries of one lane, oldest offset first: a range of deliveries_live, in order.

    The subscription comes as a scalar subquery (a parameter to the planner), so the generic
    plan walks the index of that one subscription rather than joining the table to it.
    """
    return f"""
    SELECT d.id FROM deliveries d
    WHERE d.subscription_id = (SELECT id FROM held) AND d.state = {state}
        AND d.due_at <= %(now)s AND {_FIRST_OF_ITS_KEY}
    ORDER BY d."offset"
    LIMIT %({limit})s
    FOR UPDATE SKIP LOCKED"""


TAKE = f"""
WITH held AS (
    SELECT s.id, s.name, coalesce((s.policy ->> 'ordered')::boolean, false) AS ordered
    FROM subscriptions s WHERE {_HELD}
),
fresh AS ({_lane(PENDING, "fresh")}),
retry AS ({_lane(RETRY, "retry")}),
taken AS (
    UPDATE deliveries d SET state = {IN_FLIGHT}, updated_at = %(now)s
    WHERE d.id = ANY(ARRAY(SELECT id FROM fresh UNION ALL SELECT id FROM retry))
    RETURNING d.*
)
SELECT {DELIVERY_COLUMNS}, {EVENT_COLUMNS}
FROM taken d
JOIN held s ON s.id = d.subscription_id
LEFT JOIN events e ON e.topic = d.topic AND e."offset" = d."offset"
ORDER BY d."offset", d.id
"""
# One row per result (ids distinct); `source` is the state each outcome is allowed from.
# Attempt numbers keep counting across requeues (max through the primary key).
FINISH = f"""
WITH result AS (
    SELECT * FROM unnest(
        %(id)b::bigint[], %(source)b::text[], %(state)b::text[], %(due_at)b::float8[],
        %(spent)b::int[], %(outcome)b::text[], %(started_at)b::float8[],
        %(finished_at)b::float8[], %(status)b::int[], %(error)b::text[], %(response)b::text[]
    ) AS r(id, source, state, due_at, spent, outcome, started_at, finished_at, status, error,
           response)
),
done AS (
    UPDATE deliveries d
    SET state = r.state, due_at = coalesce(r.due_at, d.due_at), attempts = d.attempts + r.spent,
        last_status = r.status, last_error = r.error, last_response = r.response,
        updated_at = %(now)s
    FROM result r, subscriptions s
    WHERE d.id = r.id AND d.state = r.source AND d.subscription_id = s.id AND {_HELD}
    RETURNING d.id
),
attempted AS (
    INSERT INTO delivery_attempts (delivery_id, number, outcome, started_at, finished_at, status,
                                   error, response)
    SELECT r.id,
        coalesce((SELECT max(a.number) FROM delivery_attempts a WHERE a.delivery_id = r.id), 0) + 1,
        r.outcome, r.started_at, r.finished_at, r.status, r.error, r.response
    FROM result r JOIN done x ON x.id = r.id
    WHERE r.spent > 0
)
SELECT id FROM done
"""

# -- deliveries: reads and commands --------------------------------------------------------------
_DELIVERY_FROM = "FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id"
# Through deliveries_due: the first entry of the subscription.
NEXT_DUE = f"""
SELECT min(d.due_at) FROM deliveries d
WHERE d.subscription_id = (SELECT id FROM subscriptions WHERE name = %s)
    AND {sql_match("d.state", WAITING)}
"""
GET_DELIVERY = f"""
SELECT {DELIVERY_COLUMNS}, {EVENT_COLUMNS} {_DELIVERY_FROM}
LEFT JOIN events e ON e.topic = d.topic AND e."offset" = d."offset"
WHERE d.id = %s
"""
LIST_DELIVERIES = f"SELECT {DELIVERY_COLUMNS} {_DELIVERY_FROM}"
LIST_DELIVERIES_ORDER = " ORDER BY d.id DESC LIMIT %s"
DELIVERY_FILTERS = {
    "subscription": "s.name = %s",
    "states": "d.state = ANY(%b::text[])",
}
LIST_ATTEMPTS = """
SELECT delivery_id, number, outcome, started_at, finished_at, status, error, response
FROM delivery_attempts WHERE delivery_id = %s ORDER BY number
"""
COUNT_DELIVERIES = f"SELECT d.state, count(*) {_DELIVERY_FROM} WHERE s.name = %s GROUP BY d.state"
REQUEUE = f"""
UPDATE deliveries d SET state = {REQUEUE_TO}, attempts = 0, due_at = %s, updated_at = %s
WHERE {sql_match("d.state", sources(DeliveryEvent.REQUEUE))}
"""
REQUEUE_FILTERS = {
    "ids": "d.id = ANY(%b::bigint[])",
    "subscription": "d.subscription_id = (SELECT id FROM subscriptions WHERE name = %s)",
}
REQUEUE_RETURNING = " RETURNING d.id"
