-- Done jobs that leave no row, counted (issue 24). At PGDRAIN_RETENTION_SECONDS=0, the
-- default from this release, a drain deletes a done job in the statement that finishes it
-- (job_complete_forget_batch); that statement adds the jobs it deleted here, per queue, job
-- type and minute, so that `pgdrain stats` and `top` still say how many finished in the
-- last minute and hour (job_overview_by_queue_type adds these to the done rows still kept).
-- One row a minute per queue and type, rewritten by each finishing statement (a batch, not
-- a job): `done` is in no index, so the rewrite is HOT and stays on its page, which the
-- fillfactor leaves room for. The janitor's purge deletes the rows older than an hour
-- (job_purge_done_batch).
CREATE TABLE pgdrain_done_counts (
    queue    text        NOT NULL,
    job_type text        NOT NULL,
    minute   timestamptz NOT NULL,
    done     bigint      NOT NULL CHECK (done > 0),
    PRIMARY KEY (queue, job_type, minute)
) WITH (fillfactor = 50);

-- As 0019: roles that could delete jobs (the drain's, or one app role) may count there too,
-- so that an upgrade does not stop a drain's first finish (every drain writes it, and its
-- janitor purges it).
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'DELETE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s',
                       'pgdrain_done_counts',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
