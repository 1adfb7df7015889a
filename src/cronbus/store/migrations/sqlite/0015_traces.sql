-- The caller's trace context at defer (a W3C traceparent/tracestate carrier as JSON text), read
-- by the claim with the payload it reads anyway; NULL for a run deferred without tracing, so the
-- hot rows of runs stay as narrow as they were (cronbus.observability.tracing).
ALTER TABLE run_payloads ADD COLUMN trace TEXT;
