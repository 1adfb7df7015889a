-- Retention (issue 14): finished runs and ended deliveries are removed in small batches, oldest
-- first. New files are created with auto_vacuum = INCREMENTAL (before their first table: see
-- store/sqlite/connection.py) so that freed pages go back to the file system; `cronbus
-- migrate` converts an older file once (one VACUUM). Runs are found through runs_finished
-- (0006, namespace, finished_at, state), which exists already.

-- Is a run the parent of a live child? Only children have an entry (most runs have none), and
-- a child's parent_id never changes, so claims and completions of runs without a parent never
-- write it.
CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- A subscription's acked or dead deliveries, oldest change first: an entry per ended delivery,
-- written when it ends (the live ones, the hot part, have none).
CREATE INDEX deliveries_ended ON deliveries (subscription_id, state, updated_at)
    WHERE state IN ('acked', 'dead');
