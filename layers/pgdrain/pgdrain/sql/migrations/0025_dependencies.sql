-- Dependencies (issue 26): a job enqueued with depends_on waits, status `waiting`, until its
-- parents have finished: every one done (after = 'done', the default), or each done, failed or
-- cancelled (after = 'finished', a batch's callback). No claim reads a waiting job: every
-- claim index is partial on pending, so a waiting job costs the claim nothing.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_status_check,
    ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled', 'waiting')) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_status_check;
-- Of a job with parents: how many have not finished yet, and what it waits for. NULL: none.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS parents_left integer;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS after_parents text;
-- Of a parent: some job waits for it. Only such a row's finish runs the trigger below, so a
-- queue without dependencies pays nothing for them. A constant default: nothing rewritten.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS has_children boolean NOT NULL DEFAULT false;
-- The parent whose end cancelled this job: requeueing that parent brings it back.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS cancelled_by bigint;

-- One row per parent and child. The parent's end is recorded here (its status, its result)
-- when it finishes, so a child reads its parents' results even after retention purged them.
CREATE TABLE IF NOT EXISTS job_edges (
    parent_id     bigint NOT NULL,
    child_id      bigint NOT NULL,
    parent_status text,
    parent_result jsonb,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS job_edges_child_idx ON job_edges (child_id);

-- A parent finished (done, failed or cancelled): its end is recorded on its edges, and each
-- child counts one parent fewer (parents_left: the edges not finished). A waiting child with
-- none left becomes due; one waiting for its parents to be done is cancelled instead when this
-- one was not, naming it (cancelled_by, last_error), and, being a job that ended, its own
-- children follow. Each edge counts once (only the edges this end records), and the children
-- are locked in id order under their row lock, so parents finishing together in different
-- drains neither lose nor double a count. A child a parent cancelled keeps counting: should
-- that parent be requeued, the child waits again for what is really left.
-- A parent deleted before it finished (pgdrain delete) counts as cancelled.
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
          AND (c.status = 'waiting' OR (c.status = 'cancelled' AND c.cancelled_by IS NOT NULL))
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

-- A parent that had finished runs again (requeued): its edges wait for it again, and each
-- child counts it again. A child still waiting goes on waiting; a child this parent's end
-- cancelled waits again, unless another parent it needed done ended badly too (it then
-- stays cancelled, naming that one), and, being a job that comes back, brings back the
-- children its end cancelled. A child that already ran stays as it is: it ran on the
-- parent's first end.
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
          AND (c.status = 'waiting' OR (c.status = 'cancelled' AND c.cancelled_by IS NOT NULL))
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

-- A child's edges go with its row (retention, pgdrain delete); a parent's stay while a child
-- may still read them.
CREATE OR REPLACE FUNCTION pgdrain_child_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_edges WHERE child_id = OLD.id;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS jobs_child_deleted ON jobs;
CREATE TRIGGER jobs_child_deleted
    AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.after_parents IS NOT NULL)
    EXECUTE FUNCTION pgdrain_child_deleted();

DROP TRIGGER IF EXISTS jobs_parent_finished ON jobs;
CREATE TRIGGER jobs_parent_finished
    AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.has_children AND NEW.status IN ('done', 'failed', 'cancelled')
          AND OLD.status NOT IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgdrain_parent_finished();

DROP TRIGGER IF EXISTS jobs_parent_deleted ON jobs;
CREATE TRIGGER jobs_parent_deleted
    AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.has_children AND OLD.status NOT IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgdrain_parent_finished();

DROP TRIGGER IF EXISTS jobs_parent_reopened ON jobs;
CREATE TRIGGER jobs_parent_reopened
    AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.has_children AND OLD.status IN ('done', 'failed', 'cancelled')
          AND NEW.status NOT IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgdrain_parent_reopened();

-- As 0022: roles that could update jobs (an app role, the enqueue function's, the drain's)
-- reach the edges too, so that an upgrade does not stop their writes once a job has parents
-- (the triggers above run as the role whose write fired them).
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s', 'job_edges',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
