-- Per-queue concurrency caps (`pgdrain queue set QUEUE --max-running N`): at most max_running
-- jobs of the queue running across all drains. NULL: no cap. The plain claim leaves a capped
-- queue's jobs alone; job_claim_capped takes them with the queue's row locked and its running
-- jobs counted, one drain at a time.
ALTER TABLE pgdrain_queues ADD COLUMN IF NOT EXISTS max_running int CHECK (max_running >= 1);

-- Counting a capped queue's running jobs reads running jobs by queue.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_running_queue_idx
    ON jobs (queue) WHERE status = 'running';
