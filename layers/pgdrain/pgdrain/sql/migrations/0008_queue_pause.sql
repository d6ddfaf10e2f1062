-- Per-queue state an operator changes at run time. A queue needs no row: a queue without one
-- runs with the defaults. paused_at set: no claim that starts after the pause commits takes
-- the queue's jobs (`pgdrain pause`, POST /queues/{queue}/pause); enqueueing goes on, jobs
-- already running finish. The claim reads the paused queues once per statement: with none
-- paused, one empty scan of this (tiny) table.
CREATE TABLE pgdrain_queues (
    queue      text PRIMARY KEY CHECK (queue <> '' AND length(queue) <= 200),
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %s TO %s', 'pgdrain_queues',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
