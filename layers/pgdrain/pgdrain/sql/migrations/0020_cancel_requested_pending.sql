-- Pending jobs asked to stop: no claim takes them (job_due), and the janitor ends them
-- cancelled (janitor_cancel_requested_batch). Only plain SQL makes such a job pending (pgdrain
-- ends a stopped job's attempt cancelled, and requeue clears the request), so the index is
-- empty but for that, and costs an empty probe per janitor pass; building it reads the table
-- once, under a lock that holds writes back (seconds on a table of millions).
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_cancel_pending_idx ON jobs (id)
    WHERE status = 'pending' AND cancel_requested_at IS NOT NULL;
