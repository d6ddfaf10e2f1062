-- Unique windows (`unique_for`): an enqueue finds the newest job of its dedupe key created in the
-- window. Live ones (pending, running) are in jobs_dedupe_key_live_idx already; done ones are
-- here. Only done jobs that had a key: an insert never touches it, and jobs without a key
-- (most) never enter it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_dedupe_key_done_idx ON jobs (dedupe_key, created_at)
    WHERE dedupe_key IS NOT NULL AND status = 'done';
