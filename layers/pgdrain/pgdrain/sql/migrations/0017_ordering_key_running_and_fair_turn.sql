-- The running jobs that hold an ordering key, by key: what the claims' ordering-key test
-- (the job_ordering_head fragment) probes to know whether a key's job runs, one index entry,
-- instead of reading every live job of the key (and its row) in jobs_ordering_key_live_idx to
-- find one running: 20 row reads a claimed job with 20 jobs a key, a key's whole backlog with
-- more. Only keyed jobs while they run, so a small index; building it reads the table once,
-- under a lock that holds writes back (seconds on a table of millions).
CREATE INDEX jobs_ordering_key_running_idx ON jobs (ordering_key)
    WHERE status = 'running' AND ordering_key IS NOT NULL;

-- The fair claim's turn (job_claim_fair): the last tenant a fair claim served, one row. The
-- next fair claim starts with the tenants after it, wrapping, so that it reads the tenants it
-- serves, not every tenant with a due job (1,000 tenants made each claim probe 1,000). Fair
-- claims take turns on the row: each holds it for its one statement.
CREATE TABLE pgdrain_fair_turn (
    only_row   bool PRIMARY KEY DEFAULT true CHECK (only_row),
    tenant     text
);
INSERT INTO pgdrain_fair_turn DEFAULT VALUES;

DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON %I TO %s', 'pgdrain_fair_turn',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
