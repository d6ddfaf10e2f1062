-- Jobs that are worthless if late (a one-time code, a notification): expires_at, set at
-- enqueue (expires_at or ttl_seconds). A job not started by then is never claimed, and the
-- janitor ends it failed with the error `expired`. NULL (every job before this) never expires.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS expires_at timestamptz;

-- What the janitor's expiry reads: pending jobs that can expire, soonest first; empty unless
-- jobs are enqueued with an expiry.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_expiring_idx ON jobs (expires_at)
    WHERE status = 'pending' AND expires_at IS NOT NULL;
