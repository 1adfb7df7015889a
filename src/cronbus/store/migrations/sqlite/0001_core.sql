-- Runs, their attempts, the worker registry and the wake-up registry.
-- Hot rows stay narrow: payloads live in run_payloads, results and logs in attempts.

CREATE TABLE runs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    task            TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    priority        INTEGER NOT NULL DEFAULT 0,
    lane            INTEGER NOT NULL DEFAULT 0,
    eta             REAL    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,  -- attempts started, all kinds
    used            INTEGER NOT NULL DEFAULT 0,  -- attempts that count against max_attempts
    lost            INTEGER NOT NULL DEFAULT 0,  -- attempts lost with their worker
    max_attempts    INTEGER NOT NULL DEFAULT 1,
    timeout         REAL,
    idempotency_key TEXT,
    target_worker   TEXT,
    route_key       TEXT,
    lease_owner     TEXT,
    lease_expires   REAL,
    attempt_id      INTEGER,
    created_at      REAL    NOT NULL,
    updated_at      REAL    NOT NULL,
    finished_at     REAL
);

CREATE UNIQUE INDEX runs_idempotency ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The claim: ready runs of one queue, fresh lane first, then priority, then age.
CREATE INDEX runs_ready ON runs (queue, lane, priority DESC, eta, id) WHERE state = 'queued';
CREATE INDEX runs_due ON runs (eta) WHERE state = 'scheduled';
CREATE INDEX runs_retry_aging ON runs (eta) WHERE state = 'queued' AND lane = 1;
-- State lists are written sorted, as cronbus.states.sql_in renders them, so queries match.
CREATE INDEX runs_leases ON runs (lease_expires) WHERE state IN ('cancelling', 'running');
CREATE INDEX runs_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;
CREATE INDEX runs_by_state ON runs (state, id);
CREATE INDEX runs_by_task ON runs (task, id);
CREATE INDEX runs_by_queue ON runs (queue, id);

CREATE TABLE run_payloads (
    run_id INTEGER PRIMARY KEY,
    args   TEXT NOT NULL,
    kwargs TEXT NOT NULL
);

CREATE TABLE attempts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        INTEGER NOT NULL,
    number        INTEGER NOT NULL,
    worker_id     TEXT    NOT NULL,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    outcome       TEXT,
    result        TEXT,
    error_type    TEXT,
    error_message TEXT,
    traceback     TEXT,
    logs          TEXT
);
CREATE INDEX attempts_by_run ON attempts (run_id, id);

CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT    NOT NULL,
    labels       TEXT    NOT NULL,
    concurrency  INTEGER NOT NULL,
    version      TEXT    NOT NULL,
    started_at   REAL    NOT NULL,
    heartbeat_at REAL    NOT NULL,
    state        TEXT    NOT NULL
);

-- SQLite has no LISTEN/NOTIFY: each listening process registers a datagram socket here.
CREATE TABLE wakeups (
    address       TEXT PRIMARY KEY,
    pid           INTEGER NOT NULL,
    channels      TEXT    NOT NULL,
    registered_at REAL    NOT NULL
);
