-- The web console (issue 12).
-- A token may be kept from runs' arguments and results: the services redact them for it.
ALTER TABLE tokens ADD COLUMN payloads INTEGER NOT NULL DEFAULT 1;
-- The scheduler's lag: a namespace's job runs by creation time, with when they were due. Job
-- runs only (written once, when a job fires; their columns here never change afterwards).
CREATE INDEX runs_fired ON runs (namespace, created_at, fire_at) WHERE job_id IS NOT NULL;
