-- Jobs to claim alone (lost_claims > 0, see 0002): empty but for the rare job whose claim was
-- lost, so job_claim_alone finds one with an index probe, and only such jobs' writes touch
-- this index. Building it reads the whole table once, under a lock that holds writes back:
-- seconds on a table of millions; run the migration when a short pause in enqueues is fine.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_alone_idx ON jobs (priority, run_at, id)
    WHERE status = 'pending' AND lost_claims > 0;
