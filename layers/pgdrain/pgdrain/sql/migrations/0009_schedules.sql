-- Periodic jobs (`@pgdrain.job(..., cron=...)`, `pgdrain.schedule(...)`): one row per schedule
-- entry, by name, holding the latest tick enqueued for it. A drain enqueues a tick only by
-- moving last_tick forward in the same transaction as the job's insert, so however many drains
-- race on a tick, one enqueues it (the row lock orders them; the others find it moved). The
-- job's dedupe key names the entry and the tick as well. An entry no longer declared keeps its
-- row and is never enqueued again.
CREATE TABLE pgdrain_schedules (
    name        text PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    last_tick   timestamptz NOT NULL,
    last_job_id bigint,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Roles that could update jobs before (the functions' roles of docs/database-roles.md) may use
-- this table too, so that an upgrade does not stop a drain whose role was granted only jobs.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %s TO %s', 'pgdrain_schedules',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
