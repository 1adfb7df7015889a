-- The caller's trace context at defer (a W3C traceparent/tracestate carrier as JSON text), read
-- by the claim with the payload it reads anyway; NULL for a run deferred without tracing, so the
-- hot rows of runs stay as narrow as they were (cronbus.observability.tracing).
ALTER TABLE run_payloads ADD COLUMN trace TEXT;
-- The publisher's trace context of an event (NULL when none was current), the parent of
-- each delivery's span.
ALTER TABLE events ADD COLUMN trace TEXT;
