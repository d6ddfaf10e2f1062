-- Dead-letter hooks that do not depend on which process fails a job. A drain records here the
-- job types its modules give an on_failed hook (`@pgdrain.job(..., on_failed=fn)`), once per
-- cold start; every statement that ends jobs failed (job_finish_batch, janitor_expire_batch)
-- reads it, so that the CLI's `pgdrain janitor`, which loads no job modules, and a library
-- caller of run_janitor or pgdrain.fail enqueue the hook's job as a drain does. A type whose
-- hook was removed keeps its row: its failures then enqueue hook jobs that end failed (no hook
-- to call); delete the row to stop that.
CREATE TABLE pgdrain_hooked_types (
    job_type   text PRIMARY KEY CHECK (job_type <> '' AND length(job_type) <= 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- As 0008, 0009 and 0013: roles that could update jobs may use the new table too (every
-- failing write reads it; a drain with hooks inserts its types), so that an upgrade does not
-- stop a drain granted jobs alone. No UPDATE: a declared row is never changed.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT ON %s TO %s', 'pgdrain_hooked_types',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
