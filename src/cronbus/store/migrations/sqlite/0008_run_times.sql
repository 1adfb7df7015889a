-- Listings from a creation time start at the first run created since then, when those are few
-- (cronbus.store.logic.CREATED_AFTER_PROBE). The index is on the payloads, which are written
-- once per run, so claims and completions (UPDATEs of runs) never write it again.
ALTER TABLE run_payloads ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE run_payloads ADD COLUMN created_at REAL;
UPDATE run_payloads SET
    namespace = coalesce((SELECT r.namespace FROM runs r WHERE r.id = run_id), 'default'),
    created_at = (SELECT r.created_at FROM runs r WHERE r.id = run_id);
-- Every run has its payload row (the bound relies on it), even one written by hand without.
INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at)
SELECT r.id, '[]', '{}', r.namespace, r.created_at FROM runs r
WHERE NOT EXISTS (SELECT 1 FROM run_payloads p WHERE p.run_id = r.id);
CREATE INDEX run_payloads_by_created ON run_payloads (namespace, created_at);

-- Indexes an early 0006 created and 0006 no longer does: every index of runs is written by each
-- claim and completion, and these two served no query the others do not.
DROP INDEX IF EXISTS runs_by_namespace;
DROP INDEX IF EXISTS runs_by_created;
