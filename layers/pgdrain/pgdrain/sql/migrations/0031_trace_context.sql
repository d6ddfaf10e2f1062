-- Trace context from enqueue to run (issue 28): the enqueuer's sampled trace context, as
-- {"xray": "Root=...;Parent=...;Sampled=1", "traceparent": "00-...-01", "tracestate": ...}
-- (pgdrain.trace_context), which the drain runs the job under (pgdrain.job_spans). NULL for
-- a job whose caller was not traced, which is most: nothing more is written for them. Not
-- indexed: only read with the job. Nullable without a default: adding it rewrites nothing.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS trace_context jsonb;
