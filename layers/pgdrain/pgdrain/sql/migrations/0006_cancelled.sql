-- The status `cancelled`: a job an operator or the app stopped before it ran (pgdrain.cancel,
-- `pgdrain cancel`, or plain SQL:
--   UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = ... AND status = 'pending';
-- the claim takes only pending jobs), or one running when asked to stop, whose attempt then
-- ends cancelled rather than retried (cancel_requested_at). Checking the constraint reads the
-- table once under a lock that holds writes back: seconds on a table of millions.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled'));
ALTER TABLE jobs ADD COLUMN cancel_requested_at timestamptz;

-- Cancelled jobs by when they ended: what the janitor's retention purge and `pgdrain purge`
-- read.
CREATE INDEX jobs_cancelled_finished_idx ON jobs (finished_at) WHERE status = 'cancelled';
