-- Jobs: a task plus a trigger and its policies. A fire creates exactly one run: the unique key
-- on (job_id, fire_at) and a compare-and-set of next_fire_at in the same transaction.

CREATE TABLE jobs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL UNIQUE,
    task           TEXT    NOT NULL,
    trigger        TEXT    NOT NULL,           -- the trigger's JSON spec
    after_seconds  REAL,                       -- set for `after` triggers: the next fire waits for the run's end
    args           TEXT    NOT NULL,
    kwargs         TEXT    NOT NULL,
    queue          TEXT    NOT NULL,
    priority       INTEGER NOT NULL,
    max_attempts   INTEGER NOT NULL,
    timeout        REAL,
    misfire        TEXT    NOT NULL,
    misfire_grace  REAL    NOT NULL,
    misfire_max    INTEGER NOT NULL,
    overlap        TEXT    NOT NULL,
    children       TEXT    NOT NULL,           -- JSON list of job names fired when a run succeeds
    calendars      TEXT    NOT NULL,           -- JSON list of calendar names whose dates are excluded
    max_fires      INTEGER,
    source         TEXT    NOT NULL,           -- 'code' or 'api'
    spec_hash      TEXT    NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    enabled        INTEGER NOT NULL DEFAULT 1, -- 0: removed from the code, kept until removed
    next_fire_at   REAL,
    fires          INTEGER NOT NULL DEFAULT 0,
    last_fire_at   REAL,
    created_at     REAL    NOT NULL,
    updated_at     REAL    NOT NULL
);
CREATE INDEX jobs_due ON jobs (next_fire_at) WHERE next_fire_at IS NOT NULL AND paused = 0 AND enabled = 1;

CREATE TABLE calendars (
    name TEXT NOT NULL,
    day  TEXT NOT NULL,   -- ISO date
    PRIMARY KEY (name, day)
);

ALTER TABLE runs ADD COLUMN job_id INTEGER;
ALTER TABLE runs ADD COLUMN fire_at REAL;
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE runs ADD COLUMN overlap TEXT;
CREATE UNIQUE INDEX runs_fire ON runs (job_id, fire_at) WHERE job_id IS NOT NULL;
CREATE INDEX runs_active_key ON runs (concurrency_key) WHERE concurrency_key IS NOT NULL AND state IN ('cancelling', 'running');
CREATE INDEX runs_by_job ON runs (job_id, id) WHERE job_id IS NOT NULL;
