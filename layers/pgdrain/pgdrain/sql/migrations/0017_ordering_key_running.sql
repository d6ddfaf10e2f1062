-- The running jobs that hold an ordering key, by key: what the claims' ordering-key test
-- (the job_ordering_head fragment) probes to know whether a key's job runs, one index entry,
-- instead of reading every live job of the key (and its row) in jobs_ordering_key_live_idx to
-- find one running: 20 row reads a claimed job with 20 jobs a key, a key's whole backlog with
-- more. Only keyed jobs while they run, so a small index; building it reads the table once,
-- under a lock that holds writes back (seconds on a table of millions).
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_ordering_key_running_idx ON jobs (ordering_key)
    WHERE status = 'running' AND ordering_key IS NOT NULL;
