-- Failed jobs by when they finished: what `pgdrain stats`, `list --status failed` and `purge
-- --status failed` read, without scanning the done history. Small: failed jobs are few.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_failed_finished_idx
    ON jobs (finished_at) WHERE status = 'failed';
