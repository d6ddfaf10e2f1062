-- What a job's life writes (issue 24; docs/benchmarks.md, "What a job writes").
--
-- Part of each heap page is left free for the job's own updates. A claim and a finish rewrite
-- the row, and none can be HOT (`status` is in the partial indexes' predicates); at the
-- default fillfactor of 100 the new version goes to another page, which costs a lock record
-- of the old tuple besides the update, and logs the whole new tuple. On the same page the
-- update logs only what changed between a common prefix and suffix, and page pruning takes the
-- dead version back before the next update needs the room. Measured on PostgreSQL 15, 20,000
-- no-op jobs drained by 4 drains, with the running index below: 903 bytes of WAL a job at 100,
-- 758 at 70, 704 at 50. 50 and 60 tipped the keyed due count's plan (20 keys of 1,000 jobs,
-- test_claim_plans.py) to a sequential scan: both plans read every keyed job there, and their
-- costs are within 1 %. Applies to pages written from now on; existing pages keep their
-- layout until rewritten.
ALTER TABLE jobs SET (fillfactor = 70);

-- One index for the running jobs, not two: the janitor's lease scan and a cap's count of a
-- queue's running jobs both read it, and a claim writes one entry instead of two. The running
-- set is the jobs in flight (hundreds, not millions), so the janitor's `lease_expires_at <
-- now()` reads the whole of it, and a queue's count reads its range.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_running_idx
    ON jobs (queue, lease_expires_at) WHERE status = 'running';
DROP INDEX CONCURRENTLY IF EXISTS jobs_running_lease_idx;
DROP INDEX CONCURRENTLY IF EXISTS jobs_running_queue_idx;
