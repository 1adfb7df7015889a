-- Listings from a creation time start at the first run created since then, when those are few
-- (cronbus.store.logic.CREATED_AFTER_PROBE). The index is on the payloads, which are written
-- once per run, so claims and completions (UPDATEs of runs, which add an entry to every index of
-- the table) never write it again.
ALTER TABLE run_payloads ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT 'default';
ALTER TABLE run_payloads ADD COLUMN IF NOT EXISTS created_at double precision;
UPDATE run_payloads p SET namespace = r.namespace, created_at = r.created_at
FROM runs r WHERE r.id = p.run_id;
-- Every run has its payload row (the bound relies on it), even one written by hand without.
INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at)
SELECT r.id, '[]', '{}', r.namespace, r.created_at FROM runs r
WHERE NOT EXISTS (SELECT 1 FROM run_payloads p WHERE p.run_id = r.id);
CREATE INDEX IF NOT EXISTS run_payloads_by_created ON run_payloads (namespace, created_at);

-- Indexes an early 0006 created and 0006 no longer does: every index of runs gets an entry at
-- each claim and completion, and these two served no query the others do not.
DROP INDEX IF EXISTS runs_by_namespace;
DROP INDEX IF EXISTS runs_by_created;
