-- Jobs longer than an invocation (issue 26): the state a resumable job's handler saved with
-- job.checkpoint(state), which its next run reads back as job.state. NULL: none saved. Kept
-- by retries, Continue, snoozes, reclaims and requeues (a requeued job resumes where it
-- was); a finished job's row takes it away when it goes. Nullable without a default: adding
-- it rewrites nothing, whatever the table's size.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS state jsonb;
