-- Signals (issue 26): a job that raised WaitFor(name, timeout) waits, status `waiting`, for
-- the signal `name` (wait_signal) until its timeout (run_at), holding no drain and no attempt.
-- pgdrain.signal(conn, name, payload) makes every job waiting for it due, with the payload in
-- wait_result; the janitor makes one whose timeout passed due with none. wait_result stays
-- with the job (its runs read it as job.signal) until it waits again. Nullable, no default:
-- adding these rewrites nothing.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS wait_signal text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS wait_result jsonb;

-- One row per signal name: sent (sent_at, payload), kept until expires_at for the jobs that
-- wait for it later; or not yet sent, a job waiting for it (expires_at: the last of their
-- timeouts). Both sides write this row before they look at the other's (the row lock orders
-- them), so a signal sent while a job is entering its wait is never lost. The janitor deletes
-- expired rows.
CREATE TABLE IF NOT EXISTS pgdrain_signals (
    name       text PRIMARY KEY,
    payload    jsonb,
    sent_at    timestamptz,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS pgdrain_signals_expires_idx ON pgdrain_signals (expires_at);

-- What a signal wakes (by name) and what the janitor times out (soonest first): the jobs
-- waiting for a signal, and only those (empty unless WaitFor is used).
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_waiting_signal_idx ON jobs (wait_signal)
    WHERE status = 'waiting' AND wait_signal IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_signal_timeout_idx ON jobs (run_at)
    WHERE status = 'waiting' AND wait_signal IS NOT NULL;
-- What `pgdrain stats` counts of the jobs waiting, for their parents or a signal, per queue
-- and type (job_overview_by_queue_type): empty unless jobs wait.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_waiting_idx ON jobs (queue, job_type)
    WHERE status = 'waiting';

-- A job waiting for a signal is live: it holds its dedupe key as a pending or running one does
-- (an enqueue with the key gets its id). The live key index takes `waiting` in: built beside
-- the old one, which then goes (no job waited for a signal before this migration, and one
-- waiting for its parents holds no key: depends_on refuses dedupe_key).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_dedupe_key_live_or_waiting_idx
    ON jobs (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running', 'waiting');
DROP INDEX CONCURRENTLY IF EXISTS jobs_dedupe_key_live_idx;

-- As 0025, but a job waiting for a signal is not waiting for its parents: it had run (its
-- parents had ended) and raised WaitFor. A parent requeued after that leaves it as it is,
-- as any child that already ran.
CREATE OR REPLACE FUNCTION pgdrain_parent_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent bigint := CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END;
    ended text := CASE WHEN TG_OP = 'DELETE' THEN 'cancelled' ELSE NEW.status END;
BEGIN
    WITH recorded AS (
        UPDATE job_edges
        SET parent_status = ended,
            parent_result = CASE WHEN ended = 'done' THEN NEW.result END
        WHERE parent_id = parent AND parent_status IS NULL
        RETURNING child_id
    ), children AS (
        SELECT c.id,
               c.status = 'waiting' AND c.after_parents = 'done'
                   AND ended <> 'done' AS cancels
        FROM jobs AS c
        WHERE c.id IN (SELECT child_id FROM recorded)
          AND ((c.status = 'waiting' AND c.wait_signal IS NULL)
               OR (c.status = 'cancelled' AND c.cancelled_by IS NOT NULL))
        ORDER BY c.id
        FOR UPDATE
    )
    UPDATE jobs AS c
    SET parents_left = c.parents_left - 1,
        status       = CASE WHEN c.status <> 'waiting' THEN c.status
                            WHEN k.cancels THEN 'cancelled'
                            WHEN c.parents_left <= 1 THEN 'pending'
                            ELSE 'waiting' END,
        cancelled_by = CASE WHEN k.cancels THEN parent ELSE c.cancelled_by END,
        finished_at  = CASE WHEN k.cancels THEN now() ELSE c.finished_at END,
        last_error   = CASE WHEN k.cancels
                            THEN format('parent job %s ended %s', parent, ended)
                            ELSE c.last_error END,
        run_at       = CASE WHEN c.status = 'waiting' AND NOT k.cancels AND c.parents_left <= 1
                            THEN greatest(c.run_at, now()) ELSE c.run_at END,
        updated_at   = now()
    FROM children AS k
    WHERE c.id = k.id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION pgdrain_parent_reopened() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH reopened AS (
        UPDATE job_edges
        SET parent_status = NULL, parent_result = NULL
        WHERE parent_id = NEW.id AND parent_status IS NOT NULL
        RETURNING child_id
    ), children AS (
        SELECT c.id,
               c.status = 'cancelled' AND c.cancelled_by = NEW.id AS revived,
               (SELECT min(e.parent_id) FROM job_edges AS e
                WHERE e.child_id = c.id AND e.parent_id <> NEW.id
                  AND e.parent_status IN ('failed', 'cancelled')) AS other_bad
        FROM jobs AS c
        WHERE c.id IN (SELECT child_id FROM reopened)
          AND ((c.status = 'waiting' AND c.wait_signal IS NULL)
               OR (c.status = 'cancelled' AND c.cancelled_by IS NOT NULL))
        ORDER BY c.id
        FOR UPDATE
    )
    UPDATE jobs AS c
    SET parents_left = c.parents_left + 1,
        status       = CASE WHEN k.revived AND k.other_bad IS NULL THEN 'waiting'
                            ELSE c.status END,
        cancelled_by = CASE WHEN k.revived THEN k.other_bad ELSE c.cancelled_by END,
        finished_at  = CASE WHEN k.revived AND k.other_bad IS NULL THEN NULL
                            ELSE c.finished_at END,
        last_error   = CASE WHEN k.revived AND k.other_bad IS NULL THEN NULL
                            WHEN k.revived
                            THEN format('parent job %s ended %s', k.other_bad,
                                        (SELECT e.parent_status FROM job_edges AS e
                                         WHERE e.parent_id = k.other_bad AND e.child_id = c.id))
                            ELSE c.last_error END,
        updated_at   = now()
    FROM children AS k
    WHERE c.id = k.id;
    RETURN NULL;
END $$;

-- As 0022 and 0025: roles that could update jobs reach the signals too (an app role sends
-- them, the drain's waits and purges them).
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s', 'pgdrain_signals',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
