-- Connectors (issue 13): definitions, their tasks (state, lease, committed positions, outcome
-- counts) and the records that failed for good (tolerance 'all'). No foreign keys: the store
-- deletes a connector's tasks and dead records itself, in the same transaction.
CREATE TABLE connectors (
    name        TEXT    PRIMARY KEY,
    namespace   TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    direction   TEXT    NOT NULL,               -- 'source' or 'sink'
    topic       TEXT    NOT NULL,
    config      TEXT    NOT NULL,               -- JSON object, validated by the kind
    tolerance   TEXT    NOT NULL,               -- 'none' or 'all'
    max_tasks   INTEGER NOT NULL,
    fingerprint TEXT    NOT NULL,               -- create with the same one: no-op; else conflict
    created_at  REAL    NOT NULL,
    updated_at  REAL    NOT NULL
);
CREATE INDEX connectors_by_namespace ON connectors (namespace, name);

-- One row per task: the state machine of cronbus.connectors.states, the lease of the worker
-- running it (holder, expiry, epoch: bumped on every assignment and restart, the fence), and
-- what it committed: positions (JSON object, partition -> position) and outcome counts.
CREATE TABLE connector_tasks (
    connector        TEXT    NOT NULL,
    task             INTEGER NOT NULL,
    config           TEXT    NOT NULL,          -- JSON object
    state            TEXT    NOT NULL,
    holder           TEXT,
    lease_expires_at REAL,
    epoch            INTEGER NOT NULL DEFAULT 0,
    error            TEXT,
    positions        TEXT    NOT NULL DEFAULT '{}',
    delivered        INTEGER NOT NULL DEFAULT 0,
    dead             INTEGER NOT NULL DEFAULT 0,
    retried          INTEGER NOT NULL DEFAULT 0,
    updated_at       REAL    NOT NULL,
    PRIMARY KEY (connector, task)
) WITHOUT ROWID;
-- Acquiring: unassigned tasks, and running ones whose lease ran out.
CREATE INDEX connector_tasks_by_state ON connector_tasks (state, lease_expires_at);
CREATE INDEX connector_tasks_by_holder ON connector_tasks (holder) WHERE holder IS NOT NULL;

CREATE TABLE connector_dead_records (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    connector  TEXT    NOT NULL,
    task       INTEGER NOT NULL,
    partition  TEXT,
    offset     INTEGER,                         -- a sink record's topic offset
    record     TEXT    NOT NULL,                -- JSON object: the original record
    error      TEXT    NOT NULL,
    created_at REAL    NOT NULL
);
CREATE INDEX connector_dead_by_connector ON connector_dead_records (connector, id);
