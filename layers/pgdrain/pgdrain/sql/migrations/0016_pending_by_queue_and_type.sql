-- The controlled claim's ranges (job_claim_controlled, job_claim_candidates, flow_limited_due):
-- a capped or rate-limited queue's due jobs, and a rate-limited job type's, each one range of
-- an index in claim order, instead of a walk of jobs_pending_idx that reads every other
-- queue's and type's due jobs ahead of them (107 ms a claim for a type with 10,000 due jobs
-- behind 90,000 others) and that the planner costs at the whole walk. Pending jobs only, as
-- jobs_pending_idx: a claim takes a job out of both, an enqueue adds it to both (see
-- docs/benchmarks.md for what that costs an enqueue). Building them reads the whole table
-- once, under a lock that holds writes back: seconds on a table of millions; run the
-- migration when a short pause in enqueues is fine.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_pending_queue_idx ON jobs (queue, priority, run_at, id)
    WHERE status = 'pending';
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_pending_type_idx
    ON jobs (job_type, priority, run_at, id)
    WHERE status = 'pending';
