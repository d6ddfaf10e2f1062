-- Failed jobs by queue (issue 27): what the console's overview counts per queue and lists as a
-- queue's recent failures (queue_board), one index range per queue rather than a read of every
-- failed job. Small, as jobs_failed_finished_idx beside it: failed jobs are few, and a job
-- enters it once, when it fails.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_failed_queue_idx
    ON jobs (queue, finished_at) WHERE status = 'failed';
