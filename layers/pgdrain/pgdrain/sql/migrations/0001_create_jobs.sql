-- The jobs table: the seed article's eight columns with their meanings unchanged, plus what a
-- production queue needs. Plain SQL keeps working:
--   INSERT INTO jobs (job_type, payload) VALUES ('send-email', '{"to": "a@example.com"}');
--   UPDATE jobs SET status = 'pending', run_at = now() WHERE status = 'failed';

CREATE TABLE jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_type         text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}',
    status           text        NOT NULL DEFAULT 'pending',
    attempts         int         NOT NULL DEFAULT 0,
    max_attempts     int         NOT NULL DEFAULT 3,
    run_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    queue            text        NOT NULL DEFAULT 'default',
    -- Lower runs first, as in Oban and River; 0 is the default.
    priority         smallint    NOT NULL DEFAULT 0,
    -- The lease: stamped by the claim, cleared when the job leaves 'running'. Every finishing
    -- write is guarded by lease_token, so a worker whose lease was reclaimed changes nothing.
    claimed_at       timestamptz,
    lease_expires_at timestamptz,
    lease_token      uuid,
    last_error       text,
    -- One object per failed attempt: {"attempt": n, "at": timestamptz, "error": text}.
    errors           jsonb       NOT NULL DEFAULT '[]',
    dedupe_key       text,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT jobs_status_check
        CHECK (status IN ('pending', 'running', 'done', 'failed')),
    CONSTRAINT jobs_job_type_check
        CHECK (char_length(job_type) BETWEEN 1 AND 200),
    CONSTRAINT jobs_queue_check
        CHECK (char_length(queue) BETWEEN 1 AND 200),
    CONSTRAINT jobs_attempts_check
        CHECK (attempts >= 0),
    CONSTRAINT jobs_max_attempts_check
        CHECK (max_attempts >= 1),
    CONSTRAINT jobs_dedupe_key_check
        CHECK (dedupe_key IS NULL OR char_length(dedupe_key) BETWEEN 1 AND 500),
    CONSTRAINT jobs_errors_is_array
        CHECK (jsonb_typeof(errors) = 'array')
);

-- The claim: due pending jobs in (priority, run_at, id) order. Only pending rows are indexed, so
-- the claim never wades through finished history.
CREATE INDEX jobs_pending_idx ON jobs (priority, run_at, id) WHERE status = 'pending';

-- The janitor: running rows by lease expiry (the seed's "small index of its own").
CREATE INDEX jobs_running_lease_idx ON jobs (lease_expires_at) WHERE status = 'running';

-- The purge: finished rows by age, so deleting old 'done' rows never scans the table.
CREATE INDEX jobs_done_finished_idx ON jobs (finished_at) WHERE status = 'done';

-- A dedupe key is unique among live jobs only; once a job is done or failed its key is free.
CREATE UNIQUE INDEX jobs_dedupe_key_live_idx ON jobs (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running');

-- Every claim and finish rewrites a row and leaves a dead tuple (the seed's vacuum warning).
-- Vacuum this table after 2 % of it changes instead of the default 20 %, so dead tuples are
-- cleared long before the claim index bloats.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05
);
