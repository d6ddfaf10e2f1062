-- Flow control (issue 15): rate limits per queue and per job type, ordering keys, tenants.

-- A job with an ordering_key runs only when no other job of its key is running and none
-- enqueued before it (lower id) is still pending: one at a time, in order, across all drains.
-- A retrying job stays pending with its id, so it holds its key. Only live keyed jobs are in
-- the index: jobs without a key (most) never enter it.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS ordering_key text,
    DROP CONSTRAINT IF EXISTS jobs_ordering_key_check,
    ADD CONSTRAINT jobs_ordering_key_check
    CHECK (ordering_key IS NULL OR char_length(ordering_key) BETWEEN 1 AND 500) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_ordering_key_check;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_ordering_key_live_idx ON jobs (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running');

-- A tenant shares its queue fairly: while pending jobs name tenants, the claim takes from
-- each tenant in turn (job_claim_fair), reading each tenant's first jobs off this index.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS tenant text,
    DROP CONSTRAINT IF EXISTS jobs_tenant_check,
    ADD CONSTRAINT jobs_tenant_check
    CHECK (tenant IS NULL OR char_length(tenant) BETWEEN 1 AND 200) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_tenant_check;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_pending_tenant_idx
    ON jobs (tenant, priority, run_at, id)
    WHERE status = 'pending' AND tenant IS NOT NULL;

-- A queue's rate limit (`pgdrain queue set QUEUE --rate 10/s`): at most rate_limit starts in
-- any rate_period seconds, across all drains. rate_starts is the window: pairs [epoch seconds,
-- jobs started, ...], one per claim of the last period (the claim appends and trims them under
-- the queue row's lock; see pgdrain.flow).
ALTER TABLE pgdrain_queues
    ADD COLUMN IF NOT EXISTS rate_limit int CHECK (rate_limit BETWEEN 1 AND 10000),
    ADD COLUMN IF NOT EXISTS rate_period float8 CHECK (rate_period > 0),
    ADD COLUMN IF NOT EXISTS rate_starts float8[] NOT NULL DEFAULT '{}',
    DROP CONSTRAINT IF EXISTS pgdrain_queues_rate_check,
    ADD CONSTRAINT pgdrain_queues_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL));

-- A job type's rate limit (`@pgdrain.job(..., rate="100/min")`): declared in code, written
-- here by the drains that run the type, so that every drain counts the same starts.
CREATE TABLE IF NOT EXISTS pgdrain_type_rates (
    job_type    text PRIMARY KEY CHECK (job_type <> '' AND length(job_type) <= 200),
    rate_limit  int NOT NULL CHECK (rate_limit BETWEEN 1 AND 10000),
    rate_period float8 NOT NULL CHECK (rate_period > 0),
    rate_starts float8[] NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- As 0008: roles that could update jobs may use the new table too.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %s TO %s', 'pgdrain_type_rates',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
