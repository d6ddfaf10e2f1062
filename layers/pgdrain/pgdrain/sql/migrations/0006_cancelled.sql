-- The status `cancelled`: a job an operator or the app stopped before it ran (pgdrain.cancel,
-- `pgdrain cancel`, or plain SQL:
--   UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = ... AND status = 'pending';
-- the claim takes only pending jobs), or one running when asked to stop, whose attempt then
-- ends cancelled rather than retried (cancel_requested_at). Checking the constraint reads the
-- whole table: NOT VALID, then VALIDATE, so that the CHECK is added at once and the rows are
-- checked while writes go on (the validation takes no lock that holds them back).
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_status_check,
    ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;

-- Cancelled jobs by when they ended: what the janitor's retention purge and `pgdrain purge`
-- read.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_cancelled_finished_idx ON jobs (finished_at)
    WHERE status = 'cancelled';
