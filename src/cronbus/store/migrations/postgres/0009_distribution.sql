-- Distribution: routing, fan-out and limits, all kept by the store so they hold across workers.
-- Routing: the strategy, the labels a worker must carry (text[]), and a fail-over order
-- (text[]); target_worker and route_key exist since 0001.
ALTER TABLE runs ADD COLUMN route TEXT NOT NULL DEFAULT 'any';
ALTER TABLE runs ADD COLUMN route_labels text[];
ALTER TABLE runs ADD COLUMN route_order text[];
-- Limits: at most limit_max running runs per limit_key; at most rate_max starts per rate_key
-- and rate_period seconds.
ALTER TABLE runs ADD COLUMN limit_key TEXT;
ALTER TABLE runs ADD COLUMN limit_max INTEGER;
ALTER TABLE runs ADD COLUMN rate_key TEXT;
ALTER TABLE runs ADD COLUMN rate_max INTEGER;
ALTER TABLE runs ADD COLUMN rate_period double precision;
-- Fan-out: a child's parent and place (shard index, map item index, broadcast ordinal).
ALTER TABLE runs ADD COLUMN parent_id bigint;
ALTER TABLE runs ADD COLUMN child_index INTEGER;
ALTER TABLE runs ADD COLUMN shard_total INTEGER;

-- A parent's children in order; one child per place, so a retried map body adds none twice.
CREATE UNIQUE INDEX runs_children ON runs (parent_id, child_index)
    WHERE parent_id IS NOT NULL AND child_index IS NOT NULL;
-- Waiting runs pinned to a worker, for rerouting when that worker is gone.
CREATE INDEX runs_targeted ON runs (target_worker)
    WHERE target_worker IS NOT NULL AND state IN ('queued', 'scheduled');
-- Running runs per limit key, for the claim's count.
CREATE INDEX runs_limited ON runs (limit_key)
    WHERE limit_key IS NOT NULL AND state IN ('cancelling', 'running');

-- A fan-out parent's counters, updated in the transaction that ends each child.
CREATE TABLE fanouts (
    run_id      bigint  PRIMARY KEY,
    kind        TEXT    NOT NULL,
    total       INTEGER NOT NULL DEFAULT 0,
    ended       INTEGER NOT NULL DEFAULT 0,
    succeeded   INTEGER NOT NULL DEFAULT 0,
    reduce_spec TEXT,               -- the reduce run to create once every child succeeded
    reduce_run  bigint,
    note        TEXT    NOT NULL DEFAULT ''
);

-- Round robin: the next turn per task.
CREATE TABLE route_cursors (
    namespace TEXT    NOT NULL,
    task      TEXT    NOT NULL,
    turn      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task)
);

-- Rate limits: starts counted per key in fixed windows of rate_period seconds.
CREATE TABLE rate_windows (
    key          TEXT    PRIMARY KEY,
    period       double precision   NOT NULL,
    max_starts   INTEGER NOT NULL,
    window_start double precision   NOT NULL,
    used         INTEGER NOT NULL
);

ALTER TABLE jobs ADD COLUMN broadcast boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN shards INTEGER;

-- A worker is alive for routing while it beat within its own lease (alive, not draining).
ALTER TABLE workers ADD COLUMN lease_seconds double precision NOT NULL DEFAULT 30;
