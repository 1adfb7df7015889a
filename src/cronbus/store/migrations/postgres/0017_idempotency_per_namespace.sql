-- An idempotency key is unique per namespace, not per store: a key one namespace (tenant) uses
-- makes another's defer neither return the first run nor be refused, so no namespace learns
-- what another deferred, nor can take the keys another will use. Keys were unique per store
-- until now, so they are unique per namespace already: building the index cannot fail. The
-- store's lookups (insert_sql, RUN_BY_KEY_OR_FIRE) read it by (namespace, key).
CREATE UNIQUE INDEX IF NOT EXISTS runs_namespace_idempotency ON runs (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS runs_idempotency;
