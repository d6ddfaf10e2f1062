-- What the drains' job modules declare as periodic jobs (issue 25): one row per schedule
-- entry, rewritten by a drain once per container (the set replaces the last one: an entry
-- no longer declared is removed), so that `pgdrain schedules` tells the truth about the
-- database without the application's job modules on the operator's machine.
-- pgdrain_schedules keeps each entry's latest tick (the drains' race on a tick stays there).
CREATE TABLE pgdrain_schedule_declarations (
    name        text PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    cron        text NOT NULL,
    tz          text,
    job_type    text NOT NULL,
    queue       text NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now()
);

-- As 0009: roles that could update jobs (the drain's) may declare too, so that an upgrade
-- does not stop a drain's first pass.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s',
                       'pgdrain_schedule_declarations',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
