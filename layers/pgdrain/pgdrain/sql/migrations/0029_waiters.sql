-- Awaiting a result (issue 28): pgdrain.wait(conn, job_id) and GET /jobs/{id}?wait=N. A
-- waiter LISTENs on the channel pgdrain_wait and writes a row here naming the job it waits
-- for and its backend; the statements that finish jobs NOTIFY pgdrain_wait (payload: the
-- job's id) only for jobs that have a row here, so a finish nobody waits for costs one probe
-- of this (normally empty) table per statement and never takes the server's notify lock at
-- commit. The waiter deletes its row when it returns; the janitor deletes the rows of
-- backends that are gone. UNLOGGED: a waiter does not outlive a server crash, so neither
-- need its row, and registering writes no WAL.
CREATE UNLOGGED TABLE IF NOT EXISTS pgdrain_waiters (
    job_id bigint      NOT NULL,
    pid    int         NOT NULL,
    since  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, pid)
);

-- As 0026: roles that could update jobs reach the waiters too (an app or the enqueue function
-- waits, the drain's finishes probe the table, its janitor deletes what dead backends left).
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %s TO %s', 'pgdrain_waiters',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
