-- The event bus: topics (append-only logs of events), subscriptions with their cursor and the
-- lease of their pusher, deliveries (one event pushed to one subscription) and their attempts.

-- A topic's row is its offset counter (the newest offset ever given, kept when events are
-- trimmed) and its retention. It exists once the topic got an event or a setting.
CREATE TABLE topics (
    name        TEXT    PRIMARY KEY,
    last_offset INTEGER NOT NULL DEFAULT 0,
    max_age     REAL,                           -- seconds an event is kept (NULL: any)
    max_events  INTEGER,                        -- newest offsets kept (NULL: any)
    created_at  REAL    NOT NULL
);

-- A rowid table (not WITHOUT ROWID): event data can be kilobytes, and rowid tables keep big
-- rows out of the index b-trees. Rows are appended in offset order, so the rowid follows it.
CREATE TABLE events (
    topic           TEXT    NOT NULL,
    offset          INTEGER NOT NULL,
    event_id        TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    subject         TEXT,
    time            REAL    NOT NULL,
    datacontenttype TEXT    NOT NULL,
    key             TEXT,
    data            TEXT    NOT NULL,           -- JSON text, as published
    published_at    REAL    NOT NULL,
    PRIMARY KEY (topic, offset),                -- reads: events of a topic after an offset
    UNIQUE (topic, event_id)                    -- an id is stored once per topic
);
-- offset_at and retention by age: the last event of a topic published before a time.
CREATE INDEX events_by_time ON events (topic, published_at, offset);

CREATE TABLE subscriptions (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL UNIQUE,
    topic            TEXT    NOT NULL,
    target           TEXT    NOT NULL,          -- JSON object
    filter           TEXT    NOT NULL,          -- JSON object
    policy           TEXT    NOT NULL,          -- JSON object (DeliveryPolicy)
    origin           TEXT    NOT NULL,          -- 'code' or 'api'
    start            TEXT    NOT NULL,          -- where the cursor started: 'latest' or 'earliest'
    paused           INTEGER NOT NULL DEFAULT 0,
    disabled_reason  TEXT,
    cursor           INTEGER NOT NULL,          -- every event at or before it is safe (invariant 4)
    holder           TEXT,                      -- the dispatcher holding the pusher's lease
    lease_expires_at REAL,
    epoch            INTEGER NOT NULL DEFAULT 0, -- bumped on every takeover: fences old holders
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL
);
CREATE INDEX subscriptions_by_topic ON subscriptions (topic, name);

-- Hot and narrow: the event itself stays in `events`, joined when a delivery is taken.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription_id INTEGER NOT NULL,
    topic           TEXT    NOT NULL,
    offset          INTEGER NOT NULL,
    event_id        TEXT    NOT NULL,           -- the idempotency key of every push
    key             TEXT,                       -- ordering key (NULL: no order to keep)
    state           TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0, -- attempts spent (reset by a requeue)
    due_at          REAL    NOT NULL,
    created_at      REAL    NOT NULL,
    updated_at      REAL    NOT NULL,
    last_status     INTEGER,
    last_error      TEXT,
    last_response   TEXT
);
-- State lists are written sorted, as cronbus.states.sql_in renders them, so queries match.
-- The fresh lane (pending by offset), a takeover's in-flight deliveries, counts, dead letters
-- of a subscription, and deleting a subscription's deliveries.
CREATE INDEX deliveries_by_subscription ON deliveries (subscription_id, state, offset);
-- The retry lane (due retries) and the next due time of a subscription.
CREATE INDEX deliveries_waiting ON deliveries (subscription_id, state, due_at) WHERE state IN ('pending', 'retry');
-- Ordered subscriptions: is there an earlier live delivery of the same key?
CREATE INDEX deliveries_live_keys ON deliveries (subscription_id, key, offset) WHERE key IS NOT NULL AND state IN ('in_flight', 'pending', 'retry');
-- Retention: is an event still needed by a live delivery?
CREATE INDEX deliveries_live_events ON deliveries (topic, offset) WHERE state IN ('in_flight', 'pending', 'retry');

-- One row per push that spent an attempt, numbered from 1 over the delivery's whole life (a
-- requeue resets the delivery's attempt budget, not this history).
CREATE TABLE delivery_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id INTEGER NOT NULL,
    number      INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    started_at  REAL    NOT NULL,
    finished_at REAL    NOT NULL,
    status      INTEGER,
    error       TEXT,
    response    TEXT
);
CREATE UNIQUE INDEX delivery_attempts_by_delivery ON delivery_attempts (delivery_id, number);
