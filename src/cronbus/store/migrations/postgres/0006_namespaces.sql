-- Namespaces (tenants): runs, jobs, topics, subscriptions and workers belong to one; every row
-- that exists already belongs to `default` (a constant default: no table rewrite). Names of
-- jobs, topics and subscriptions stay unique per store. Workers record the tasks their code
-- knows, and an operator's request to drain.
ALTER TABLE runs ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE topics ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE subscriptions ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE workers ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE workers ADD COLUMN tasks text[] NOT NULL DEFAULT '{}';     -- task names its code knows
ALTER TABLE workers ADD COLUMN drain_requested boolean NOT NULL DEFAULT false;

-- The claim: ready runs of one namespace and queue, fresh lane first, then priority, then age.
DROP INDEX runs_ready;
CREATE INDEX runs_ready ON runs (namespace, queue, lane, priority DESC, eta, id) WHERE state = 'queued';

-- Listings, newest first from any point (keyset on id): a namespace's runs by state, task or
-- queue are each a range of one index, and all of them one range per state, merged. These
-- replace the indexes without a namespace (a listing of every namespace merges one range per
-- namespace). Runs of a job stay on runs_by_job: a job lives in one namespace. No more: on
-- PostgreSQL every index of runs gets a new entry at each claim and each completion (an UPDATE
-- of an indexed column), so each index slows the claim.
DROP INDEX runs_by_state;
DROP INDEX runs_by_task;
DROP INDEX runs_by_queue;
CREATE INDEX runs_by_state ON runs (namespace, state, id);
CREATE INDEX runs_by_task ON runs (namespace, task, id);
CREATE INDEX runs_by_queue ON runs (namespace, queue, id);
-- Runs per minute: the runs of a namespace that ended in a time window (an entry per ended run,
-- written by its last UPDATE only).
CREATE INDEX runs_finished ON runs (namespace, finished_at, state) WHERE finished_at IS NOT NULL;

CREATE INDEX jobs_by_namespace ON jobs (namespace, name);
CREATE INDEX topics_by_namespace ON topics (namespace, name);
CREATE INDEX subscriptions_by_namespace ON subscriptions (namespace, name);
