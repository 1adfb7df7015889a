-- Retention (issue 14): finished runs and ended deliveries are removed in small batches, oldest
-- first, each batch a short transaction that locks its rows with SKIP LOCKED, so autovacuum
-- keeps up with the dead tuples they leave. Runs are found through runs_finished (0006,
-- namespace, finished_at, state), which exists already.

-- Is a run the parent of a live child? Only children have an entry (most runs have none).
CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- A subscription's acked or dead deliveries, oldest change first: an entry per ended delivery
-- (the live ones, the hot part, have none).
CREATE INDEX deliveries_ended ON deliveries (subscription_id, state, updated_at)
    WHERE state IN ('acked', 'dead');
