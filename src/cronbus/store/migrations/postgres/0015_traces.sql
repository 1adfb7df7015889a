-- The caller's trace context at defer (a W3C traceparent/tracestate carrier as JSON text), read
-- by the claim with the payload it reads anyway; NULL for a run deferred without tracing, so the
-- hot rows of runs stay as narrow as they were (cronbus.observability.tracing). A nullable
-- column without a default: adding it rewrites nothing.
ALTER TABLE run_payloads ADD COLUMN IF NOT EXISTS trace text;
-- The publisher's trace context of an event (NULL when none was current), the parent of
-- each delivery's span.
ALTER TABLE events ADD COLUMN IF NOT EXISTS trace text;
