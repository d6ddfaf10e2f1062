-- What the janitor needs to tell a job that ran from one that never started.
--
-- The claim spends an attempt for every job of its batch, but a drain runs them one after
-- another: when it dies (out of memory, killed at the function's timeout, a crash), only the
-- job it was running started, and nothing durable says which one that was. Recording every
-- start would cost a round trip per job, so it is recorded only where it is needed:
--
-- lost_claims  how many times a drain lost this job's claim without a record that the job
--              had started. The janitor refunds such an attempt (never charging or dead-
--              lettering a job that may not have run) and counts it here. From then on the
--              job is claimed alone, ahead of the rest, its start recorded by the claim.
-- started_at   when the current claim started the job, for jobs with lost_claims > 0 (NULL
--              otherwise, and reset by every claim). A lease that expires with a recorded
--              start is charged as before, so a job that kills its worker every time still
--              ends failed after max_attempts.
--
-- Both are new columns with constant defaults: no table rewrite and no scan, so the migration
-- takes its lock only for a moment on a table of any size.

ALTER TABLE jobs
    ADD COLUMN lost_claims int NOT NULL DEFAULT 0,
    ADD COLUMN started_at  timestamptz;
